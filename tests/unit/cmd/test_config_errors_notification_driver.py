"""A notification driver that is not installed
(``[oslo_messaging_notifications]driver = messagingv3``) stops every
process that sends notifications at start with one line, status 2, as a
transport URL that cannot work does: it was taken, and notifications
were silently off.  (tests/unit/common/test_transport_url.py: what is
said of which names; tests/unit/wsgi/test_wsgi_config_errors.py: the
WSGI API's test server.)  ``cyborg-aio`` checks only what its
notifications use."""

import os
import subprocess
import sys

import pytest

from tests.fixtures import processes
from tests.unit.cmd import test_config_errors as config_errors

TYPO = '[oslo_messaging_notifications]\ndriver = messagingv3\n'
SAYS = ("configuration error: [oslo_messaging_notifications]driver: not "
        "an installed notification driver: 'messagingv3' (installed: ")


@pytest.mark.parametrize('script', config_errors.SCRIPTS)
def test_an_unknown_notification_driver_is_one_line(tmp_path, script):
    output = config_errors._refused_at_start(tmp_path, script, TYPO)
    assert output.startswith('%s: %s' % (script, SAYS)), output
    assert "messagingv2, noop" in output and output.endswith(')')


# cyborg-aio: its RPC stays in the process (fake://), so only what its
# notifications use is checked: the driver, and the URL they go to (their
# own, else [DEFAULT]transport_url).
AIO = 'cyborg-aio'
BAD_URL = ('Failed to load transport driver "foo": No '
           "'oslo.messaging.drivers' driver found, looking for 'foo'")
NOTIFYING = '[oslo_messaging_notifications]\ndriver = messagingv2\n'
# What the all-in-one does once its configuration is read: it only says
# so here (nothing listens, nothing is built).
AIO_PARSED = '''
import os, sys
from cyborg.cmd import aio
aio.parse(sys.argv[1:])
print('configuration accepted', flush=True)
os._exit(0)
'''


def _aio(tmp_path, config_text, command):
    config = tmp_path / 'cyborg.conf'
    config.write_text(config_text)
    state = tmp_path / 'state'
    try:
        result = subprocess.run(
            [*command, '--config-file', str(config), '--state-dir',
             str(state), '--port', str(processes.free_port())],
            capture_output=True, text=True, timeout=60,
            env=dict(os.environ, OS_CYBORG_CONFIG_DIR=str(tmp_path / 'no')))
    except subprocess.TimeoutExpired:
        pytest.fail('%s kept running with %r' % (AIO, config_text))
    return result, state


@pytest.mark.parametrize('config_text, says', [
    (TYPO, SAYS),
    (NOTIFYING + 'transport_url = foo://x\n',
     'configuration error: [oslo_messaging_notifications]'
     'transport_url: ' + BAD_URL),
    # No URL of their own: they go to [DEFAULT]transport_url's broker.
    ('[DEFAULT]\ntransport_url = foo://x\n' + NOTIFYING,
     'configuration error: [DEFAULT]transport_url: ' + BAD_URL),
], ids=['driver', 'own-url', 'default-url'])
def test_the_all_in_one_checks_what_its_notifications_use(
        tmp_path, config_text, says):
    result, state = _aio(tmp_path, config_text,
                         [os.path.join(sys.prefix, 'bin', AIO)])
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    assert output.count('\n') == 0, output
    assert output.startswith('%s: %s' % (AIO, says)), output
    # Said before it touches anything.
    assert not state.exists()


def test_the_all_in_one_keeps_its_rpc_in_the_process(tmp_path):
    """Notifications off, [DEFAULT]transport_url is used by nothing in
    the all-in-one: not refused."""
    result, state = _aio(tmp_path, '[DEFAULT]\ntransport_url = foo://x\n',
                         [sys.executable, '-c', AIO_PARSED])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'configuration accepted'
    assert state.is_dir()
