"""cyborg-dbsync against a real SQLite file, in-process (and, for
signals and MariaDB, as a process)."""

import os
import signal
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from cyborg.cmd import dbsync
from cyborg.db import migration
from tests.fixtures import databases
from tests.fixtures import processes


def _run(tmp_path, url, *args):
    config = processes.write_config(tmp_path / 'cyborg.conf',
                                    {'database': {'connection': url}})
    dbsync.main(['--config-file', str(config)] + list(args))


def test_upgrade_version_and_stamp(tmp_path, capsys):
    with databases.throwaway_database('sqlite') as url:
        _run(tmp_path, url, 'version')
        assert 'None' in capsys.readouterr().out
        _run(tmp_path, url, 'upgrade')
        assert migration.version(url) == migration.head()
        _run(tmp_path, url, 'version')
        assert capsys.readouterr().out.strip().endswith(migration.head())
        engine = sa.create_engine(url)
        try:
            assert 'extended_accelerator_requests' in (
                sa.inspect(engine).get_table_names())
        finally:
            engine.dispose()
        # Running it again is harmless (deployment tools always do).
        _run(tmp_path, url, 'upgrade')
        _run(tmp_path, url, 'stamp', '--revision', 'base')
        assert migration.version(url) is None


def test_unreachable_database_is_a_clear_error(tmp_path, caplog):
    with pytest.raises(SystemExit) as exit_info:
        _run(tmp_path, 'mysql+pymysql://root@127.0.0.1:1/nothing', 'upgrade')
    assert exit_info.value.code == 1


def test_a_database_a_newer_release_upgraded_is_refused(tmp_path, capsys):
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        engine = sa.create_engine(url)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text(
                    "UPDATE alembic_version SET version_num = '0123456789ab'"))
        finally:
            engine.dispose()
        with pytest.raises(SystemExit) as exit_info:
            _run(tmp_path, url, 'upgrade')
        assert exit_info.value.code == 1
        err = capsys.readouterr().err
        assert ('0123456789ab, which a newer release of cyborg upgraded it '
                'to; this release cannot change it') in err
        assert migration.version(url) == '0123456789ab'


@pytest.mark.parametrize('target', ['9a4c6e8b1d3f', 'base'])
def test_a_downgrade_is_refused(tmp_path, capsys, target):
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        with pytest.raises(SystemExit) as exit_info:
            _run(tmp_path, url, 'upgrade', '--revision', target)
        assert exit_info.value.code == 1
        assert ('downgrades are not supported: restore the backup'
                in capsys.readouterr().err)
        assert migration.version(url) == migration.head()
        # Up to an older revision from an older one still works.
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url, '48d9677effd2')
        _run(tmp_path, url, 'upgrade', '--revision', '9a4c6e8b1d3f')
        assert migration.version(url) == '9a4c6e8b1d3f'


@pytest.mark.parametrize('script, args', [
    ('cyborg-dbsync', ['version']),
    ('cyborg-status', ['upgrade', 'check']),
    ('cyborg-manage', ['host', 'list'])])
@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_one_shot_command_does_not_succeed(
        tmp_path, script, args, signum):
    """Killed by the signal (143 or 130 in a shell), not a status 0 a
    deployment tool would take for success, however early it comes."""
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'database': {'connection': 'sqlite:///%s' % (tmp_path / 'c.db')}})
    proc = subprocess.Popen(
        [os.path.join(sys.prefix, 'bin', script), '--config-file',
         str(config)] + args,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)            # still importing
    proc.send_signal(signum)
    assert proc.wait(30) == -signum


def test_an_upgrade_interrupted_on_mariadb_finishes_when_run_again(tmp_path):
    """SIGTERM while the upgrade waits for a table (c3f1a7d92e58 added
    quota_locks.generation, then waits to change the ARQ table): status
    -SIGTERM, and the next run finishes the job."""
    with databases.throwaway_database('mysql') as url:
        migration.upgrade(url, '9a4c6e8b1d3f')
        config = processes.write_config(tmp_path / 'cyborg.conf',
                                        {'database': {'connection': url}})
        command = [os.path.join(sys.prefix, 'bin', 'cyborg-dbsync'),
                   '--config-file', str(config), 'upgrade']
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as holder:
                holder.execute(sa.text(
                    'SELECT count(*) FROM extended_accelerator_requests'))
                proc = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                processes.wait_for(lambda: holder.execute(sa.text(
                    "SELECT count(*) FROM information_schema.processlist "
                    "WHERE info LIKE 'ALTER TABLE extended_accelerator%'"
                    )).scalar(), timeout=60, what='the ALTER waiting')
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(30) == -signal.SIGTERM
                holder.rollback()
        finally:
            engine.dispose()
        assert migration.version(url) == '9a4c6e8b1d3f'
        assert subprocess.run(command, capture_output=True).returncode == 0
        assert migration.version(url) == migration.head()
