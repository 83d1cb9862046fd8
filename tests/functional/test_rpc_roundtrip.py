"""cyborg-conductor and cyborg-agent as real processes on the machine's
RabbitMQ (a vhost of their own), MariaDB and the real Placement: RPC goes
both ways, and SIGTERM ends each process within 5 s with status 0."""

import base64
import contextlib
import hashlib
import time
import uuid

import oslo_messaging as messaging
import sqlalchemy as sa

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.cmd import aio
from cyborg.common import context as cyborg_context
from cyborg.common import rpc
from cyborg.drivers import fake
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import processes
from tests.fixtures import rabbit

CONDUCTOR_HOST = 'conductor-rt'
AGENT_HOST = 'agent-rt'


def _query(db_url, sql, **params):
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text(sql), params).mappings().all()
    finally:
        engine.dispose()


def _last_report_at(db_url):
    return _query(db_url, 'SELECT last_report_at FROM hosts '
                          'WHERE hostname = :h', h=AGENT_HOST)[0][
        'last_report_at']


@contextlib.contextmanager
def _client_transport(conf, transport_url):
    """Make this test process an RPC client on the processes' vhost."""
    transport = messaging.get_rpc_transport(conf, url=transport_url)
    previous = rpc._TRANSPORT
    rpc.set_transport(transport)
    try:
        yield
    finally:
        rpc.set_transport(previous)
        transport.cleanup()


@contextlib.contextmanager
def _services(tmp_path, transport_url, db_url, placement_url):
    common = {'transport_url': transport_url, 'debug': True,
              'state_path': tmp_path / 'state'}
    conductor_conf = processes.write_config(tmp_path / 'conductor.conf', {
        'DEFAULT': dict(common, host=CONDUCTOR_HOST),
        'database': {'connection': db_url},
        'placement': placement_fixture.placement_options(placement_url),
        'nova': {'send_events': False},
    })
    agent_conf = processes.write_config(tmp_path / 'agent.conf', {
        'DEFAULT': dict(common, host=AGENT_HOST),
        'agent': {'enabled_drivers': 'fake_driver', 'hotplug': False,
                  'resource_provider_name': AGENT_HOST},
    })
    conductor = processes.ServiceProcess(
        'cyborg-conductor', conductor_conf, tmp_path / 'conductor.log')
    agent = processes.ServiceProcess(
        'cyborg-agent', agent_conf, tmp_path / 'agent.log')
    try:
        # The conductor's queue must exist before the agent's first call,
        # or the broker drops it and the agent waits for its timeout.
        conductor.start().wait_for_log('cyborg-conductor started')
        agent.start().wait_for_log('cyborg-agent started')
        yield conductor, agent
    finally:
        agent.kill()
        conductor.kill()


def _assert_clean_stop(process):
    elapsed = process.stop()
    assert elapsed < processes.STOP_TIMEOUT
    after_stop = process.log().partition('stopping')[2]
    assert 'Traceback' not in after_stop, after_stop


def test_round_trips_both_ways_then_sigterm(tmp_path, conf):
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database('mysql') as db_url, \
            placement_fixture.PlacementProcess() as placement_url:
        databases.create_schema(db_url)
        aio.ensure_compute_node(placement_url, AGENT_HOST)
        with _services(tmp_path, transport_url, db_url,
                       placement_url) as (conductor, agent):
            # agent -> conductor: the first report (report_inventory) is
            # stored, and its reply made the agent cache the digest.
            processes.wait_for(lambda: _query(
                db_url, 'SELECT * FROM hosts WHERE hostname = :h '
                        'AND report_digest IS NOT NULL', h=AGENT_HOST),
                what='the first inventory report')
            devices = _query(db_url, 'SELECT vendor, type FROM devices '
                                     'WHERE hostname = :h', h=AGENT_HOST)
            assert [dict(d) for d in devices] == [{'vendor': '0xABCD',
                                                   'type': 'FPGA'}]

            # conductor -> agent: fpga_program is a call answered by the
            # agent process, which then reports the new bitstream back.
            image = b'bitstream for the round trip'
            image_uuid = str(uuid.uuid4())
            with _client_transport(conf, transport_url):
                agent_api = agent_rpcapi.AgentAPI(conf, timeout=30)
                ctx = cyborg_context.get_admin_context()
                assert agent_api.fpga_program(
                    ctx, AGENT_HOST, fake.CONTROLPATH_ADDRESS,
                    {'image_uuid': image_uuid,
                     'data': base64.b64encode(image).decode(),
                     'checksum': hashlib.md5(image).hexdigest()},
                    'fake_driver') is True
                processes.wait_for(lambda: _query(
                    db_url, 'SELECT id FROM deployables '
                            'WHERE bitstream_id = :b', b=image_uuid),
                    what='the report carrying the bitstream')

                # request_report is a cast: its effect is a full report.
                before = _last_report_at(db_url)
                time.sleep(1.1)  # DATETIME has whole seconds on MariaDB
                agent_api.request_report(ctx, AGENT_HOST)
                processes.wait_for(lambda: _last_report_at(db_url) > before,
                          what='the requested full report')

            _assert_clean_stop(agent)
            _assert_clean_stop(conductor)


def test_processes_start_without_broker_or_database(tmp_path):
    """Dependencies that are not there yet never make a process exit."""
    sections = {
        'DEFAULT': {'host': 'lonely', 'state_path': tmp_path,
                    # Nothing listens on port 1.
                    'transport_url': 'rabbit://guest:guest@127.0.0.1:1/'},
        'database': {'connection': 'mysql+pymysql://root@127.0.0.1:1/x'},
        'agent': {'enabled_drivers': 'fake_driver', 'hotplug': False},
    }
    config = processes.write_config(tmp_path / 'lonely.conf', sections)
    started = [processes.ServiceProcess(script, config,
                                        tmp_path / f'{script}.log').start()
               for script in ('cyborg-conductor', 'cyborg-agent')]
    try:
        for process in started:
            process.wait_for_log('Connection failed', timeout=30)
        time.sleep(1.5)
        for process in started:
            assert process.returncode is None, process.log()
            _assert_clean_stop(process)
    finally:
        for process in started:
            process.kill()
