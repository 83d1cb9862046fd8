"""A device is never offered whole, or through another of its
deployables, while an instance holds a part of it that vanished.

An A100 in SR-IOV vGPU mode holds a Bound vGPU; the host reboots and
the agent reports before ``sriov-manage`` re-enables the VFs: the driver
reports the GPU whole (PGPU), and the VGPU deployable is kept gone,
reserved, under the ARQ's handle.  The new PGPU provider was offered
(reserved 0) and a PGPU ARQ bound the PF under the running vGPU.  Now
every provider of the card is reserved whole, a drift repair keeps it
so, a bind takes none of its handles, and the whole GPU is offered
once the vGPU is released.  The same rule holds for any card (an
FPGA's PF offered while its VFs' handles are held): the rows' query
and the take on every database.

And an FPGA that reports a lost image (a reboot onto its flash default)
while Bound ARQs hold its card is named in a WARNING.

Against the real (embedded) Placement and a fake sysfs."""

import json
import logging
import os
import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import arq_binding
from cyborg.conductor import inventory_apply
from cyborg.conductor import placement_sync
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import attach_handles as handle_db
from cyborg.db.api import inventory as inventory_db
from cyborg.drivers import nvidia_gpu
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf
from tests.fixtures import privsep as fake_privsep
from tests.fixtures import sysfs as fs
from tests.unit.conductor import test_programming_card_reserved as reserved
from tests.unit.conductor import test_programming_races as tr

HOST = 'gpu-host'
PF = '0000:5e:00.0'
VFS = ['0000:5e:00.4', '0000:5e:00.5']
WHOLE_NAME = f'{HOST}_{PF}'

# SQLite, MariaDB and PostgreSQL.
engine = tr.engine
placement = pf.placement


def _report(conf, ctx, driver):
    report = cf.report(driver.discover())
    report['resource_provider_name'] = HOST
    return inventory_apply.handle_report(conf, ctx, HOST, report)


def _inventories(url, rp_uuid):
    """{rc: (total, reserved)} of a provider, read back from Placement."""
    found = requests.get(f'{url}/resource_providers/{rp_uuid}/inventories',
                         headers=pf.HEADERS, timeout=10).json()
    return {rc: (v['total'], v['reserved'])
            for rc, v in found['inventories'].items()}


def _rp_of(db, name):
    with db.connect() as c:
        return c.execute(sa.select(models.Deployable.rp_uuid).where(
            models.Deployable.name == name)).scalar()


@pytest.fixture
def rebooted(conf, db, placement, tmp_path):
    """A100 with VFs, a vGPU ARQ Bound on a VF, then a "reboot": VFs not
    re-enabled yet, the mdev gone, reported (the GPU now whole).
    Returns (driver, sysfs tree, service context, the vGPU ARQ's uuid,
    its instance)."""
    tree = fs.FakeSysfs(tmp_path / 'sys')
    fs._a100_sriov(tree, PF, VFS, numa=0, group=30)
    conf.set_override('sysfs_root', tree.root, group='agent')
    conf.set_override('enabled_vgpu_types', ['nvidia-471'], group='agent')
    conf.set_override('nvml_module', 'no_such_nvml_module', group='agent')
    conf.set_override('send_events', False, group='nova')
    pf.compute_node(conf, placement, HOST)
    placement_client.reset_clients()
    admin = cyborg_context.get_admin_context()
    driver = nvidia_gpu.NvidiaGPUDriver(conf, HOST)
    _report(conf, admin, driver)
    with db.connect() as c:
        (rp,) = c.execute(sa.select(models.Deployable.rp_uuid)).scalars()
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    profile = seed.seed_profile(db, [{'resources:VGPU': '1'}])
    arq = arq_binding.create(ctx, profile, 'p1')[0]['uuid']
    instance = str(uuidlib.uuid4())
    pf.hold_allocation(placement.url, instance, {rp: {'VGPU': 1}})
    with fake_privsep.in_process(conf), seed.agent_endpoint(
            conf, HOST, drivers={driver.name: driver}):
        arq_binding.start_bind(conf, ctx, {arq: {
            'hostname': HOST, 'device_rp_uuid': rp,
            'instance_uuid': instance}}).result(30)
    row = seed.arq_rows(db)[arq]
    assert row.state == 'Bound', row.bind_failure_reason
    handle = handle_db.get(ctx, row.attach_handle_id)
    vf = '0000:%(bus)s:%(device)s.%(function)s' % json.loads(
        handle.attach_info)
    tree.add_mdev(vf, handle.uuid, 'nvidia-471')
    for vgpu_type, _name in fs.A100_TYPES:
        tree.set_available(vf, vgpu_type, 0)
    _report(conf, admin, driver)
    # The reboot: sriov-manage not run yet, the mdev gone.
    tree.disable_vfs(PF)
    os.unlink(os.path.join(tree.root, 'bus/mdev/devices', handle.uuid))
    _report(conf, admin, driver)
    return driver, ctx, arq, instance


def test_the_whole_gpu_is_reserved_while_a_vgpu_of_it_is_held(
        conf, db, placement, rebooted):
    driver, ctx, arq, _instance = rebooted
    whole = _rp_of(db, WHOLE_NAME)
    assert whole is not None
    assert _inventories(placement.url, whole) == {'PGPU': (1, 1)}
    # A drift repair puts it back reserved.
    client = placement_client.get_client(conf)
    generation, inventories = client.get_inventories(whole)
    client.set_inventories(whole, {'PGPU': dict(
        inventories['PGPU'], reserved=0)}, generation)
    admin = cyborg_context.get_admin_context()
    placement_sync.reconcile_host(conf, admin, HOST)
    assert _inventories(placement.url, whole) == {'PGPU': (1, 1)}
    placement_sync.sync_host(conf, admin, HOST, trust_memory=False)
    assert _inventories(placement.url, whole) == {'PGPU': (1, 1)}
    assert seed.arq_rows(db)[arq].state == 'Bound'


def test_a_bind_on_the_whole_gpu_is_refused_while_a_vgpu_is_held(
        conf, db, placement, rebooted):
    """Placement allocated before it was reserved (a scheduler that read
    it offered): the bind takes no handle of the card."""
    driver, ctx, arq, _instance = rebooted
    whole = _rp_of(db, WHOLE_NAME)
    client = placement_client.get_client(conf)
    generation, inventories = client.get_inventories(whole)
    client.set_inventories(whole, {'PGPU': dict(
        inventories['PGPU'], reserved=0)}, generation)
    profile = seed.seed_profile(db, [{'resources:PGPU': '1'}])
    second = arq_binding.create(ctx, profile, 'p1')[0]['uuid']
    instance = str(uuidlib.uuid4())
    pf.hold_allocation(placement.url, instance, {whole: {'PGPU': 1}})
    with pytest.raises(exception.BindFailed, match='no free attach'):
        arq_binding.start_bind(conf, ctx, {second: {
            'hostname': HOST, 'device_rp_uuid': whole,
            'instance_uuid': instance}}).result(30)
    row = seed.arq_rows(db)[second]
    assert row.state != 'Bound'
    assert row.attach_handle_id is None
    assert seed.arq_rows(db)[arq].state == 'Bound'


def test_the_whole_gpu_is_offered_once_the_vgpu_is_released(
        conf, db, placement, rebooted):
    driver, ctx, arq, instance = rebooted
    whole = _rp_of(db, WHOLE_NAME)
    row = seed.arq_rows(db)[arq]
    # The instance deleted: its ARQ and handle let go, its allocation too.
    with db.begin() as c:
        c.execute(sa.delete(models.ExtARQ).where(
            models.ExtARQ.uuid == arq))
    handle_db.release(ctx, row.attach_handle_id)
    requests.delete(f'{placement.url}/allocations/{instance}',
                    headers=pf.HEADERS, timeout=10)
    admin = cyborg_context.get_admin_context()
    placement_sync.reconcile_host(conf, admin, HOST)
    assert _inventories(placement.url, whole) == {'PGPU': (1, 0)}
    with db.connect() as c:
        names = set(c.execute(sa.select(models.Deployable.name)).scalars())
    assert names == {WHOLE_NAME}


# -- the rows and the take, on every database --------------------------------

def _hold_gone(engine, seeded):
    """Keep ``seeded``'s deployable gone under its first handle in use."""
    d, h = models.Deployable, models.AttachHandle
    with engine.begin() as c:
        c.execute(sa.update(d).where(d.id == seeded.deployable_id)
                  .values(gone=True))
        first = c.execute(sa.select(sa.func.min(h.id)).where(
            h.deployable_id == seeded.deployable_id)).scalar()
        c.execute(sa.update(h).where(h.id == first).values(in_use=True))
        return first


def test_a_card_with_a_held_gone_deployable_is_held_whole(engine):
    """The rows say it of every deployable of the card, those of other
    cards not, in as many statements as before; a take on the card's
    other deployables is refused (a programming bind's too), one on
    another card is not; released,
    the card is free again."""
    first = seed.seed_device(engine, hostname=HOST, handles=1)
    vf = tr._another_vf(engine, first)
    other = seed.seed_device(engine, hostname=HOST, handles=1)
    held = _hold_gone(engine, vf)
    rows, statements = reserved.host_providers_counted(engine, HOST)
    assert len(statements) == 2
    context = tr._new_context()
    assert {row['uuid']: bool(row['card_held']) for row in rows} == {
        first.deployable_uuid: True, vf.deployable_uuid: True,
        other.deployable_uuid: False}
    assert tr._take(context, first.deployable_id) is None
    # Nor by a bind that programs the card (it took one, and, the image
    # already loaded, its programming counted nobody's handles).
    assert tr._take(context, first.deployable_id,
                    unless_programmed=False) is None
    assert tr._take(context, other.deployable_id) is not None
    context = tr._new_context()
    db_api.write_retrying(context, handle_db.release, context, held)
    rows = inventory_db.host_providers(tr._new_context(), HOST)
    assert not any(row['card_held'] for row in rows)
    assert tr._take(tr._new_context(), first.deployable_id) is not None


# -- an FPGA's image lost under Bound ARQs ------------------------------------

def _fpga(address, image):
    device = cf.device('fpga-host', address, dev_type='FPGA', rc='FPGA')
    device.deployables[0].bitstream_id = image
    return device


def test_an_image_lost_under_a_bound_arq_is_warned_of(conf, db, placement,
                                                      caplog):
    """A report that clears the image of a card whose handle a Bound ARQ
    holds names the deployable, the ARQ and its instance; nothing is
    said of a card nobody holds.  Nothing was logged."""
    pf.placement_conf(conf, placement.url)
    pf.compute_node(conf, placement, 'fpga-host')
    placement_client.reset_clients()
    ctx = cyborg_context.get_admin_context()
    held, free = '0000:81:00.0', '0000:82:00.0'
    inventory_apply.handle_report(conf, ctx, 'fpga-host', cf.report(
        [_fpga(held, 'image-a'), _fpga(free, 'image-a')]))
    instance = str(uuidlib.uuid4())
    arq = seed.bound_arq(db, f'fpga-host_{held}', 'FPGA', 'fpga-host',
                          instance)
    with caplog.at_level(logging.WARNING,
                         'cyborg.conductor.inventory_apply'):
        inventory_apply.handle_report(conf, ctx, 'fpga-host', cf.report(
            [_fpga(held, None), _fpga(free, None)]))
    warned = [r.getMessage() for r in caplog.records
              if r.levelno == logging.WARNING and 'image' in r.getMessage()]
    assert len(warned) == 1, warned
    assert f'fpga-host_{held}' in warned[0]
    assert arq in warned[0] and instance in warned[0]
    assert 'image-a' in warned[0]
