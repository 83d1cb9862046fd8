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


def _tables(url):
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize('start', ['8d3e6b1c4f70', None])
def test_stamping_over_older_tables_is_refused_unless_forced(
        tmp_path, capsys, start):
    """2027.1's tables (revision 8d3e6b1c4f70), or tables with their
    revision row lost (a partial restore): stamping the newest recorded
    migrations as run that never ran, and nothing added what they add."""
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url, '8d3e6b1c4f70')
        if start is None:
            migration.stamp(url, 'base')
        for args in (['stamp'], ['stamp', '--revision', migration.head()]):
            with pytest.raises(SystemExit) as exit_info:
                _run(tmp_path, url, *args)
            assert exit_info.value.code == 2
            err = capsys.readouterr().err
            assert ('cyborg-dbsync: the database has cyborg tables %s; '
                    'stamping ' % ('at schema revision 8d3e6b1c4f70' if start
                                   else 'but no schema revision')) in err
            assert ('run "cyborg-dbsync upgrade" instead (each migration '
                    'adds only what is missing), or add --force') in err
            assert migration.version(url) == start
        _run(tmp_path, url, 'stamp', '--force')
        assert migration.version(url) == migration.head()
        assert 'placement_releases' not in _tables(url)


def test_stamping_what_skips_no_migration_is_allowed(tmp_path):
    # An empty database: nothing to pass off (the tables are made by
    # other means).  Going back, or staying: upgrade runs what it must.
    with databases.throwaway_database('sqlite') as url:
        _run(tmp_path, url, 'stamp')
        assert migration.version(url) == migration.head()
        assert _tables(url) == {'alembic_version'}
    with databases.throwaway_database('sqlite') as url:
        migration.upgrade(url)
        _run(tmp_path, url, 'stamp')
        _run(tmp_path, url, 'stamp', '--revision', '8d3e6b1c4f70')
        assert migration.version(url) == '8d3e6b1c4f70'
        _run(tmp_path, url, 'stamp', '--revision', 'base')
        assert migration.version(url) is None
        _run(tmp_path, url, 'upgrade')
        assert migration.version(url) == migration.head()


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
    deployment tool would take for success, however early it comes in
    cyborg's code."""
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'database': {'connection': 'sqlite:///%s' % (tmp_path / 'c.db')}})
    for delay in (0.3, 1.0, 2.0):       # still importing
        proc = subprocess.Popen(
            [os.path.join(sys.prefix, 'bin', script), '--config-file',
             str(config)] + args,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=30)
        # On a loaded machine the signal may land while the interpreter
        # itself starts ("Fatal Python error: init_import_site", status
        # 1), before any of cyborg's code: Python's, so send it later.
        if b'init_import_site' not in err:
            break
    assert proc.returncode == -signum, err.decode(errors='replace')


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


class _Interrupted(Exception):
    pass


@pytest.mark.parametrize('start, statements', [
    (None, 3), ('8d3e6b1c4f70', 2), ('8d3e6b1c4f70', 8)])
def test_an_upgrade_interrupted_on_sqlite_keeps_what_ran_and_finishes(
        tmp_path, start, statements):
    """SQLite keeps what an interrupted upgrade ran (doc/source/
    upgrade.rst): the statements done, and the revision of each migration
    that finished; the next run finishes the job."""
    with databases.throwaway_database('sqlite') as url:
        if start:
            migration.upgrade(url, start)
        before = (migration.version(url), migration.schema_contents(url))
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        ran = []

        def count(_conn, _cursor, statement, *_args):
            if statement.lstrip().upper().startswith(
                    ('CREATE', 'ALTER', 'INSERT', 'UPDATE')):
                if len(ran) == statements:
                    raise _Interrupted()
                ran.append(statement)

        sa.event.listen(engine, 'before_cursor_execute', count)
        try:
            with engine.connect() as connection, \
                    pytest.raises(_Interrupted):
                migration.upgrade(url, connection=connection)
        finally:
            engine.dispose()
        kept = (migration.version(url), migration.schema_contents(url))
        assert kept != before, kept
        assert kept[0] != migration.head()
        _run(tmp_path, url, 'upgrade')
        assert migration.version(url) == migration.head()
        assert migration.schema_contents(url)[1] == []
