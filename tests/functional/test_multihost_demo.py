"""tools/multihost-demo.sh brings up Placement, cyborg-api under gunicorn,
a conductor and three agents on the local RabbitMQ and MariaDB, shows the
devices of all three hosts with the openstack CLI, and leaves nothing
behind: no process, database or vhost."""

import os
import re
import subprocess
import sys
import uuid

import sqlalchemy as sa

from tests.fixtures import databases

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _databases():
    engine = sa.create_engine(databases.MYSQL_ADMIN_URL,
                              poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        return set(connection.scalars(sa.text('SHOW DATABASES')))


def _vhosts():
    done = subprocess.run(['rabbitmqctl', '-q', 'list_vhosts'],
                          capture_output=True, text=True, timeout=60)
    return set(done.stdout.split())


def test_three_hosts_listed_then_everything_cleaned_up(tmp_path):
    name = 'cyborg_t_demo_%s' % uuid.uuid4().hex[:8]
    work = tmp_path / 'demo'
    env = dict(os.environ, VENV=sys.prefix, CYBORG_DEMO_NAME=name,
               CYBORG_DEMO_DB_URL=databases.MYSQL_ADMIN_URL,
               TMPDIR=str(tmp_path))
    env.pop('OS_CYBORG_CONFIG', None)
    done = subprocess.run(
        ['bash', os.path.join(ROOT, 'tools', 'multihost-demo.sh'),
         '--no-wait', '--metrics', '--workdir', str(work)],
        capture_output=True, text=True, timeout=420, env=env,
        stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]

    table = done.stdout
    assert 'openstack accelerator device list' in table
    rows = [line for line in table.splitlines() if line.startswith('| ')
            and 'uuid' not in line]
    hosts = {row.split('|')[4].strip() for row in rows}
    assert hosts == {'demo-host-1', 'demo-host-2', 'demo-host-3'}
    # Each host's fake FPGA and the hardware of its fake sysfs tree.
    types = {(row.split('|')[4].strip(), row.split('|')[2].strip())
             for row in rows}
    assert {('demo-host-1', 'QAT'), ('demo-host-2', 'FPGA'),
            ('demo-host-3', 'GPU')} <= types

    # Each agent served its metrics on a port of its own.
    endpoints = [line.split() for line in
                 (work / 'endpoints').read_text().splitlines()]
    agents = {e[1]: e[2] for e in endpoints if e[0] == 'agent_metrics'}
    assert set(agents) == {'demo-host-1', 'demo-host-2', 'demo-host-3'}
    assert len(set(agents.values())) == 3
    for host, url in agents.items():
        log_text = (work / 'logs' / f'{host}.log').read_text()
        port = url.rsplit(':', 1)[1]
        assert re.search(r'Serving Prometheus metrics on http://[^ ]*:%s'
                         % port, log_text), host

    # Nothing left running or created.
    pids = [int(line.split()[1])
            for line in (work / 'pids').read_text().splitlines()]
    assert len(pids) == 6
    assert [pid for pid in pids if _alive(pid)] == []
    assert {name, name + '_placement'}.isdisjoint(_databases())
    assert name not in _vhosts()
    logs = {p.name: p.read_text() for p in (work / 'logs').iterdir()}
    for log_name, text in logs.items():
        assert 'Traceback' not in text, (log_name, text[-3000:])
    # Every host has its own state directory.
    for host in ('demo-host-1', 'demo-host-2', 'demo-host-3'):
        assert (work / host / 'state' / ('agent-%s.json' % host)).exists()
