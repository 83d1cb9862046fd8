"""Remote (fabric-attached) accelerator pools (microversion 2.8):
GET/POST /v2/remote_pools, GET/DELETE /v2/remote_pools/{name_or_uuid}.
The list is paged from microversion 2.12, as the others are from 2.11."""

from oslo_utils import uuidutils

from cyborg.api import microversion
from cyborg.api.controllers import base
from cyborg.api.views import remote_pools as view
from cyborg.common import exception
from cyborg.objects.remote_pools import RemotePool


def list_remote_pools(r):
    """Pools are no project's: every caller allowed to list them lists
    them all, so a marker is any pool's uuid."""
    since = microversion.REMOTE_POOLS_PAGED
    pools = base.read_page(
        r, 'remote pool', lambda limit, marker: RemotePool.list(
            r.context, r.query.get('name'), limit, marker), since)
    return base.paged(r, 'remote_pools', 'remote_pools', pools, view.show,
                      since=since)


def show_remote_pool(r, name_or_uuid):
    return view.show(r, _find(r, name_or_uuid))


def create_remote_pool(r):
    """Register the pool; answered once Placement holds its provider."""
    uuid = r.conductor.remote_pool_create(r.context,
                                          values=_as_stored(r.body))
    return view.show(r, _find(r, uuid))


def _as_stored(values):
    """The pool's uuids (its own, its aggregates', its handles') as every
    uuid is stored, so that any spelling finds them and they compare with
    Placement's; a name that looks like a uuid is refused (a pool is
    shown and deleted by name or uuid: it would be taken for a uuid)."""
    if uuidutils.is_uuid_like(values['name']):
        raise exception.Invalid(
            reason=f"name: {values['name']!r} looks like a uuid; a remote "
                   f"pool is named by name or uuid, so its name may not")
    values = dict(values, aggregates=list(dict.fromkeys(
        base.canonical_uuid(a) for a in values['aggregates'])), handles=[
        dict(h, uuid=base.canonical_uuid(h['uuid'])) if 'uuid' in h else h
        for h in values['handles']])
    if 'uuid' in values:
        values['uuid'] = base.canonical_uuid(values['uuid'])
    return values


def delete_remote_pool(r, name_or_uuid):
    """Delete a pool nothing uses (409 otherwise)."""
    pool = _find(r, name_or_uuid)
    r.conductor.remote_pool_delete(r.context, pool_uuid=pool.uuid)


def _find(r, name_or_uuid):
    pool = None
    if uuidutils.is_uuid_like(name_or_uuid):
        pool = RemotePool.get_by_uuid(r.context, name_or_uuid)
    if pool is None:
        pool = RemotePool.get_by_name(r.context, name_or_uuid)
    return base.require(pool, 'Remote pool', name_or_uuid)
