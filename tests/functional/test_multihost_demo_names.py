"""tools/multihost-demo.sh drops only what it made: when its databases or
RabbitMQ vhost exist already (a demo running under that name, or one that
was killed), it stops before making anything, says so, and leaves them
as they were instead of dropping them on its way out."""

import os
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from tests.fixtures import databases

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir))


def _admin(statement):
    engine = sa.create_engine(databases.MYSQL_ADMIN_URL,
                              isolation_level='AUTOCOMMIT',
                              poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        result = connection.execute(sa.text(statement))
        return result.scalars().all() if result.returns_rows else None


def _databases(name):
    return set(_admin('SHOW DATABASES')) & {name, name + '_placement'}


def _rabbitmqctl(*args):
    return subprocess.run(['rabbitmqctl', '-q', *args], capture_output=True,
                          text=True, timeout=60, check=True).stdout


def _vhosts():
    return set(_rabbitmqctl('list_vhosts').split())


def _demo(tmp_path, name):
    env = dict(os.environ, VENV=sys.prefix, CYBORG_DEMO_NAME=name,
               CYBORG_DEMO_DB_URL=databases.MYSQL_ADMIN_URL,
               TMPDIR=str(tmp_path))
    env.pop('OS_CYBORG_CONFIG', None)
    return subprocess.run(
        ['bash', os.path.join(ROOT, 'tools', 'multihost-demo.sh'),
         '--no-wait'],
        capture_output=True, text=True, timeout=300, env=env,
        stdin=subprocess.DEVNULL)


@pytest.fixture
def name():
    name = 'cyborg_t_taken_%s' % uuid.uuid4().hex[:8]
    yield name
    for database in (name, name + '_placement'):
        _admin('DROP DATABASE IF EXISTS %s' % database)
    if name in _vhosts():
        _rabbitmqctl('delete_vhost', name)


@pytest.mark.parametrize('taken', ['', '_placement'])
def test_a_database_of_that_name_is_left_alone(tmp_path, name, taken):
    _admin('CREATE DATABASE %s%s' % (name, taken))
    _admin('CREATE TABLE %s%s.precious (id int)' % (name, taken))
    done = _demo(tmp_path, name)
    assert done.returncode != 0, done.stdout + done.stderr[-3000:]
    assert 'exist already' in done.stderr, done.stderr[-3000:]
    assert 'CYBORG_DEMO_NAME' in done.stderr
    # Still there, with its table; nothing else made.
    assert _databases(name) == {name + taken}
    assert _admin('SHOW TABLES FROM %s%s' % (name, taken)) == ['precious']
    assert name not in _vhosts()


def test_a_vhost_of_that_name_is_left_alone(tmp_path, name):
    _rabbitmqctl('add_vhost', name)
    done = _demo(tmp_path, name)
    assert done.returncode != 0, done.stdout + done.stderr[-3000:]
    assert 'vhost %s exists already' % name in done.stderr, \
        done.stderr[-3000:]
    assert 'CYBORG_DEMO_NAME' in done.stderr
    assert name in _vhosts()
    assert _databases(name) == set()
