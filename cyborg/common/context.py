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

    def __init__(self, is_service=False, answer_by=None, **kwargs):
        super().__init__(**kwargs)
        self.is_service = is_service
        self.answer_by = answer_by

    @property
    def sees_every_project(self):
        """Whether the caller sees and changes every project's ARQs: an
        admin, or a service (the ``service`` role, as the policy's
        ``service`` rule has it, or a service token).  Anyone else sees
        only its own project's."""
        return (self.is_admin or self.is_service
                or SERVICE_ROLE in (r.lower() for r in self.roles))

    def to_dict(self):
        values = super().to_dict()
        values['is_service'] = self.is_service
        if self.answer_by is not None:
            values['answer_by'] = self.answer_by
        return values

    @classmethod
    def from_dict(cls, values, **kwargs):
        kwargs.setdefault('is_service', values.get('is_service', False))
        kwargs.setdefault('answer_by', values.get('answer_by'))
        return super().from_dict(values, **kwargs)

    def elevated(self):
        ctx = self.__class__.from_dict(self.to_dict())
        ctx.is_admin = True
        if 'admin' not in ctx.roles:
            ctx.roles = list(ctx.roles) + ['admin']
        return ctx


def get_admin_context(**kwargs):
    """A context for the service's own work (periodic jobs, agent reports)."""
    return RequestContext(is_admin=True, roles=['admin'], overwrite=False,
                          **kwargs)
