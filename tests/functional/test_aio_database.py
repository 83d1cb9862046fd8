"""cyborg-aio on the database a config file names (MariaDB here): the
migrations make its schema and the agent's report lands in it; nothing
is written to a SQLite file of the state directory.  Without one it
keeps its SQLite there (tests/functional/test_processes.py)."""

import requests
import sqlalchemy as sa

from tests.fixtures import databases
from tests.fixtures import processes

ADMIN = {'X-Roles': 'admin', 'X-Project-Id': 'functional'}


def _devices(url):
    try:
        answer = requests.get(url + '/v2/devices', headers=ADMIN, timeout=5)
    except requests.ConnectionError:
        return None
    return [(d['type'], d['vendor']) for d in answer.json()['devices']]


def test_aio_uses_the_configured_database(tmp_path):
    port = processes.free_port()
    state_dir = tmp_path / 'state'
    with databases.throwaway_database('mysql') as db_url:
        config = processes.write_config(tmp_path / 'aio.conf', {
            'database': {'connection': db_url}})
        aio = processes.ServiceProcess(
            'cyborg-aio', config, tmp_path / 'aio.out',
            args=['--port', str(port), '--state-dir', str(state_dir)])
        aio.start()
        try:
            aio.wait_for_log('cyborg-aio is running', timeout=90)
            assert '  Database:  %s' % sa.make_url(db_url).render_as_string(
                hide_password=True) in aio.log()
            url = 'http://127.0.0.1:%d' % port
            assert processes.wait_for(lambda: _devices(url),
                                      what='the first report') == [
                ('FPGA', '0xABCD')]
            engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
            try:
                with engine.connect() as connection:
                    stored = connection.execute(sa.text(
                        'SELECT type, vendor FROM devices')).all()
            finally:
                engine.dispose()
            assert [tuple(row) for row in stored] == [('FPGA', '0xABCD')]
            aio.stop()
        finally:
            aio.kill()
    assert not (state_dir / 'cyborg.sqlite').exists()
    assert (state_dir / 'placement.sqlite').exists()
