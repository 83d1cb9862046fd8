"""The request context carried through the API, RPC and the database layer."""

from oslo_context import context as oslo_context

SERVICE_ROLE = 'service'


class RequestContext(oslo_context.RequestContext):
    """oslo.context's RequestContext plus whether a service made the call.

    ``cyborg.db`` makes it an enginefacade transaction context provider
    when the database layer is imported, so processes without a database
    (the agent) never load SQLAlchemy.

    ``is_service`` is True when the request carried a valid service token
    (Nova's), which the binding and instance-wide delete paths require.

    ``answer_by``: when the caller of an RPC call stops waiting for its
    answer (seconds since the epoch, its clock), or None.  The API sets it
    on each call to the conductor, which then drops a call it comes to
    only after that: the API answered 503 and nothing may be written.
    """

    def __init__(self, is_service=False, answer_by=None,
                 sees_every_project=None, **kwargs):
        super().__init__(**kwargs)
        self.is_service = is_service
        self.answer_by = answer_by
        self._sees_every_project = (None if sees_every_project is None
                                    else bool(sees_every_project))

    @property
    def sees_every_project(self):
        """Whether the caller sees and changes every project's ARQs;
        anyone else sees only its own project's.

        The API decides it, with ``is_admin``, from the policy's own base
        rules (``cyborg.api.dispatch``): an admin or a service as the
        operator's ``admin`` and ``service`` rules have them (a request
        with a service token passes the default ``service`` rule, not
        necessarily an operator's).  It travels to the conductor with
        the rest of the context.  A context nobody decided it for (the
        service's own work, a test's) sees every project only when it is
        an admin's or carries a service token: never by a role's name.
        """
        if self._sees_every_project is not None:
            return self._sees_every_project
        return bool(self.is_admin or self.is_service)

    @sees_every_project.setter
    def sees_every_project(self, value):
        self._sees_every_project = bool(value)

    def to_dict(self):
        values = super().to_dict()
        values['is_service'] = self.is_service
        values['sees_every_project'] = self.sees_every_project
        if self.answer_by is not None:
            values['answer_by'] = self.answer_by
        return values

    @classmethod
    def from_dict(cls, values, **kwargs):
        kwargs.setdefault('is_service', values.get('is_service', False))
        kwargs.setdefault('answer_by', values.get('answer_by'))
        if 'sees_every_project' in values:
            kwargs.setdefault('sees_every_project',
                              values['sees_every_project'])
        else:
            # From an API of an earlier release (a rolling upgrade): it
            # decided by the role names, as its own handlers did, and its
            # is_admin is the role's.
            kwargs.setdefault('sees_every_project', bool(
                values.get('is_admin') or values.get('is_service')
                or SERVICE_ROLE in (r.lower() for r in
                                    values.get('roles') or ())))
        return super().from_dict(values, **kwargs)

    def elevated(self):
        ctx = self.__class__.from_dict(self.to_dict())
        ctx.is_admin = True
        ctx.sees_every_project = True
        if 'admin' not in ctx.roles:
            ctx.roles = list(ctx.roles) + ['admin']
        return ctx


def get_admin_context(**kwargs):
    """A context for the service's own work (periodic jobs, agent reports)."""
    return RequestContext(is_admin=True, roles=['admin'], overwrite=False,
                          **kwargs)
