"""What a conductor process remembers of hosts and providers (the
generations it last saw, whether a host shared its compute node with
another host row, which problems of a host's reports it said at
WARNING) goes with the host or the provider, also when another conductor
forgot the host or removed the device, against the real (embedded)
Placement on SQLite, MariaDB and PostgreSQL.

Before, an entry was dropped only by the conductor that removed what it
was about: with several conductors, every other one kept an entry per
host and provider ever seen, for the life of the process (hosts coming
and going: without bound), and a problem of a host's reports that came
back after it was solved was said at DEBUG only.

Two conductors are two configurations (two Placement clients) sharing
the database and Placement; what this module keeps per process
(``_WARNED``, ``_UNKNOWN_NAMES``) is swapped for the other's while it
works (``Conductors.other``)."""

import contextlib
import datetime
import logging

import pytest
import requests
import sqlalchemy as sa
from oslo_config import cfg

import cyborg.conf
from cyborg.common import context as cyborg_context
from cyborg.conductor import hosts
from cyborg.conductor import inventory_apply
from cyborg.conductor import placement_sync
from cyborg.db import models
from cyborg.db.api import hosts as host_db
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import api as api_fixture
from tests.fixtures import conductor as cf
from tests.fixtures import databases
from tests.fixtures import placement as pf
from tests.fixtures.placement import placement  # noqa: F401

HOSTS = ('churn-1', 'churn-2', 'churn-3')
STAYS = 'stays-1'
ADDRESSES = ('0000:81:00.0', '0000:82:00.0')


@pytest.fixture(params=databases.KINDS)
def engine(request, conf, placement):  # noqa: F811
    pf.placement_conf(conf, placement.url)
    if request.param == 'sqlite':
        yield request.getfixturevalue('db')
        return
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


class Conductors:
    """Conductor A (``conf``) and B, another process's configuration."""

    def __init__(self, conf, placement, tmp_path, monkeypatch):  # noqa: F811
        self.conf, self.placement = conf, placement
        other = cfg.ConfigOpts()
        cyborg.conf.register_opts(other)
        other([], project='cyborg', default_config_files=[],
              default_config_dirs=[])
        other.set_override('state_path', str(tmp_path / 'other'))
        self.other_conf = pf.placement_conf(other, placement.url)
        # Each process's own; B's while it works.
        self.mine = {'_WARNED': {}, '_UNKNOWN_NAMES': {}}
        self.theirs = {'_WARNED': {}, '_UNKNOWN_NAMES': {}}
        monkeypatch.setattr(inventory_apply, '_WARNED', self.mine['_WARNED'])
        monkeypatch.setattr(placement_sync, '_UNKNOWN_NAMES',
                            self.mine['_UNKNOWN_NAMES'])

    @contextlib.contextmanager
    def other(self):
        """Yield B's configuration, with B's memory of what it logged."""
        self._swap(self.theirs)
        try:
            yield self.other_conf
        finally:
            self._swap(self.mine)

    @staticmethod
    def _swap(memory):
        inventory_apply._WARNED = memory['_WARNED']
        placement_sync._UNKNOWN_NAMES = memory['_UNKNOWN_NAMES']

    def generations(self, conf=None):
        """{provider uuid: generation} conductor A (or ``conf``'s)
        remembers."""
        client = placement_client.get_client(conf or self.conf)
        memory = placement_sync._GENERATIONS.get(client)
        entries = memory.entries if memory is not None else {}
        assert memory is None or memory.under == {
            cn: {rp for rp, entry in entries.items() if entry[0] == cn}
            for cn in {entry[0] for entry in entries.values()}}
        return {rp: entry[1] for rp, entry in entries.items()}

    def shared(self, conf=None):
        client = placement_client.get_client(conf or self.conf)
        return dict(placement_sync._SHARED.get(client, {}))

    def remembered_hosts(self):
        """The hosts of which conductor A remembers anything."""
        return (set(self.shared()) | set(self.mine['_WARNED']) |
                set(self.mine['_UNKNOWN_NAMES']))


@pytest.fixture
def conductors(conf, engine, placement, tmp_path, monkeypatch):  # noqa: F811
    return Conductors(conf, placement, tmp_path, monkeypatch)


def _node(placement, name):  # noqa: F811
    resp = requests.post(placement.url + '/resource_providers',
                         json={'name': name}, headers=pf.HEADERS,
                         timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()['uuid']


def _devices(host, addresses=ADDRESSES):
    return [cf.device(host, address, num=2) for address in addresses]


def _providers(host, addresses=ADDRESSES):
    return {inventory.provider_uuid(f'{host}_{address}')
            for address in addresses}


def _skipping(report):
    """``report`` with a value this conductor skips in the device at
    ``ADDRESSES[1]`` (a newer agent's, a driver's bug): said once at
    WARNING."""
    report['devices'][1]['deployables'][0]['attributes']['rc'] = 5
    return report


def _report(conf, host, report):
    reply = inventory_apply.handle_report(
        conf, cyborg_context.get_admin_context(), host, report)
    assert reply['need_full'] is False
    return reply


def _silent(engine, host):
    with engine.begin() as c:
        c.execute(sa.update(models.Host).where(
            models.Host.hostname == host).values(
                last_report_at=models._now() - datetime.timedelta(hours=1)))


def _warnings(caplog, host):
    return [r for r in caplog.records if r.levelno == logging.WARNING
            and 'leaving out' in r.getMessage() and host in r.getMessage()]


# -- hosts forgotten through another conductor --------------------------------

def test_hosts_forgotten_through_another_conductor_leave_no_memory_here(
        conductors, engine, admin_context, placement):  # noqa: F811
    """A serves the hosts' reports (one value skipped, a
    resource_provider_name Placement does not know), B forgets them: A's
    reconcile drops all it remembered of them, and keeps what it
    remembers of the host that stays, whose unchanged tree is then
    still trusted."""
    conf = conductors.conf
    for host in HOSTS + (STAYS,):
        _node(placement, host)
        report = cf.report(_devices(host))
        report['resource_provider_name'] = f'{host}.unknown.example.org'
        _report(conf, host, report)
        # The name looked up again and not found; a part skipped.
        _report(conf, host, _skipping(report))
    kept = _providers(STAYS)
    assert set(conductors.generations()) == set().union(
        *(_providers(host) for host in HOSTS + (STAYS,)))
    assert conductors.remembered_hosts() == set(HOSTS) | {STAYS}
    with conductors.other() as other:
        for host in HOSTS:
            _silent(engine, host)
            hosts.forget(other, admin_context, host)
    before = conductors.generations()

    placement_sync.reconcile_all(conf, admin_context)

    assert conductors.generations() == {rp: before[rp] for rp in kept}
    assert conductors.remembered_hosts() == {STAYS}


def test_a_host_forgotten_here_is_forgotten_at_once(
        conductors, engine, admin_context, placement, caplog):  # noqa: F811
    """The conductor that forgets a host drops what it remembers of it;
    the same problem in the reports of a new host of that name is said
    at WARNING again."""
    conf, host = conductors.conf, HOSTS[0]
    _node(placement, host)
    report = cf.report(_devices(host))
    report['resource_provider_name'] = f'{host}.unknown.example.org'
    _report(conf, host, report)
    _report(conf, host, _skipping(report))
    assert conductors.remembered_hosts() == {host}
    _silent(engine, host)

    hosts.forget(conf, admin_context, host)

    assert conductors.remembered_hosts() == set()
    assert conductors.generations() == {}
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _report(conf, host, _skipping(cf.report(_devices(host))))
    assert len(_warnings(caplog, host)) == 1


def test_a_host_reported_during_the_reconcile_keeps_its_memory(
        conductors, engine, admin_context, placement,  # noqa: F811
        monkeypatch):
    """A host whose first report is handled after the reconcile listed the
    hosts (so not listed) keeps what its sync remembered: only what was
    remembered before the listing may go."""
    conf, host = conductors.conf, HOSTS[0]
    _node(placement, host)
    listing = host_db.list_all

    def list_all(context):
        listed = listing(context)
        monkeypatch.setattr(host_db, 'list_all', listing)
        _report(conf, host, cf.report(_devices(host)))
        return listed

    monkeypatch.setattr(host_db, 'list_all', list_all)
    placement_sync.reconcile_all(conf, admin_context)

    assert set(conductors.generations()) == _providers(host)
    assert set(conductors.shared()) == {host}


# -- providers removed through another conductor ------------------------------

def test_a_device_removed_through_another_conductor_leaves_no_memory_here(
        conductors, engine, admin_context, placement):  # noqa: F811
    """B stores the report that drops a device (and deletes its provider):
    A's next reconcile of the host drops its generation, and keeps the
    other's, still trusted (no compare)."""
    conf, host = conductors.conf, HOSTS[0]
    _node(placement, host)
    first = _report(conf, host, cf.report(_devices(host)))
    assert set(conductors.generations()) == _providers(host)
    left = _devices(host, ADDRESSES[:1])
    with conductors.other() as other:
        _report(other, host, cf.report(
            left, base_digest=first['digest'], full=False, changed=[],
            removed=[f'PCI:{ADDRESSES[1]}']))
    assert set(conductors.generations()) == _providers(host)
    before = conductors.generations()

    placement_sync.reconcile_all(conf, admin_context)

    kept = _providers(host, ADDRESSES[:1])
    assert conductors.generations() == {rp: before[rp] for rp in kept}


# -- a problem of a host's reports solved, then back -----------------------

def test_a_problem_solved_then_back_is_said_at_warning_again(
        conductors, engine, admin_context, placement, caplog):  # noqa: F811
    """A says the skipped part of a host's report; B stores the host's
    next full report, whole; A then takes an unchanged report (the host
    is whole now) and, when the problem comes back, says it again."""
    conf, host = conductors.conf, HOSTS[0]
    _node(placement, host)
    devices = _devices(host)
    with caplog.at_level(logging.WARNING):
        _report(conf, host, _skipping(cf.report(devices)))
    assert len(_warnings(caplog, host)) == 1
    with conductors.other() as other:
        _report(other, host, cf.report(devices))
    _report(conf, host, cf.unchanged(devices))
    caplog.clear()

    with caplog.at_level(logging.WARNING):
        _report(conf, host, _skipping(cf.report(devices)))

    assert len(_warnings(caplog, host)) == 1


def test_a_whole_delta_ends_the_problem_too(
        conductors, engine, admin_context, placement, caplog):  # noqa: F811
    """As above, A taking a delta (whole, on the digest of a whole
    report) rather than an unchanged report; a delta with a part
    skipped would have been asked for a full report instead."""
    conf, host = conductors.conf, HOSTS[0]
    _node(placement, host)
    devices = _devices(host)
    _report(conf, host, _skipping(cf.report(devices)))
    with conductors.other() as other:
        whole = _report(other, host, cf.report(devices))
    changed = _devices(host) + [cf.device(host, '0000:83:00.0')]
    _report(conf, host, cf.report(changed, base_digest=whole['digest'],
                                  full=False, changed=changed[-1:]))
    assert host not in conductors.mine['_WARNED']
    caplog.clear()

    with caplog.at_level(logging.WARNING):
        _report(conf, host, _skipping(cf.report(changed)))

    assert len(_warnings(caplog, host)) == 1
