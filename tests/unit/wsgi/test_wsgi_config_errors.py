"""cyborg.wsgi.api:application under a real WSGI server (gunicorn, as
tools/multihost-demo.sh runs it) with a configuration that cannot work:
one line in the server's log naming the bad option, and a JSON 503
pointing at it for every request, not an HTML 500 and later "arguments
already parsed"."""

import json
import os
import subprocess
import sys
import time

import pytest
import requests

from cyborg.wsgi import api as wsgi_api
from tests.fixtures import databases
from tests.fixtures import processes

LINE = ('cyborg-wsgi-api: configuration error: Value for option '
        'max_request_body_size from %s is not valid: invalid literal for '
        "int() with base 10: 'big'")


def _gunicorn(config, log):
    port = processes.free_port()
    server = subprocess.Popen(
        [sys.executable, '-m', 'gunicorn', '--no-control-socket',
         '--workers', '1', '--bind', '127.0.0.1:%d' % port,
         'cyborg.wsgi.api:application'],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=dict(os.environ, OS_CYBORG_CONFIG=str(config)),
        start_new_session=True)
    return server, 'http://127.0.0.1:%d' % port


def _get(url):
    deadline = time.monotonic() + 60
    while True:
        try:
            return requests.get(url, timeout=30)
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_bad_value_answers_503_saying_which(tmp_path):
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'api': {'auth_strategy': 'noauth'},
        'oslo_middleware': {'max_request_body_size': 'big'},
    })
    with open(tmp_path / 'gunicorn.log', 'wb') as log:
        server, url = _gunicorn(config, log)
        try:
            answers = [_get(url + path) for path in
                       ('/', '/v2/devices', '/healthcheck', '/')]
        finally:
            processes.kill_group(server)
    output = (tmp_path / 'gunicorn.log').read_text()
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.headers['Content-Type'].startswith('application/json')
        fault = json.loads(answer.json()['error_message'])
        assert fault['faultstring'] == wsgi_api.UNAVAILABLE
        # Files and values are the log's, not any client's.
        assert str(config) not in answer.text
    # Said once, in one line; no traceback, no second parse.
    assert output.count('configuration error') == 1, output
    assert LINE % config + '\n' in output
    assert 'Traceback' not in output
    assert 'already parsed' not in output


def test_a_good_configuration_still_serves(tmp_path):
    db = 'sqlite:///%s' % (tmp_path / 'cyborg.sqlite')
    databases.create_schema(db)
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'api': {'auth_strategy': 'noauth'},
        'database': {'connection': db},
    })
    with open(tmp_path / 'gunicorn.log', 'wb') as log:
        server, url = _gunicorn(config, log)
        try:
            root = _get(url + '/')
            devices = requests.get(url + '/v2/devices', timeout=30,
                                   headers={'X-Roles': 'admin',
                                            'X-Project-Id': 'p'})
        finally:
            processes.kill_group(server)
    assert root.status_code == 200
    assert devices.status_code == 200, devices.text


@pytest.mark.parametrize('text, says', [
    ('[DEFAULT]\ndebug = maybe\n', "Unexpected boolean value 'maybe'"),
    ('[api]\nauth_strategy = keystone\n', 'has no auth_type'),
    # A driver not installed: writes would fail at the conductor call.
    ('[DEFAULT]\ntransport_url = foo://x\n[api]\nauth_strategy = noauth\n',
     '[DEFAULT]transport_url: '),
    ('[oslo_messaging_notifications]\ndriver = messagingv2\n'
     'transport_url = foo://x\n[api]\nauth_strategy = noauth\n',
     '[oslo_messaging_notifications]transport_url: '),
    # A notification driver not installed: notifications silently off.
    ('[oslo_messaging_notifications]\ndriver = messagingv3\n'
     '[api]\nauth_strategy = noauth\n',
     "[oslo_messaging_notifications]driver: not an installed "
     "notification driver: 'messagingv3'"),
])
def test_the_test_server_says_it_in_one_line(tmp_path, text, says):
    config = tmp_path / 'cyborg.conf'
    config.write_text(text)
    done = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-wsgi-api'), '--port', '0',
         '--', '--config-file', str(config)],
        capture_output=True, text=True, timeout=60)
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 2, output
    assert 'cyborg-wsgi-api: configuration error: ' in output
    assert says in output
    assert 'Traceback' not in output


@pytest.mark.parametrize('strategy, warned', [('noauth', True),
                                              ('keystone', False)])
def test_noauth_is_warned_of_as_the_app_loads(tmp_path, strategy, warned):
    """cyborg-api refuses noauth on an address others can reach; under a
    WSGI server the address is the server's, unknown to the app: said at
    WARNING as it loads its configuration."""
    sections = {'api': {'auth_strategy': strategy},
                'DEFAULT': {'use_stderr': True,
                            'transport_url': 'rabbit://u:p@127.0.0.1:1/'}}
    if strategy == 'keystone':
        sections['keystone_authtoken'] = {
            'www_authenticate_uri': 'http://127.0.0.1:1/identity',
            'auth_type': 'password', 'auth_url': 'http://127.0.0.1:1/',
            'username': 'cyborg', 'password': 'p', 'project_name': 's',
            'user_domain_name': 'Default',
            'project_domain_name': 'Default'}
    config = processes.write_config(tmp_path / 'cyborg.conf', sections)
    loaded = subprocess.run(
        [sys.executable, '-c', 'import sys; from cyborg.wsgi import api; '
         'api.load_configuration(sys.argv[1:])', '--config-file',
         str(config)], capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL)
    assert loaded.returncode == 0, loaded.stderr
    assert (wsgi_api.NOAUTH_WARNING in loaded.stderr) is warned, \
        loaded.stderr
