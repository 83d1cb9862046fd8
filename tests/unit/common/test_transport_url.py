"""What ``service.transport_url_problem`` says of the message broker URLs
a process uses, before anything connects: ``[DEFAULT]transport_url`` and,
where notifications go to a broker of their own,
``[oslo_messaging_notifications]transport_url``; each problem named by
the option that is wrong.  (tests/unit/cmd/test_config_errors.py: the
commands' one line and exit status 2.)"""

import importlib.metadata

import pytest
from oslo_config import cfg
from oslo_log import log as logging

import cyborg.conf
from cyborg.common import notify
from cyborg.common import rpc
from cyborg.common import service

NO_DRIVER = ('Failed to load transport driver "foo": No '
             "'oslo.messaging.drivers' driver found, looking for 'foo'")


@pytest.fixture(autouse=True)
def no_transport_yet():
    """As at a process's start: no RPC transport made (``rpc``'s check
    says nothing once one is)."""
    previous = rpc._TRANSPORT
    rpc.set_transport(None)
    yield
    rpc.set_transport(previous)


def _problem(tmp_path, text):
    config = tmp_path / 'cyborg.conf'
    config.write_text(text)
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    logging.register_options(conf)
    conf(['--config-file', str(config)], project='cyborg',
         default_config_files=[], default_config_dirs=[])
    try:
        return service.transport_url_problem(conf)
    finally:
        notify.reset()
        conf.reset()


def _rpc(url):
    return '[DEFAULT]\ntransport_url = %s\n' % url


def _notifications(url, driver='messagingv2'):
    return ('[oslo_messaging_notifications]\n%stransport_url = %s\n'
            % ('' if driver is None else 'driver = %s\n' % driver, url))


@pytest.mark.parametrize('url, host, port', [
    # Taken until the first connection: "Port out of range 0-65535".
    ('rabbit://u:p@127.0.0.1:99999/', '127.0.0.1', '99999'),
    ('rabbit://u:p@127.0.0.1:-1/', '127.0.0.1', '-1'),
    # Said as int()'s "invalid literal for int() with base 10: 'abc'".
    ('rabbit://u:p@127.0.0.1:abc/', '127.0.0.1', 'abc'),
    ('rabbit://u:p@127.0.0.1:/', '127.0.0.1', ''),
    ('rabbit://u:p@[::1]:70000/', '::1', '70000'),
    ('rabbit://u:p@a:5672,u:p@b:65536/', 'b', '65536'),
], ids=['too-high', 'negative', 'not-a-number', 'empty', 'ipv6',
        'second-host'])
def test_a_port_that_is_not_one_is_a_problem(tmp_path, url, host, port):
    says = 'host %s has port %r, not a number from 0 to 65535' % (host,
                                                                   port)
    assert _problem(tmp_path, _rpc(url)) == (
        '[DEFAULT]transport_url: ' + says)
    assert _problem(tmp_path, _notifications(url)) == (
        '[oslo_messaging_notifications]transport_url: ' + says)


@pytest.mark.parametrize('url', [
    'rabbit://u:p@127.0.0.1:65535/', 'rabbit://u:p@127.0.0.1:1/',
    # The rabbit driver's default port.
    'rabbit://u:p@127.0.0.1:0/',
    'rabbit://u:p@[::1]:5672/', 'rabbit://u:p@[::1]/',
    'rabbit://u:p@a,u:p@b:5672/', 'rabbit://', 'fake:/',
])
def test_ports_that_are_ones_are_no_problem(tmp_path, url):
    assert _problem(tmp_path, _rpc(url) + _notifications(url)) is None


def test_a_notification_url_that_cannot_work_is_a_problem(tmp_path):
    """It only failed as the first notification was sent."""
    assert _problem(tmp_path, _notifications('foo://x')) == (
        '[oslo_messaging_notifications]transport_url: ' + NO_DRIVER)
    assert _problem(tmp_path, _notifications('rabbit')) == (
        '[oslo_messaging_notifications]transport_url: No scheme specified')


def test_the_rpc_url_is_said_first(tmp_path):
    assert _problem(tmp_path, _rpc('foo://x') + _notifications('bar://')) \
        == '[DEFAULT]transport_url: ' + NO_DRIVER


@pytest.mark.parametrize('driver', [None, '', 'noop'])
def test_a_notification_url_nothing_sends_to_is_no_problem(tmp_path,
                                                           driver):
    """With notifications off nothing is made of it: not at start, not
    as a notification is sent."""
    text = _notifications('foo://x', driver=driver)
    assert _problem(tmp_path, text) is None
    config = tmp_path / 'cyborg.conf'
    config.write_text(text)
    conf = cfg.ConfigOpts()
    conf(['--config-file', str(config)], default_config_files=[],
         default_config_dirs=[])
    try:
        assert not notify.enabled(conf, host='h')
        assert not notify.send(conf, None, notify.DEVICE_ADD, {}, host='h')
    finally:
        notify.reset()


@pytest.mark.parametrize('text, says', [
    ('[oslo_messaging_rabbit]\nrpc_conn_pool_size = 1\n',
     '[oslo_messaging_rabbit]rpc_conn_pool_size: 1 must be greater than '
     'or equal to [oslo_messaging_rabbit]conn_pool_min_size: 2'),
    ('[oslo_messaging_rabbit]\nconn_pool_min_size = 40\n',
     '[oslo_messaging_rabbit]conn_pool_min_size: 40 must be less than or '
     'equal to [oslo_messaging_rabbit]rpc_conn_pool_size: 30'),
    ('[oslo_messaging_rabbit]\nrpc_conn_pool_size = 3\n'
     'conn_pool_min_size = 4\n',
     '[oslo_messaging_rabbit]rpc_conn_pool_size: 3 must be greater than '
     'or equal to [oslo_messaging_rabbit]conn_pool_min_size: 4'),
    # The URL's query wins over [oslo_messaging_rabbit].
    (_rpc('rabbit://u:p@h:5672/?rpc_conn_pool_size=1'),
     "[DEFAULT]transport_url's rpc_conn_pool_size: 1 must be greater "
     'than or equal to [oslo_messaging_rabbit]conn_pool_min_size: 2'),
    (_rpc('rabbit://u:p@h:5672/?conn_pool_min_size=9')
     + '[oslo_messaging_rabbit]\nrpc_conn_pool_size = 8\n'
     'conn_pool_min_size = 1\n',
     '[oslo_messaging_rabbit]rpc_conn_pool_size: 8 must be greater than '
     "or equal to [DEFAULT]transport_url's conn_pool_min_size: 9"),
    (_notifications('rabbit://u:p@h:5672/?conn_pool_min_size=31'),
     "[oslo_messaging_notifications]transport_url's conn_pool_min_size: "
     '31 must be less than or equal to [oslo_messaging_rabbit]'
     'rpc_conn_pool_size: 30'),
], ids=['size', 'minimum', 'both', 'query', 'query-minimum',
        'notifications-query'])
def test_a_pool_smaller_than_its_minimum_names_its_options(tmp_path, text,
                                                           says):
    """The rabbit driver refuses it as it loads, which oslo.messaging
    says as 'Failed to load transport driver "rabbit"': it was said of
    [DEFAULT]transport_url, whatever option was wrong."""
    assert _problem(tmp_path, text) == says


def test_a_query_naming_no_option_is_a_problem(tmp_path):
    """oslo.config's NoSuchOptError went through as a traceback."""
    assert _problem(tmp_path, _rpc('rabbit://u:p@h:5672/?pool=1')) == (
        '[DEFAULT]transport_url: no such option pool in group '
        '[oslo_messaging_rabbit]')


def _drivers(*names):
    return '[oslo_messaging_notifications]\n' + ''.join(
        'driver = %s\n' % name for name in names)


def _installed():
    """The notification drivers' names, as stevedore finds them."""
    return ', '.join(sorted({entry_point.name for entry_point in
                             importlib.metadata.entry_points(
                                 group='oslo.messaging.notify.drivers')}))


@pytest.mark.parametrize('names, unknown', [
    (('messagingv3',), "'messagingv3'"),
    (('messagingv2', 'messaging_v2'), "'messaging_v2'"),
    (('noop', 'Log', 'bogus'), "'Log', 'bogus'"),
], ids=['typo', 'beside-a-good-one', 'two'])
def test_a_notification_driver_not_installed_is_a_problem(tmp_path, names,
                                                          unknown):
    """A name no driver has was taken: oslo.messaging's notifier loaded
    the drivers it found, none here, and notifications were silently
    off."""
    assert _problem(tmp_path, _drivers(*names)) == (
        '[oslo_messaging_notifications]driver: not an installed '
        'notification driver: %s (installed: %s)' % (unknown, _installed()))


@pytest.mark.parametrize('names', [
    (), ('',), ('noop',), ('messagingv2',), ('messaging', 'log'),
    ('routing',), ('test',)])
def test_installed_notification_drivers_are_no_problem(tmp_path, names):
    assert _problem(tmp_path, _drivers(*names)) is None


def test_the_notification_driver_is_said_between_the_urls(tmp_path):
    bad_driver = _drivers('messagingv3')
    assert _problem(tmp_path, _rpc('foo://x') + bad_driver).startswith(
        '[DEFAULT]transport_url: ')
    assert _problem(tmp_path, _notifications('foo://x', 'messagingv3')
                    ).startswith('[oslo_messaging_notifications]driver: ')


@pytest.mark.parametrize('check', [rpc.check_transport_url,
                                   notify.check_transport_url])
def test_a_query_naming_no_driver_option_is_a_url_error(tmp_path, check):
    """What ``transport_url_problem`` catches, for each URL: the rabbit
    driver's NoSuchOptError for an option it does not have."""
    url = 'rabbit://u:p@127.0.0.1:5672/?pool=1'
    config = tmp_path / 'cyborg.conf'
    config.write_text(_rpc(url) + _notifications(url))
    conf = cfg.ConfigOpts()
    conf(['--config-file', str(config)], default_config_files=[],
         default_config_dirs=[])
    try:
        with pytest.raises(rpc.TRANSPORT_URL_ERRORS) as raised:
            check(conf)
        assert isinstance(raised.value, cfg.NoSuchOptError)
    finally:
        notify.reset()
        conf.reset()


@pytest.mark.parametrize('url, driver', [
    (None, 'kafka'), ('amqp://h:5672/', 'amqp')])
def test_a_driver_module_that_cannot_be_imported_failed_to_load(
        tmp_path, url, driver):
    """stevedore lets the import error of a driver's module through
    (kafka:// without confluent_kafka): said as the driver failing to
    load, the driver named from the URL made (``[DEFAULT]transport_url``
    where none is given), for the RPC transport and notifications'
    alike."""
    config = tmp_path / 'cyborg.conf'
    config.write_text(_rpc('kafka://h:9092/'))
    conf = cfg.ConfigOpts()
    conf(['--config-file', str(config)], default_config_files=[],
         default_config_dirs=[])
    missing = ImportError("No module named 'confluent_kafka'")

    def make(made_of):
        assert made_of is conf
        raise missing

    with pytest.raises(rpc.messaging.DriverLoadFailure) as raised:
        rpc.driver_loaded(make, conf, url)
    assert raised.value.driver == driver
    assert raised.value.__cause__ is missing
    assert str(raised.value) == ('Failed to load transport driver "%s": '
                                 "No module named 'confluent_kafka'"
                                 % driver)
