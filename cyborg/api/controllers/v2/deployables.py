"""Deployables: GET /v2/deployables[/{uuid}], PATCH .../{uuid}/program."""

import oslo_messaging as messaging

from cyborg.api import microversion
from cyborg.api.controllers import base
from cyborg.api.views import deployables as view
from cyborg.common import exception
from cyborg.objects.deployables import Deployable


def list_deployables(r):
    query = r.query
    # ?limit=&marker= are taken at every microversion (as in OpenStack
    # Cyborg).  From 2.11 the list is paged like the others (at most
    # [api]max_limit, with a link to the next page); below it, like the
    # others, it is whole unless ?limit= asks for a page: the clients send
    # 2.0 and follow no link, so a cap there would hide deployables.
    max_limit = r.conf.api.max_limit
    limit = None
    if 'limit' in query or r.version.matches(microversion.PAGINATION):
        limit = min(int(query.get('limit', max_limit)), max_limit)
    marker = base.marker_of(r)
    deployables = Deployable.list(r.context, name=query.get('name'),
                                  limit=None if limit is None else limit + 1,
                                  marker=marker,
                                  sort_key=query.get('sort_key', 'id'),
                                  sort_dir=query.get('sort_dir', 'asc'))
    if deployables is None:
        raise exception.ResourceNotFound(resource='Marker deployable',
                                         id=marker)
    return base.paged(r, 'deployables', 'deployables', deployables,
                      view.show, limit)


def show_deployable(r, uuid):
    return view.show(r, _find(r, uuid))


def program_deployable(r, uuid):
    """Program an FPGA deployable with the Glance image named."""
    _find(r, uuid)
    image_uuid = r.body[0]['value'][0]['image_uuid']
    try:
        r.conductor.deployable_program(r.context, deployable_uuid=uuid,
                                       image_uuid=image_uuid)
    except messaging.MessagingTimeout:
        # A vendor tool may take minutes: say where the outcome shows.
        raise exception.ServiceUnavailable(
            reason=f'the conductor did not answer in time. Programming an '
                   f'FPGA can take longer: if the conductor started it, it '
                   f'goes on in the background for up to '
                   f'{r.conf.bind_timeout} s; the deployable shows '
                   f'bitstream_id {image_uuid} once it is loaded (also the '
                   f'deployable.program.end or .error notification)')
    return view.show(r, _find(r, uuid))


def _find(r, uuid):
    return base.require(Deployable.get(r.context, uuid), 'Deployable', uuid)
