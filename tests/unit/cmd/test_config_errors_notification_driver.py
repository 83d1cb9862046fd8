"""A notification driver that is not installed
(``[oslo_messaging_notifications]driver = messagingv3``) stops every
process that sends notifications at start with one line, status 2, as a
transport URL that cannot work does: it was taken, and notifications
were silently off.  (tests/unit/common/test_transport_url.py: what is
said of which names; tests/unit/wsgi/test_wsgi_config_errors.py: the
WSGI API's test server.)"""

import pytest

from tests.unit.cmd import test_config_errors as config_errors

TYPO = '[oslo_messaging_notifications]\ndriver = messagingv3\n'
SAYS = ("configuration error: [oslo_messaging_notifications]driver: not "
        "an installed notification driver: 'messagingv3' (installed: ")


@pytest.mark.parametrize('script', config_errors.SCRIPTS)
def test_an_unknown_notification_driver_is_one_line(tmp_path, script):
    output = config_errors._refused_at_start(tmp_path, script, TYPO)
    assert output.startswith('%s: %s' % (script, SAYS)), output
    assert "messagingv2, noop" in output and output.endswith(')')
