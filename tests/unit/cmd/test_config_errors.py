"""A configuration that cannot work stops a process at start with one
line saying why (exit status 2), not a traceback and not a server that
answers 500 to every request."""

import importlib.util
import os
import subprocess
import sys

import pytest

SCRIPTS = ('cyborg-api', 'cyborg-conductor', 'cyborg-agent')


def _run(script, tmp_path, text):
    config = tmp_path / 'cyborg.conf'
    config.write_text(text)
    result = subprocess.run(
        [os.path.join(sys.prefix, 'bin', script), '--config-file',
         str(config)],
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, OS_CYBORG_CONFIG_DIR=str(tmp_path / 'none')))
    return result.returncode, (result.stdout + result.stderr).strip()


@pytest.mark.parametrize('script', SCRIPTS)
@pytest.mark.parametrize('text, says', [
    ('[api]\nport = 99999\n', 'Value for option port from %(config)s is '
                              'not valid: Should be less than or equal to '
                              '65535'),
    ('[api]\nauth_strategy = bogus\n', "but found 'bogus'"),
    ('[health]\ncheck_interval = soon\n', 'check_interval'),
])
def test_a_bad_value_is_one_line(tmp_path, script, text, says):
    rc, output = _run(script, tmp_path, text)
    assert rc == 2, output
    assert output.count('\n') == 0, output
    assert output.startswith('%s: configuration error: ' % script)
    assert says % {'config': tmp_path / 'cyborg.conf'} in output


# kafka:// names a driver oslo.messaging has, whose library
# (confluent_kafka) is not installed here: its module fails to import.
NO_KAFKA = pytest.mark.skipif(
    importlib.util.find_spec('confluent_kafka') is not None,
    reason='confluent_kafka is installed: the kafka driver loads')


@pytest.mark.parametrize('script', SCRIPTS)
@pytest.mark.parametrize('url, says', [
    ('foo://x', 'Failed to load transport driver "foo": No '
                "'oslo.messaging.drivers' driver found, looking for 'foo'"),
    pytest.param('kafka://127.0.0.1:9092',
                 'Failed to load transport driver "kafka": No module '
                 "named 'confluent_kafka'", marks=NO_KAFKA),
    ('rabbit://guest@[127.0.0.1:5672/', 'Invalid IPv6 URL'),
    ('rabbit', 'No scheme specified'),
    # Refused only as the first connection was made (the API: at the
    # first write).
    ('rabbit://guest@127.0.0.1:99999/',
     "host 127.0.0.1 has port '99999', not a number from 0 to 65535"),
], ids=['no-driver', 'driver-import', 'ipv6', 'no-scheme', 'port'])
def test_a_transport_url_that_cannot_work_is_one_line(tmp_path, script,
                                                      url, says):
    """Found out as the RPC server was made (status 1, "cannot start"),
    and by the API only at each write: said at start, before anything
    listens or connects."""
    assert _refused_at_start(tmp_path, script, '[DEFAULT]\ntransport_url = '
                             '%s\n' % url) == (
        '%s: configuration error: [DEFAULT]transport_url: %s'
        % (script, says))


def _refused_at_start(tmp_path, script, config_text):
    """What ``script`` says as it stops at start with ``config_text``
    (and the API on any port, without Keystone): status 2 and one line,
    checked."""
    config = tmp_path / 'cyborg.conf'
    config.write_text(config_text +
                      '[api]\nhost_ip = 127.0.0.1\nport = 0\n'
                      'auth_strategy = noauth\n')
    try:
        result = subprocess.run(
            [os.path.join(sys.prefix, 'bin', script), '--config-file',
             str(config)],
            capture_output=True, text=True, timeout=60,
            env=dict(os.environ, OS_CYBORG_CONFIG_DIR=str(tmp_path / 'no')))
    except subprocess.TimeoutExpired:
        pytest.fail('%s kept running with %r' % (script, config_text))
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    return output


@pytest.mark.parametrize('script', SCRIPTS)
def test_a_notification_url_that_cannot_work_is_one_line(tmp_path, script):
    """Where notifications go to a broker of their own: found out only as
    the first notification was sent."""
    assert _refused_at_start(
        tmp_path, script, '[oslo_messaging_notifications]\n'
        'driver = messagingv2\ntransport_url = foo://x\n') == (
        '%s: configuration error: [oslo_messaging_notifications]'
        'transport_url: Failed to load transport driver "foo": No '
        "'oslo.messaging.drivers' driver found, looking for 'foo'" % script)


def test_a_missing_file_is_one_line(tmp_path):
    result = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-conductor'),
         '--config-file', str(tmp_path / 'missing.conf')],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        'cyborg-conductor: configuration error: Failed to find some config '
        'files: %s' % (tmp_path / 'missing.conf'))


def test_keystone_without_credentials_refuses_to_start(tmp_path):
    rc, output = _run('cyborg-api', tmp_path,
                      '[api]\nauth_strategy = keystone\nport = 1\n')
    assert rc == 2, output
    assert output == (
        'cyborg-api: configuration error: [api]auth_strategy is keystone '
        'but [keystone_authtoken] has no auth_type (and the credentials it '
        'goes with): set them, as the install guide shows, or use '
        'auth_strategy = noauth to try cyborg out')


@pytest.mark.parametrize('script', ('cyborg-api', 'cyborg-conductor'))
@pytest.mark.parametrize('text, says', [
    ('[quota]\ndriver = unified_limits\n',
     '[oslo_limit] has no auth_type'),
    ('[quota]\ndriver = unified_limits\n[oslo_limit]\nauth_type = password\n',
     '[oslo_limit] names no endpoint'),
    ('[quota]\ndriver = keystone\n', "but found 'keystone'"),
])
def test_unified_limits_without_what_they_need_refuse_to_start(
        tmp_path, script, text, says):
    rc, output = _run(script, tmp_path,
                      text + '[api]\nhost_ip = 127.0.0.1\nport = 1\n'
                      'auth_strategy = noauth\n')
    assert rc == 2, output
    assert output.count('\n') == 0, output
    assert output.startswith('%s: configuration error: ' % script)
    assert says in output


# The commands that are not services: the same one line, before anything
# else happens (no state directory locked, no database touched).
COMMANDS = {
    'cyborg-status': ['upgrade', 'check'],
    'cyborg-dbsync': ['version'],
    'cyborg-aio': ['--state-dir', '{tmp}/state'],
}


MISSING = (None, 'Failed to find some config files: {config}')
UNPARSABLE = ('[DEFAULT\n', 'Failed to parse {config}: at {config}:1, '
                            'Invalid section')
OUT_OF_RANGE = ('[health]\nhold_down = -5\n',
                'Value for option hold_down from {config} is not valid: '
                'Should be greater than or equal to 0')
NOT_A_CHOICE = ('[conductor]\nnew_device_status = broken\n',
                "but found 'broken'")


@pytest.mark.parametrize('script, text, says', [
    ('cyborg-status',) + MISSING, ('cyborg-status',) + UNPARSABLE,
    ('cyborg-status',) + OUT_OF_RANGE, ('cyborg-dbsync',) + UNPARSABLE,
    ('cyborg-aio',) + MISSING, ('cyborg-aio',) + UNPARSABLE,
    ('cyborg-aio',) + OUT_OF_RANGE, ('cyborg-aio',) + NOT_A_CHOICE,
])
def test_commands_say_what_is_wrong_in_one_line(tmp_path, script, text,
                                               says):
    config = tmp_path / 'cyborg.conf'
    if text is not None:
        config.write_text(text)
    args = [a.format(tmp=tmp_path) for a in COMMANDS[script]]
    result = subprocess.run(
        [os.path.join(sys.prefix, 'bin', script), '--config-file',
         str(config)] + args,
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, OS_CYBORG_CONFIG_DIR=str(tmp_path / 'none')))
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    assert output.count('\n') == 0, output
    assert output.startswith('%s: configuration error: ' % script)
    assert says.format(config=config) in output
    assert not (tmp_path / 'state').exists()


def test_the_all_in_one_checks_quota_settings_at_start(tmp_path):
    config = tmp_path / 'cyborg.conf'
    config.write_text('[quota]\ndriver = unified_limits\n')
    result = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-aio'), '--config-file',
         str(config), '--state-dir', str(tmp_path / 'state')],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().startswith(
        'cyborg-aio: configuration error: [quota]driver is unified_limits '
        'but [oslo_limit] has no auth_type')


@pytest.mark.parametrize('port', ['70000', 'abc'])
def test_the_all_in_one_says_a_bad_port_is_a_configuration_error(
        tmp_path, port):
    """oslo.config checks a command-line option's value only as it parses
    the command line, and ends the process there with status 1 and a line
    of its own."""
    result = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-aio'), '--port', port,
         '--state-dir', str(tmp_path / 'state')],
        capture_output=True, text=True, timeout=60)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    assert output == ('cyborg-aio: configuration error: argument --port: '
                      'Invalid Port(min=0, max=65535) value: %s' % port)
    assert not (tmp_path / 'state').exists()


def test_any_bad_command_line_value_is_a_configuration_error(
        tmp_path, capsys):
    """Every command parses its command line through service.parse_args:
    a typed command-line option of its own gets the same one line."""
    from oslo_config import cfg

    import cyborg.conf
    from cyborg.common import service
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    conf.register_cli_opt(cfg.IntOpt('workers', min=1))
    config = tmp_path / 'cyborg.conf'
    config.write_text('')
    with pytest.raises(SystemExit) as exited:
        service.parse_or_exit(
            conf, ['--config-file', str(config), '--workers', '0'],
            prog='cyborg-test')
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        'cyborg-test: configuration error: argument --workers: Invalid '
        'Integer(min=1) value: 0\n')


def test_argparse_errors_are_still_said(tmp_path, capsys):
    """What is not a value's type (an unknown option) stays argparse's:
    its usage and error on stderr, status 2."""
    from oslo_config import cfg

    import cyborg.conf
    from cyborg.common import service
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    config = tmp_path / 'cyborg.conf'
    config.write_text('')
    with pytest.raises(SystemExit) as exited:
        service.parse_or_exit(conf, ['--config-file', str(config),
                                     '--no-such-option'], prog='cyborg-test')
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith('usage: cyborg-test'), err
    assert err.endswith('cyborg-test: error: unrecognized arguments: '
                        '--no-such-option\n'), err


@pytest.mark.parametrize('host_ip', [None, '0.0.0.0', '::', '192.0.2.1'])
def test_noauth_on_an_address_others_reach_refuses_to_start(tmp_path,
                                                             host_ip):
    """noauth makes a request without identity headers the admin: on
    every interface (host_ip's default) anyone reaching the port was."""
    text = '[api]\nauth_strategy = noauth\nport = 1\n'
    if host_ip:
        text += 'host_ip = %s\n' % host_ip
    rc, output = _run('cyborg-api', tmp_path, text)
    assert rc == 2, output
    assert output == (
        'cyborg-api: configuration error: [api]auth_strategy is noauth, '
        'which makes anyone who reaches the API an admin, and [api]host_ip '
        '%(ip)s is not a loopback address: set host_ip = 127.0.0.1 to try '
        'cyborg out on this machine, use auth_strategy = keystone, or set '
        '[api]noauth_on_any_address = true if no one else can reach %(ip)s'
        % {'ip': host_ip or '0.0.0.0'})


def test_noauth_on_any_address_is_allowed_when_asked_for(tmp_path):
    """Past the check, said in a WARNING: it fails to listen on an
    address of no host (status 1), rather than serve."""
    rc, output = _run('cyborg-api', tmp_path,
                      '[api]\nauth_strategy = noauth\nhost_ip = 192.0.2.1\n'
                      'noauth_on_any_address = true\n')
    assert rc == 1, output
    assert 'configuration error' not in output
    assert ('noauth_on_any_address is set: anyone who reaches 192.0.2.1 '
            'port 6666 is an admin') in output
    assert 'cannot listen on 192.0.2.1:6666' in output


@pytest.mark.parametrize('host, loopback', [
    ('127.0.0.1', True), ('127.1.2.3', True), ('::1', True),
    ('::ffff:127.0.0.1', True), ('localhost', True),
    ('0.0.0.0', False), ('::', False), ('192.0.2.1', False),
    ('::ffff:192.0.2.1', False), ('fe80::1', False),
    ('no-such-host.invalid', False)])
def test_which_addresses_are_loopback(host, loopback):
    from cyborg.cmd import api as api_cmd
    assert api_cmd.is_loopback(host) is loopback
