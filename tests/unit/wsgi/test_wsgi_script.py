"""cyborg-wsgi-api: what follows "--" is cyborg's own command line (it
used to be ignored, so the config file given there was never read)."""

import os
import subprocess
import sys

import requests

from tests.fixtures import databases
from tests.fixtures import processes


def test_config_file_after_double_dash_is_read(tmp_path):
    db = 'sqlite:///%s' % (tmp_path / 'cyborg.sqlite')
    databases.create_schema(db)
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'DEFAULT': {'host': 'wsgi-script'},
        'database': {'connection': db},
        'api': {'auth_strategy': 'noauth',
                'public_endpoint': 'https://cloud.example/accelerator'},
    })
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env.pop('OS_CYBORG_CONFIG', None)
    proc = subprocess.Popen(
        [os.path.join(sys.prefix, 'bin', 'cyborg-wsgi-api'), '--port', '0',
         '--', '--config-file', str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=env, cwd=tmp_path)
    try:
        url = None
        for line in proc.stdout:
            if 'serving on ' in line:
                url = line.split('serving on ', 1)[1].strip()
                break
        assert url, 'cyborg-wsgi-api did not start'
        doc = requests.get(url + '/', timeout=10).json()
        assert doc['versions'][0]['links'][0]['href'] == (
            'https://cloud.example/accelerator/v2')
        # noauth came from the file too: no token, yet an answer.
        devices = requests.get(url + '/v2/devices', timeout=10, headers={
            'X-Roles': 'admin', 'X-Project-Id': 'p'})
        assert devices.status_code == 200, devices.text
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


def test_arguments_without_double_dash_are_refused():
    done = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-wsgi-api'),
         '--config-file', '/nonexistent.conf'],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert 'go after "--"' in done.stderr or 'unrecognized' in done.stderr
