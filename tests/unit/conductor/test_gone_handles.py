"""An attach handle its agent no longer reports, kept while an ARQ holds
it, is never taken again once the ARQ lets it go: it was free again until
the next full report dropped it, and a bind meanwhile was given a
function that was no longer there.  Reported again, it is takeable
again."""

import json

import sqlalchemy as sa

from cyborg.conductor import inventory_apply
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import attach_handles as handle_db
from cyborg.drivers import base
from cyborg.objects import inventory
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf

placement = pf.placement

HOST = 'host1'
PF = '0000:5e:00.0'
H = models.AttachHandle


def _nic(vfs):
    return [inventory.DriverDevice(
        type='NIC', vendor='8086', model='E810',
        controlpath_id=inventory.ControlPathID(PF),
        std_board_info={'product_id': '1592'},
        deployables=[inventory.Deployable(
            name=f'{HOST}_{PF}', num_accelerators=len(vfs),
            attributes={'rc': 'CUSTOM_NIC_VF'},
            attach_handles=[base.pci_handle(vf, 'PCI') for vf in vfs],
            driver_name='intel_nic_driver')])]


def _handles(db):
    with db.connect() as c:
        return {inventory.pci_address(json.loads(r.attach_info)): r
                for r in c.execute(sa.select(H))}


def _take(context, deployable_id):
    with db_api.writer.using(context):
        taken = handle_db.take(context, deployable_id)
    return taken and inventory.pci_address(json.loads(taken.attach_info))


def test_a_gone_handle_is_not_taken_once_freed(conf, db, admin_context,
                                               placement):
    pf.compute_node(conf, placement, HOST)
    vfs = ['0000:5e:01.0', '0000:5e:01.1']
    reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.report(_nic(vfs)))
    held = _handles(db)[vfs[1]]
    with db.begin() as c:
        c.execute(sa.update(H).where(H.id == held.id).values(in_use=True))
    # The VF vanishes while an instance holds it: kept, marked gone.
    reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.report(_nic(vfs[:1]),
                                                    reply['digest']))
    kept = _handles(db)[vfs[1]]
    assert (kept.in_use, kept.gone) == (True, True)
    assert not _handles(db)[vfs[0]].gone
    # Its instance goes; the next binds take the VF there, and not it.
    with db.begin() as c:
        c.execute(sa.update(H).where(H.id == held.id).values(in_use=False))
    assert _take(admin_context, held.deployable_id) == vfs[0]
    assert _take(admin_context, held.deployable_id) is None
    # The next full report deletes it; the VF back is takeable again.
    reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.report(_nic(vfs[:1]),
                                                    reply['digest']))
    assert vfs[1] not in _handles(db)
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_nic(vfs), reply['digest']))
    assert _take(admin_context, held.deployable_id) == vfs[1]


def test_a_gone_handle_reported_again_is_takeable(conf, db, admin_context,
                                                  placement):
    pf.compute_node(conf, placement, HOST)
    vfs = ['0000:5e:01.0']
    reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.report(_nic(vfs)))
    held = _handles(db)[vfs[0]]
    with db.begin() as c:
        c.execute(sa.update(H).where(H.id == held.id).values(in_use=True))
    reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.report(_nic([]),
                                                    reply['digest']))
    assert _handles(db)[vfs[0]].gone
    # Back before its ARQ let it go: the same handle, no longer gone.
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_nic(vfs), reply['digest']))
    back = _handles(db)[vfs[0]]
    assert (back.id, back.in_use, back.gone) == (held.id, True, False)
    with db.begin() as c:
        c.execute(sa.update(H).where(H.id == held.id).values(in_use=False))
    assert _take(admin_context, held.deployable_id) == vfs[0]
