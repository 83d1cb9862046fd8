"""cyborg-dbsync against a real SQLite file, in-process."""

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
