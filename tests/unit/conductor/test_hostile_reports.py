"""Hostile or malformed inventory reports, on MariaDB and PostgreSQL.

A report malformed as a whole (a field of the report itself, or the host
name it comes under, missing or of another type) is refused before any
statement runs, with one WARNING and the reason answered to the agent.
Such reports used to be stored as no agent meant them (a digest that is
a number or a list, a ``full`` of ``"no"`` taken for true), to fail the
transaction (a digest or host name too long for its column, a NUL in
PostgreSQL), or to fail after the commit (a provider name that is a
list).  So is a host or compute node name holding a control character
or a line separator, which were stored: a newline in one added a line
to ``GET /v2/exports/gres.conf``.

A device carrying text its columns cannot hold on every database (more
than a TEXT column's bytes on MariaDB, which PostgreSQL stored; a NUL,
which PostgreSQL refused; a lone surrogate, which no driver encodes), or
an attach handle without what a bind reads of it (a PCI address
dddd:bb:dd.f; an mdev's type), or a deployable name holding a control
character or a line separator, is skipped alone as malformed, like the
devices of test_malformed_devices: the rest of the report is stored and
synced.  Those used to fail the whole report on one database and not on
the other, or to be stored and fail each bind given them.
"""

import copy
import dataclasses
import logging

import oslo_messaging as messaging
import pytest
import requests
import sqlalchemy as sa
from oslo_db.sqlalchemy import exc_filters

from cyborg.common import exception
from cyborg.conductor import inventory_apply, inventory_plan, manager
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db
from cyborg.drivers import base as driver_base
from cyborg.objects import inventory
from tests.fixtures import conductor as cf
from tests.fixtures import databases
from tests.fixtures import placement as pf

placement = pf.placement

HOST = 'host1'
GOOD, BAD = '0000:81:00.0', '0000:82:00.0'
TEXT = models.TEXT_BYTES
NAME = models.NAME.length


@pytest.fixture(scope='module', params=['mysql', 'postgresql'])
def server(request):
    """A database of the kind with the schema, for the module's tests."""
    with databases.throwaway_database(request.param) as url:
        databases.create_schema(url)
        engine = sa.create_engine(url)
        exc_filters.register_engine(engine)
        try:
            yield engine
        finally:
            engine.dispose()


@pytest.fixture
def engine(server, conf, placement, monkeypatch):
    """The server's database in use, empty, and a compute node for HOST
    in a Placement of its own."""
    monkeypatch.setattr(inventory_apply, '_WARNED', {})
    undo = db_api.patch_engine(server)
    pf.placement_conf(conf, placement.url)
    requests.post(placement.url + '/resource_providers', json={'name': HOST},
                  headers=pf.HEADERS, timeout=10).raise_for_status()
    try:
        yield server
    finally:
        undo()
        with server.begin() as connection:
            for table in reversed(models.Base.metadata.sorted_tables):
                connection.execute(table.delete())


def _rows(engine):
    """Every row of the host's tables, in order."""
    with engine.connect() as connection:
        return {name: connection.execute(sa.select(table).order_by(
            table.c.id)).all() for name, table in (
                (name, models.Base.metadata.tables[name]) for name in
                ('hosts',) + inventory_plan.TABLES)}


def _devices(trait='CUSTOM_A'):
    return [cf.device(HOST, GOOD, traits=[trait]),
            cf.device(HOST, BAD, dev_type='FPGA', rc='FPGA', num=2,
                      handles=2)]


def _statements(engine):
    seen = []

    def record(conn, cursor, statement, *args):
        seen.append(statement)
    sa.event.listen(engine, 'before_cursor_execute', record)
    return seen, lambda: sa.event.remove(engine, 'before_cursor_execute',
                                         record)


# -- whole reports --------------------------------------------------------

def _field(key, value):
    def change(report):
        report[key] = value
    return change


# {case: (host name, change to a good report)}
WHOLE = {
    'digest a number': (HOST, _field('digest', 5)),
    'digest a list': (HOST, _field('digest', ['a'])),
    'digest None': (HOST, _field('digest', None)),
    'digest empty': (HOST, _field('digest', '')),
    'digest too long for its column': (HOST, _field('digest', 'a' * 65)),
    'digest with a NUL': (HOST, _field('digest', 'a\x00b')),
    'digest with a lone surrogate': (HOST, _field('digest', 'a\ud800')),
    'base_digest a list': (HOST, _field('base_digest', ['a'])),
    'full a string': (HOST, _field('full', 'no')),
    'full a number': (HOST, _field('full', 1)),
    'full None': (HOST, _field('full', None)),
    'removed a string': (HOST, _field('removed', 'PCI:' + BAD)),
    'removed an object': (HOST, _field('removed', {'PCI:' + BAD: 1})),
    'removed holding a number': (HOST, _field('removed', [1])),
    'removed holding an object': (HOST, _field('removed', [{'a': 1}])),
    'removed holding a lone surrogate': (HOST,
                                         _field('removed', ['\udfff'])),
    'devices an object': (HOST, _field('devices', {})),
    'devices a string': (HOST, _field('devices', 'abc')),
    'resource_provider_name a list': (
        HOST, _field('resource_provider_name', [HOST])),
    'resource_provider_name too long': (
        HOST, _field('resource_provider_name', 'n' * (NAME + 1))),
    'host name a list': ([HOST], None),
    'host name None': (None, None),
    'host name empty': ('', None),
    'host name too long for its column': ('h' * (NAME + 1), None),
    'host name with a NUL': ('host\x001', None),
    # A control character (C0, DEL, C1) or line separator: written into
    # the comments of GET /v2/exports/gres.conf, a newline added a gres
    # line of the reporter's choosing for every Slurm node.
    'host name with a newline': (
        'c1\nNodeName=victim Name=gpu Type=a100 File=/dev/nvidia0 Count=8',
        None),
    'host name with a carriage return': ('host\r1', None),
    'host name with a tab': ('host\t1', None),
    'host name with an escape': ('host\x1b[2J', None),
    'host name with DEL': ('host\x7f', None),
    'host name with a C1 control (NEL)': ('host\x851', None),
    'host name with a line separator': ('host\u20281', None),
    'resource_provider_name with a newline': (
        HOST, _field('resource_provider_name', HOST + '\nother')),
}


def _whole(case=None):
    """A delta after a full report of ``_devices()``, which changes the
    first device and removes the second, malformed as ``case`` says."""
    hostname, change = WHOLE[case] if case else (HOST, None)
    report = cf.report([cf.device(HOST, GOOD, traits=['CUSTOM_B'])],
                       base_digest=inventory.inventory_digest(_devices()),
                       full=False, removed=['PCI:' + BAD])
    if change is not None:
        change(report)
    return hostname, report


@pytest.mark.parametrize('case', sorted(WHOLE))
def test_a_malformed_report_is_refused_whole_before_any_statement(
        case, engine, conf, admin_context, caplog):
    stored = cf.report(_devices())
    inventory_apply.handle_report(conf, admin_context, HOST, stored)
    before = _rows(engine)
    caplog.clear()
    hostname, report = _whole(case)
    seen, stop = _statements(engine)
    try:
        with caplog.at_level(logging.WARNING), \
                pytest.raises(exception.Invalid) as refused:
            inventory_apply.handle_report(conf, admin_context, hostname,
                                          report)
    finally:
        stop()
    assert seen == []
    assert _rows(engine) == before
    # cyborg's own: another test's transport may still be logging its
    # reconnections from a thread of its own.
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno >= logging.WARNING
                and r.name.startswith('cyborg')]
    assert warnings == [
        f'Report of {inventory_plan.shown(hostname)} refused, nothing '
        f'stored: {refused.value}']


def test_the_same_delta_well_formed_is_stored(engine, conf, admin_context):
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    hostname, report = _whole()
    assert inventory_apply.handle_report(
        conf, admin_context, hostname, report)['digest'] == report['digest']
    (row,) = inventory_db.host_providers(admin_context, HOST)
    assert row['attributes']['trait0'] == 'CUSTOM_B'


def test_the_agent_is_answered_the_reason(db, conf, admin_context):
    """As any 4xx of the conductor: an expected exception carrying the
    Invalid, which oslo.messaging sends back to the caller."""
    endpoint = manager.ConductorManager(conf, 'c1')
    hostname, report = _whole('digest a number')
    with pytest.raises(messaging.ExpectedException) as caught:
        endpoint.report_inventory(admin_context, hostname, report)
    error = caught.value.exc_info[1]
    assert isinstance(error, exception.Invalid)
    assert 'report digest 5: not a string' in str(error)


def test_a_good_report_passes_the_whole_report_checks():
    report = cf.report(_devices(), full=False, removed=['PCI:0000:83:00.0'],
                       base_digest='b' * 64)
    report['resource_provider_name'] = 'n' * NAME
    inventory_plan.check_hostname('h' * NAME)
    # Printable text beyond ASCII is a name.
    inventory_plan.check_hostname('h\u00f4te-1.example')
    parsed = inventory_plan.parse_report(report)
    assert parsed.complete and parsed.removed == ['PCI:0000:83:00.0']


# -- one device -----------------------------------------------------------

_DEPLOYABLE = ('deployables', 0)
_ATTRIBUTES = _DEPLOYABLE + ('attributes',)
_HANDLE = _DEPLOYABLE + ('attach_handles', 0)
_INFO = _HANDLE + ('attach_info',)


def _set(path, value):
    def change(entry):
        target = entry
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return change


def _drop(path):
    def change(entry):
        target = entry
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]
    return change


def _mdev(**info):
    """Make the device's first handle an mdev's, with ``info`` changed
    (None: dropped) from what the NVIDIA driver reports."""
    def change(entry):
        handle = driver_base.pci_handle(BAD, 'MDEV', asked_type='nvidia-35',
                                        vgpu_mark='0')
        for key, value in info.items():
            if value is None:
                del handle.attach_info[key]
            else:
                handle.attach_info[key] = value
        entry['deployables'][0]['attach_handles'][0] = \
            dataclasses.asdict(handle)
    return change


# A string of more bytes than a TEXT column holds on MariaDB in fewer
# characters (2 bytes each).
_WIDE = '\u00e9' * (TEXT // 2 + 1)

# {case: (change to the second device's entry, the field its reason
# names)}: text its columns cannot hold alike on every database, and
# attach handles without what a bind reads of them.
DEVICE = {
    'attribute longer than a TEXT column': (
        _set(_ATTRIBUTES + ('notes',), 'y' * (TEXT + 1)), 'attribute notes'),
    'attribute of more bytes than a TEXT column': (
        _set(_ATTRIBUTES + ('notes',), _WIDE), 'attribute notes'),
    'std_board_info longer than a TEXT column': (
        _set(('std_board_info',), {'x': 'y' * TEXT}), 'std_board_info'),
    'vendor_board_info longer than a TEXT column': (
        _set(('vendor_board_info',), {'x': 'y' * TEXT}),
        'vendor_board_info'),
    'attach_info longer than a TEXT column': (
        _set(_INFO + ('serial',), 'y' * TEXT), 'attach_info'),
    'attribute key longer than its column': (
        _set(_ATTRIBUTES + ('k' * (NAME + 1),), 'v'), 'attribute key'),
    'model longer than its column': (
        _set(('model',), 'm' * (NAME + 1)), 'model'),
    'driver_name longer than its column': (
        _set(_DEPLOYABLE + ('driver_name',), 'd' * (NAME + 1)),
        'driver_name'),
    'bitstream_id longer than its column': (
        _set(_DEPLOYABLE + ('bitstream_id',),
             'b' * (models.UUID.length + 1)), 'bitstream_id'),
    'vendor with a NUL': (_set(('vendor',), '10\x00de'), 'vendor'),
    'attribute key with a NUL': (
        _set(_ATTRIBUTES + ('no\x00tes',), 'v'), 'attribute key'),
    'attribute with a NUL': (
        _set(_ATTRIBUTES + ('notes',), 'a\x00b'), 'attribute notes'),
    'model with a lone surrogate': (
        _set(('model',), 'model-\ud800'), 'model'),
    # Named in the comments of GET /v2/exports/gres.conf.
    'deployable name with a newline': (
        _set(_DEPLOYABLE + ('name',),
             'x\nNodeName=v Name=gpu File=/dev/nvidia0 Count=1'),
        'deployable name'),
    'deployable name with a carriage return': (
        _set(_DEPLOYABLE + ('name',), 'x\ry'), 'deployable name'),
    'deployable name with a tab': (
        _set(_DEPLOYABLE + ('name',), 'x\ty'), 'deployable name'),
    'deployable name with a C1 control (NEL)': (
        _set(_DEPLOYABLE + ('name',), 'x\x85y'), 'deployable name'),
    'deployable name with a paragraph separator': (
        _set(_DEPLOYABLE + ('name',), 'x\u2029y'), 'deployable name'),
    'PCI attach_info without an address': (
        _set(_INFO, {}), 'PCI attach_info'),
    'PCI attach_info without a function': (
        _drop(_INFO + ('function',)), 'PCI attach_info'),
    'PCI attach_info with a bus of one digit': (
        _set(_INFO + ('bus',), '8'), 'PCI attach_info address'),
    'PCI attach_info with an upper case bus': (
        _set(_INFO + ('bus',), '8A'), 'PCI attach_info address'),
    'PCI attach_info with a function 8': (
        _set(_INFO + ('function',), '8'), 'PCI attach_info address'),
    'PCI attach_info with a numeric domain': (
        _set(_INFO + ('domain',), 1234), 'PCI attach_info address'),
    'PCI attach_info with the address in one field': (
        _set(_INFO, {'domain': BAD, 'bus': '', 'device': '',
                     'function': ''}), 'PCI attach_info address'),
    'TEST_PCI attach_info without an address': (
        _set(_HANDLE, {'attach_type': 'TEST_PCI', 'attach_info': {}}),
        'TEST_PCI attach_info'),
    'MDEV attach_info without an address': (
        _mdev(domain=None, bus=None), 'MDEV attach_info'),
    'MDEV attach_info without asked_type': (
        _mdev(asked_type=None), 'MDEV attach_info asked_type'),
    'MDEV attach_info with an empty asked_type': (
        _mdev(asked_type=''), 'MDEV attach_info asked_type'),
    'MDEV attach_info with a numeric asked_type': (
        _mdev(asked_type=35), 'MDEV attach_info asked_type'),
}


def _malformed(case):
    """A full report of both devices, the first changed, the second
    malformed."""
    report = cf.report(_devices(trait='CUSTOM_B'))
    entry = copy.deepcopy(report['devices'][1])
    DEVICE[case][0](entry)
    report['devices'][1] = entry
    return report


@pytest.mark.parametrize('case', sorted(DEVICE))
def test_a_device_of_bad_text_or_attach_info_is_skipped_at_the_check(case):
    parsed = inventory_plan.parse_report(_malformed(case))
    assert [d.key() for d in parsed.devices] == ['PCI:' + GOOD]
    assert list(parsed.skipped) == ['PCI:' + BAD]
    reason = parsed.skipped['PCI:' + BAD]
    assert DEVICE[case][1] in reason, reason
    assert len(reason) < 300, reason


@pytest.mark.parametrize('case', sorted(DEVICE))
def test_a_device_of_bad_text_or_attach_info_leaves_the_rest_stored(
        case, engine, conf, admin_context, caplog):
    """The device is skipped alone, the same on every database: its rows
    stay as stored before, the other device's change is stored and
    synced."""
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    caplog.clear()
    before = {r['name']: r for r in
              inventory_db.host_providers(admin_context, HOST)}
    report = _malformed(case)
    with caplog.at_level(logging.WARNING):
        reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                              report)
    assert reply == {'digest': report['digest'], 'need_full': False}
    after = {r['name']: r for r in
             inventory_db.host_providers(admin_context, HOST)}
    assert after[f'{HOST}_{BAD}'] == before[f'{HOST}_{BAD}']
    assert after[f'{HOST}_{GOOD}']['attributes']['trait0'] == 'CUSTOM_B'
    assert host_db.get(admin_context, HOST)['placement_synced']
    with engine.connect() as connection:
        infos = connection.execute(sa.select(
            models.AttachHandle.attach_info)).scalars().all()
    assert sorted(infos) == sorted(
        inventory_plan.to_json(h.attach_info) for d in _devices()
        for h in d.deployables[0].attach_handles)
    reason = inventory_plan.parse_report(report).skipped['PCI:' + BAD]
    # cyborg's own: another test's transport may still be logging its
    # reconnections from a thread of its own.
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno >= logging.WARNING
                and r.name.startswith('cyborg')]
    assert len(warnings) == 1 and reason in warnings[0], warnings


def test_text_at_the_limits_is_stored_on_every_database(
        engine, conf, admin_context):
    """The bounds are the columns': a value that fills one is stored."""
    device = cf.device(HOST, GOOD)
    device.model = 'm' * NAME
    device.deployables[0].attributes['notes'] = '\u00e9' * (TEXT // 2)
    device.std_board_info = {'x': 'y' * (TEXT - len('{"x": ""}'))}
    report = cf.report([device])
    assert inventory_plan.parse_report(report).complete
    inventory_apply.handle_report(conf, admin_context, HOST, report)
    (row,) = inventory_db.host_providers(admin_context, HOST)
    assert row['attributes']['notes'] == '\u00e9' * (TEXT // 2)
    with engine.connect() as connection:
        board, model = connection.execute(sa.select(
            models.Device.std_board_info, models.Device.model)).one()
    assert len(board) == TEXT and model == 'm' * NAME


def test_every_attach_type_says_what_a_bind_reads_of_it():
    """A new attach type must say what its handles need."""
    assert set(inventory_plan.ATTACH_INFO_TEXT) == set(models.ATTACH_TYPES)


def test_the_handles_drivers_report_pass():
    device = cf.device(HOST, BAD)
    device.deployables[0].attach_handles = [
        driver_base.pci_handle(BAD, 'MDEV', asked_type='nvidia-35',
                               vgpu_mark='0'),
        driver_base.pci_handle('0000:82:1f.7', physical_network='phys'),
        inventory.AttachHandle('TEST_PCI', inventory.pci_info(BAD))]
    assert inventory_plan.parse_report(cf.report([device])).complete
