"""Accelerator requests (ARQs): /v2/accelerator_requests[/{uuid}].

Ownership: a caller that is neither admin nor a service sees and changes
only its own project's ARQs; another project's ARQ is "not found".
Binding, unbinding, deleting a bound ARQ and deleting by instance are for
services (Nova's service token) only; an ARQ allocated standalone
(``allocate``, 2.6) may also be deleted by an admin or a service role.
"""

from oslo_utils import uuidutils

from cyborg.api import microversion
from cyborg.api.controllers import base
from cyborg.api.schemas import accelerator_requests as schema
from cyborg.api.views import accelerator_requests as view
from cyborg.common import exception
from cyborg.common import states
from cyborg.objects import accelerator_requests as arq_objects
from cyborg.objects.accelerator_requests import AcceleratorRequest
from cyborg.objects import device_profiles as profile_objects
from cyborg.objects.device_profiles import DeviceProfile
from cyborg.policies import accelerator_requests as policy



def list_arqs(r):
    query = r.query
    if 'bind_state' in query and 'instance' in query:
        # Whether every ARQ of the instance is resolved: all of them, in
        # one answer.
        paging = sorted({'limit', 'marker'} & set(query))
        if paging:
            raise exception.Invalid(reason=f'{paging[0]}: not with '
                                           f'bind_state (an instance\'s '
                                           f'ARQs come in one answer)')
        arqs = AcceleratorRequest.list(
            r.context, _owner(r),
            instance_uuid=base.canonical_uuid(query['instance']))
        pending = [a.uuid for a in arqs if a.state not in states.ARQ_RESOLVED]
        if pending:
            raise exception.Locked(
                reason='accelerator requests of instance %s are still '
                       'binding: %s' % (query['instance'],
                                        ', '.join(pending)))
        return {'arqs': [view.show(r, a) for a in arqs]}
    # ?bind_state=resolved alone (as in OpenStack Cyborg) is a filter: the
    # caller's ARQs in a resolved state, the same ones as above.
    states_wanted = (states.ARQ_RESOLVED if 'bind_state' in query
                     else None)
    arqs = base.read_page(r, 'accelerator request', lambda limit, marker: (
        AcceleratorRequest.list(r.context, _owner(r),
                                instance_uuid=base.canonical_uuid(
                                    query.get('instance')),
                                limit=limit, marker=marker,
                                states=states_wanted)))
    return base.paged(r, 'arqs', 'accelerator_requests', arqs, view.show)


def show_arq(r, uuid):
    return view.show(r, _find(r, uuid))


def create_arqs(r):
    """POST {"device_profile_name": n}: ARQs for every unit of every group,
    owned by the caller's project (the user's, when Nova asks).  A profile
    the project may not see is not found, as if it did not exist."""
    name = r.body['device_profile_name']
    visible_to = profile_objects.visible_to(r.context)
    if r.conductor.can_create_by_name():
        # One call: the conductor finds the profile in its transaction.
        created = r.conductor.arq_create_by_name(
            r.context, device_profile_name=name,
            project_id=r.context.project_id, visible_to=visible_to)
    else:
        # Conductors older than RPC 1.4 (a rolling upgrade).
        profile = DeviceProfile.get_by_name(r.context, name, visible_to)
        if profile is None:
            raise exception.DeviceProfileNotFound(name=name)
        created = r.conductor.arq_create(r.context,
                                         device_profile_uuid=profile.uuid,
                                         project_id=r.context.project_id)
    # The conductor returns the rows it wrote: rendered, not read again.
    return {'arqs': [view.show(r, AcceleratorRequest.from_dict(item))
                     for item in created]}


def allocate_arq(r, uuid):
    """POST /{uuid}/allocate {consumer_id, consumer_type[, hostname]}
    (microversion 2.6, admins and services): claim an accelerator in
    Placement for the ARQ and bind it, without Nova; answers the Bound
    ARQ.  409 when no free accelerator matches or another allocation won
    the last one."""
    arq = _find(r, uuid)
    body = r.body
    r.conductor.arq_allocate(r.context, arq_uuid=arq.uuid,
                             consumer_id=body['consumer_id'],
                             consumer_type=body['consumer_type'],
                             hostname=body.get('hostname'))
    return view.show(r, _find(r, arq.uuid))


def bind_or_unbind_arqs(r):
    """PATCH {arq uuid: [json patch ops]}: all 'add' binds, all 'remove'
    unbinds; answers 202 once the conductor has taken the work."""
    _bind_or_unbind(r, r.body)


def bind_or_unbind_arq(r, uuid):
    """PATCH /{uuid} {uuid: [json patch ops]}: the same for one ARQ, on
    its own URL (what openstacksdk and both CLIs send)."""
    patch = r.body
    if [base.canonical_uuid(key) for key in patch] != [uuid]:
        raise exception.Invalid(
            reason='the body must patch the accelerator request of the '
                   'URL, %s, and only it' % uuid)
    _bind_or_unbind(r, patch)


def _bind_or_unbind(r, patch):
    ops = {op['op'] for ops in patch.values() for op in ops}
    if len(ops) != 1:
        raise exception.Invalid(
            reason='all operations must be "add" (bind) or all "remove" '
                   '(unbind)')
    uuids = [base.canonical_uuid(u) for u in patch]
    if len(set(uuids)) != len(uuids):
        raise exception.Invalid(reason='an accelerator request is named '
                                       'twice (spelled two ways)')
    bindings = None
    if ops == {'add'}:
        bindings = {uuid: _binding(uuid, changes)
                    for uuid, changes in zip(uuids, patch.values())}
    _check_project_path(r, patch)
    _require_service(r, 'Binding or unbinding accelerator requests')
    # The conductor answers 404 for ARQs the caller cannot see (in the
    # transaction that binds them): no read here first.
    if bindings is not None:
        r.conductor.arq_bind(r.context, bindings=bindings)
    else:
        r.conductor.arq_unbind(r.context, arq_uuids=uuids)


def delete_arqs(r):
    """DELETE ?arqs=u1,u2 or ?instance=I."""
    query = r.query
    if 'instance' in query:
        _require_service(r, 'Deleting the accelerator requests of an '
                            'instance')
        r.conductor.arq_delete(
            r.context, instance_uuid=base.canonical_uuid(query['instance']))
        return
    uuids = base.split_csv(query['arqs'])
    if not uuids:
        raise exception.Invalid(reason='arqs: no accelerator request named')
    for uuid in uuids:
        if not uuidutils.is_uuid_like(uuid):
            raise exception.Invalid(reason='arqs: %s is not a uuid' % uuid)
    # As stored, each once however often and however it was spelled.
    _delete(r, list(dict.fromkeys(base.canonical_uuid(u) for u in uuids)))


def delete_arq(r, uuid):
    _delete(r, [uuid])


def _delete(r, uuids):
    """Delete the caller's ARQs among ``uuids``; 404 (after deleting the
    others) when any is missing or not the caller's.  The conductor checks
    who may delete a bound one (a 403 deletes nothing); one older than
    1.5 cannot, and the ARQs are read here first."""
    owner = _owner(r)
    if r.conductor.can_guard_delete():
        missing = r.conductor.arq_delete_guarded(r.context, uuids)
        if missing:
            raise exception.ARQNotFound(uuid=', '.join(sorted(missing)))
        return
    visible = AcceleratorRequest.list(r.context, owner, uuids=uuids)
    arq_objects.check_may_delete(r.context, visible)
    missing = set(uuids) - {a.uuid for a in visible}
    if visible:
        not_found = r.conductor.arq_delete(
            r.context, arq_uuids=[a.uuid for a in visible])
        missing.update(not_found or [])
    if missing:
        raise exception.ARQNotFound(uuid=', '.join(sorted(missing)))


def _owner(r):
    """The project whose ARQs the caller may see and change; None for all.

    403 for a caller that neither sees every project nor names one (a
    policy that let it in): it owns no ARQ, and None would be all of
    them."""
    if r.context.sees_every_project:
        return None
    if not r.context.project_id:
        raise exception.Forbidden(
            reason='the request names no project, and a caller sees and '
                   'changes only its project\'s accelerator requests '
                   '(admins and services every project\'s)')
    return r.context.project_id


def _find(r, uuid):
    arq = AcceleratorRequest.get(r.context, uuid, _owner(r))
    if arq is None:
        raise exception.ARQNotFound(uuid=uuid)
    return arq


def _require_service(r, action):
    if not r.context.is_service:
        raise exception.ServiceTokenRequired(action=action)


def _check_project_path(r, patch):
    """/project_id: microversion 2.1 and admins only."""
    named = any(op['path'] == schema.PROJECT_PATH
                for ops in patch.values() for op in ops)
    if not named:
        return
    if not r.version.matches(microversion.BIND_PROJECT_ID):
        raise exception.NotAcceptable(
            reason='/project_id in a bind needs microversion 2.1 or later')
    if not r.context.is_admin:
        raise exception.PolicyNotAuthorized(
            action=policy.UPDATE + ' (/project_id)')


def _binding(uuid, changes):
    """{hostname, device_rp_uuid, instance_uuid[, project_id]} of a bind."""
    values = {}
    for change in changes:
        field = change['path'].lstrip('/')
        if field in values:
            raise exception.Invalid(reason='%s: %s given twice' % (uuid,
                                                                  field))
        if 'value' not in change:
            raise exception.Invalid(reason='%s: %s has no value' % (uuid,
                                                                   field))
        values[field] = change['value']
    missing = [p.lstrip('/') for p in schema.BIND_PATHS
               if p.lstrip('/') not in values]
    if missing:
        raise exception.Invalid(reason='%s: missing %s' % (
            uuid, ', '.join(missing)))
    for field in ('device_rp_uuid', 'instance_uuid'):
        if not uuidutils.is_uuid_like(values[field]):
            raise exception.Invalid(reason='%s: %s is not a uuid' % (
                uuid, field))
        values[field] = base.canonical_uuid(values[field])
    return values
