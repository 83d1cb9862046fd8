"""cyborg.wsgi.api: the app a WSGI server imports, configured from
OS_CYBORG_CONFIG.  Run in a child interpreter: it parses the global CONF."""

import json
import os
import subprocess
import sys

from tests.fixtures import databases
from tests.fixtures import processes

CHILD = '''
import json, webob
from cyborg.wsgi import api
resp = webob.Request.blank('/v2/device_profiles').get_response(
    api.application)
doc = webob.Request.blank('/').get_response(api.application)
print(json.dumps([resp.status_int, resp.json, doc.json['versions'][0]]))
'''


def test_application_reads_os_cyborg_config(tmp_path):
    db = tmp_path / 'cyborg.sqlite'
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'DEFAULT': {'host': 'wsgi-test'},
        'database': {'connection': 'sqlite:///%s' % db},
        'api': {'auth_strategy': 'noauth',
                'public_endpoint': 'https://cloud.example/accelerator'},
    })
    databases.create_schema('sqlite:///%s' % db)
    env = dict(os.environ, OS_CYBORG_CONFIG=str(config))
    done = subprocess.run([sys.executable, '-c', CHILD], env=env,
                          capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(
                              os.path.dirname(os.path.dirname(
                                  os.path.abspath(__file__))))))
    assert done.returncode == 0, done.stderr
    status, profiles, version = json.loads(done.stdout.splitlines()[-1])
    assert status == 200
    assert profiles == {'device_profiles': []}
    assert version['links'][0]['href'] == (
        'https://cloud.example/accelerator/v2')
