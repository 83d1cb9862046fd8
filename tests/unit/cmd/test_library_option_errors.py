"""A bad value of a library's option (oslo.log's, oslo.messaging's,
oslo.middleware's...) stops a command at start like a bad value of
cyborg's own: one line, exit status 2.  Libraries register their options
only where they use them, so oslo.config used to check those values
only then: the API answered 500 to every request, or started with the
value unchecked, and ``[DEFAULT]debug = maybe`` ended every command with
oslo.config's own line and status 1."""

import os
import subprocess
import sys

import oslo_messaging as messaging
import pytest
from oslo_config import cfg
from oslo_log import log as logging

import cyborg.conf
from cyborg.api import app as api_app
from cyborg.common import service

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                    os.pardir)

BAD = [
    ('[DEFAULT]\ndebug = maybe\n', 'debug', "boolean value 'maybe'"),
    ('[oslo_middleware]\nmax_request_body_size = big\n',
     'max_request_body_size', "'big'"),
    ('[oslo_middleware]\nenable_proxy_headers_parsing = perhaps\n',
     'enable_proxy_headers_parsing', "boolean value 'perhaps'"),
    ('[oslo_messaging_rabbit]\nheartbeat_timeout_threshold = often\n',
     'heartbeat_timeout_threshold', "'often'"),
    ('[oslo_policy]\nenforce_new_defaults = sometimes\n',
     'enforce_new_defaults', "boolean value 'sometimes'"),
]


def _run(command, tmp_path, text, timeout=60):
    config = tmp_path / 'cyborg.conf'
    # Good enough to start with, but for the bad value.
    config.write_text(text + '[api]\nauth_strategy = noauth\nport = 1\n'
                      'host_ip = 127.0.0.1\n')
    done = subprocess.run(
        [os.path.join(sys.prefix, 'bin', command[0]), '--config-file',
         str(config), *command[1:]],
        capture_output=True, text=True, timeout=timeout,
        env=dict(os.environ, OS_CYBORG_CONFIG_DIR=str(tmp_path / 'none')))
    return done.returncode, (done.stdout + done.stderr).strip(), config


def _assert_one_line(rc, output, script, config, name, says):
    assert rc == 2, output
    assert output.count('\n') == 0, output
    assert output.startswith(
        '%s: configuration error: Value for option %s from %s is not '
        'valid: ' % (script, name, config)), output
    assert says in output


@pytest.mark.parametrize('script, text, name, says', [
    ('cyborg-api', *bad) for bad in BAD] + [
    ('cyborg-conductor', *BAD[0]), ('cyborg-conductor', *BAD[3]),
    ('cyborg-agent', *BAD[0]), ('cyborg-agent', *BAD[3])])
def test_a_bad_library_value_is_one_line(tmp_path, script, text, name,
                                         says):
    rc, output, config = _run([script], tmp_path, text)
    _assert_one_line(rc, output, script, config, name, says)


@pytest.mark.parametrize('command', [
    ['cyborg-status', 'upgrade', 'check'], ['cyborg-dbsync', 'version'],
])
def test_commands_check_library_values_too(tmp_path, command):
    text, name, says = BAD[1]
    rc, output, config = _run(command, tmp_path, text)
    _assert_one_line(rc, output, command[0], config, name, says)


@pytest.mark.parametrize('text, name, says', [
    BAD[0], BAD[3],
    # cyborg-aio's own command-line option, in a config file.
    ('[DEFAULT]\nport = 99999\n', 'port', 'less than or equal to 65535'),
])
def test_the_all_in_one_checks_library_values(tmp_path, text, name, says):
    rc, output, config = _run(
        ['cyborg-aio', '--state-dir', str(tmp_path / 'state')], tmp_path,
        text)
    _assert_one_line(rc, output, 'cyborg-aio', config, name, says)
    assert not (tmp_path / 'state').exists()


def test_a_bad_value_from_the_environment_is_one_line(tmp_path):
    config = tmp_path / 'cyborg.conf'
    config.write_text('[api]\nport = 1\n')
    done = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-conductor'),
         '--config-file', str(config)],
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, **{
            'OS_OSLO_MESSAGING_RABBIT__RABBIT_QOS_PREFETCH_COUNT': 'x'}))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count('\n') == 1, done.stderr
    assert done.stderr.startswith('cyborg-conductor: configuration error: ')
    assert 'rabbit_qos_prefetch_count' in done.stderr


def test_help_needs_no_good_values(tmp_path):
    rc, output, _config = _run(['cyborg-conductor', '--help'], tmp_path,
                               BAD[0][0])
    assert rc == 0, output
    assert 'usage: cyborg-conductor' in output


def test_the_checked_namespaces_are_those_of_the_sample():
    with open(os.path.join(ROOT, 'etc', 'cyborg',
                           'cyborg-config-generator.conf')) as f:
        # Each "namespace = ..." line; configparser keeps the last only.
        namespaces = [line.split('=', 1)[1].strip() for line in f
                      if line.startswith('namespace')]
    assert namespaces
    assert sorted(namespaces) == sorted(service.OPTION_NAMESPACES)


def test_every_option_an_api_process_registers_is_checked():
    """What a running API registers where it uses it (the middleware's,
    the policy's, the broker driver's) is in the checked namespaces; the
    rest was registered before the parse, and is read after it."""
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    logging.register_options(conf)
    conf([], project='cyborg', default_config_files=[],
         default_config_dirs=[])
    at_parse = _registered(conf)
    conf.set_override('auth_strategy', 'noauth', group='api')
    api_app.build_app(conf)
    transport = messaging.get_rpc_transport(
        conf, url='rabbit://guest:guest@127.0.0.1:1/')
    try:
        later = _registered(conf) - at_parse
    finally:
        transport.cleanup()
        conf.reset()
    assert ('oslo_middleware', 'max_request_body_size') in later
    assert ('oslo_messaging_rabbit', 'heartbeat_timeout_threshold') in later
    checked = set()
    for group, opts in service.namespace_opts():
        checked.update((str(group or 'DEFAULT'), opt.dest) for opt in opts)
    assert not later - checked


def _registered(conf):
    registered = set()
    for name in conf:
        section = conf[name]
        if isinstance(section, cfg.ConfigOpts.GroupAttr):
            registered.update((name, opt) for opt in section)
        else:
            registered.add(('DEFAULT', name))
    return registered
