"""The removal of vanished hardware nothing keeps any more
(``drop_released_gone``) and a report bringing that hardware back, from
another conductor, at the same time: the removal read the rows as gone,
the report brought them back and was acknowledged, and the removal then
deleted them; the agent, acknowledged, never sent them again.  The
removal takes the host's lock, as reports do."""

import threading

import pytest

from cyborg.common import context as cyborg_context
from cyborg.conductor import inventory_apply, placement_sync
from cyborg.db.api import inventory as inventory_db
from cyborg.objects import inventory
from tests.fixtures import api as api_fixture
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf

placement = pf.placement

HOST = 'host1'


def _devices():
    return [cf.device(HOST, '0000:81:00.0', traits=['CUSTOM_GPU_A100']),
            cf.device(HOST, '0000:82:00.0', dev_type='FPGA', rc='FPGA',
                      num=4, handles=4, traits=['CUSTOM_FPGA_X'])]


def _report(conf, ctx, report):
    return inventory_apply.handle_report(conf, ctx, HOST, report)


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_hardware_back_while_its_rows_are_dropped_is_kept(
        kind, conf, admin_context, placement, monkeypatch):
    pf.compute_node(conf, placement, HOST)
    with api_fixture.database_in_use(kind):
        first = _report(conf, admin_context, cf.report(_devices()))
        fpga_rp = inventory.provider_uuid('host1_0000:82:00.0')
        pf.hold_allocation(placement.url, pf.PROJECT, {fpga_rp: {'FPGA': 2}})
        gone = cf.report(_devices()[:1], base_digest=first['digest'],
                         full=False, changed=[],
                         removed=['PCI:0000:82:00.0'])
        _report(conf, admin_context, gone)      # kept: allocations hold it
        pf.hold_allocation(placement.url, pf.PROJECT, {})   # released
        back = cf.report(_devices(), base_digest=gone['digest'],
                         full=False, changed=_devices()[1:])
        # The card comes back, reported to another conductor, while the
        # removal is between its read of the gone rows and their delete.
        real = inventory_db._delete_with_children
        replies, threads = [], []

        def racing(session, deployable_ids, device_ids):
            if not threads:
                other = cyborg_context.get_admin_context()
                thread = threading.Thread(target=lambda: replies.append(
                    _report(conf, other, back)))
                threads.append(thread)
                thread.start()
                thread.join(2)      # it waits for the host's lock now
            return real(session, deployable_ids, device_ids)
        monkeypatch.setattr(inventory_db, '_delete_with_children', racing)
        placement_sync.drop_released_gone(conf, admin_context)
        threads[0].join(30)
        monkeypatch.setattr(inventory_db, '_delete_with_children', real)
        assert replies and replies[0]['need_full'] is False
        # The agent is acknowledged: its next reports are empty deltas.
        assert _report(conf, admin_context,
                       cf.unchanged(_devices()))['need_full'] is False
        names = {row['name'] for row in
                 inventory_db.host_providers(admin_context, HOST)}
        assert names == {'host1_0000:81:00.0', 'host1_0000:82:00.0'}
