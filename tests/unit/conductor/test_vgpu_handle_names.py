"""A GPU's vGPU handles named otherwise by an upgraded agent (numbered
within each SR-IOV VF rather than across them): the conductor kept the
in-use handle of an occupied VF under its old name AND added a free one
under the new name for the same VF, and the next binds took that free
handle (lowest id first), whose mdev cannot be made on a VF that already
hosts a vGPU.  A kept handle now occupies its slot until it goes."""

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
PF = '0000:3b:00.0'
VFS = ['0000:3b:00.4', '0000:3b:00.5', '0000:3b:00.6', '0000:3b:00.7']
TYPE = 'nvidia-471'
BUSY_VF = VFS[1]
H = models.AttachHandle


def _gpu(marks):
    handles = [base.pci_handle(vf, 'MDEV', asked_type=TYPE, vgpu_mark=mark)
               for vf, mark in zip(VFS, marks)]
    return [inventory.DriverDevice(
        type='GPU', vendor='10de', model='A100',
        controlpath_id=inventory.ControlPathID(PF),
        std_board_info={'product_id': '20b0'},
        deployables=[inventory.Deployable(
            name=f'{HOST}_{PF}_{TYPE}', num_accelerators=len(handles),
            attributes={'rc': 'VGPU'}, attach_handles=handles,
            driver_name='nvidia_gpu_driver')])]


def _vf(row):
    return inventory.pci_address(json.loads(row.attach_info))


def _handles(db):
    with db.connect() as c:
        return c.execute(sa.select(H.id, H.attach_info, H.in_use,
                                   H.deployable_id).order_by(H.id)).all()


def test_a_kept_handle_occupies_its_slot_under_a_new_name(
        conf, db, admin_context, placement):
    pf.compute_node(conf, placement, HOST)
    # The older agent: marks numbered across the VFs.
    old = _gpu([f'{TYPE}_{i}' for i in range(len(VFS))])
    inventory_apply.handle_report(conf, admin_context, HOST, cf.report(old))
    with db.begin() as c:
        busy = [r.id for r in _handles(db) if _vf(r) == BUSY_VF]
        c.execute(sa.update(H).where(H.id.in_(busy)).values(in_use=True))
    # The same GPU after the agent's upgrade: numbered within each VF.
    new = _gpu([f'{TYPE}_0'] * len(VFS))
    reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.report(new))
    rows = _handles(db)
    on_busy_vf = [r for r in rows if _vf(r) == BUSY_VF]
    assert [(r.id, r.in_use) for r in on_busy_vf] == [(busy[0], True)]
    assert sorted(_vf(r) for r in rows) == sorted(VFS)
    # Binds take the free VFs, never the occupied one.
    deployable_id = rows[0].deployable_id
    taken = []
    for _ in range(3):
        with db_api.writer.using(admin_context):
            taken.append(_vf(handle_db.take(admin_context, deployable_id)))
    assert BUSY_VF not in taken and len(set(taken)) == 3

    # Its instance lets it go: the next full report (asked for while a
    # kept handle stays) gives the VF its handle under the new name.
    with db.begin() as c:
        c.execute(sa.update(H).where(H.id == busy[0]).values(in_use=False))
    inventory_apply.handle_report(conf, admin_context, HOST, cf.report(
        new, base_digest=reply['digest']))
    on_busy_vf = [r for r in _handles(db) if _vf(r) == BUSY_VF]
    assert len(on_busy_vf) == 1 and on_busy_vf[0].id != busy[0]
    assert not on_busy_vf[0].in_use
