"""cyborg-manage: operators' commands, carried out by the conductor.

    cyborg-manage [--config-file F] host list
    cyborg-manage [--config-file F] host forget HOST

``host list`` shows every host cyborg knows, whether its agent reports
and how many devices it has; ``host forget`` removes a retired host (its
devices, deployables, attach handles, Placement providers and row), and
refuses while the host reports or anything holds its devices
(cyborg.conductor.hosts; doc/source/operations.rst, "Retiring a compute
host").

The conductor owns every database write and is Placement's only client
(doc/source/architecture.rst), so these commands ask it over RPC, as
the API and the agents do: they need ``[DEFAULT]transport_url`` and no
database credentials.  Exit status: 0 done; 1 refused or failed, with
one line on stderr saying why; 2 a configuration error.
"""

import sys

from amqp import exceptions as amqp_exceptions
from kombu import exceptions as kombu_exceptions
from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging as messaging

import cyborg.conf
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import service
from cyborg.conductor import rpcapi as conductor_rpcapi

PROG = 'cyborg-manage'
# The conductor RPC version the host commands need.
HOSTS_VERSION = '1.8'
# Commands try the broker rpc.BROKER_RETRIES more times before giving up
# (one line, status 1): about 4 s with oslo.messaging's default intervals
# (1 s, then 3 s).
# Where oslo.messaging says it retries the broker (an ERROR line a try).
_RABBIT_LOGGER = 'oslo.messaging._drivers.impl_rabbit'
# Exit statuses (2, a configuration error, is service.config_error's).
OK, FAILED = 0, 1


def do_host_list(conf, client, context):
    hosts = client.host_list(context)
    rows = [(h['hostname'], h['compute_node_name'] or '-',
             _moment(h['last_report_at']),
             'silent' if h['silent'] else 'reporting', str(h['devices']),
             'synced' if h['placement_synced'] else 'unsynced')
            for h in hosts]
    _print_table(('HOST', 'COMPUTE NODE', 'LAST REPORT (UTC)', 'AGENT',
                  'DEVICES', 'PLACEMENT'), rows)
    return OK


def do_host_forget(conf, client, context):
    hostname = conf.command.hostname
    done = client.host_forget(context, hostname)
    print(f'Forgot host {hostname}: removed {done["devices"]} device(s), '
          f'{done["deployables"]} deployable(s), {done["attach_handles"]} '
          f'attach handle(s) and {done["providers"]} Placement '
          f'provider(s).')
    return OK


def _moment(iso):
    """'YYYY-MM-DD HH:MM:SS' of an ISO 8601 time; 'never' for None."""
    return 'never' if iso is None else iso.replace('T', ' ')[:19]


def _print_table(headers, rows):
    widths = [max(len(str(cell)) for cell in column)
              for column in zip(headers, *rows)]
    for row in (headers, *rows):
        print('  '.join(str(cell).ljust(width)
                        for cell, width in zip(row, widths)).rstrip())


def _add_parsers(subparsers):
    host = subparsers.add_parser(
        'host', help='The compute hosts whose agents report to cyborg.')
    actions = host.add_subparsers(title='host commands', dest='action')
    actions.required = True
    parser = actions.add_parser(
        'list', help='List the hosts cyborg knows, whether each agent '
                     'reports, and their devices.')
    parser.set_defaults(func=do_host_list)
    parser = actions.add_parser(
        'forget', help='Forget a retired host: remove its devices, '
                       'deployables, attach handles and Placement '
                       'providers.  Refused while its agent reports or '
                       'anything holds its devices.')
    parser.add_argument('hostname', metavar='HOST',
                        help='The host name, as "host list" shows it '
                             '(compared exactly).')
    parser.set_defaults(func=do_host_forget)


command_opt = cfg.SubCommandOpt('command', title='Commands',
                                help='Available commands',
                                handler=_add_parsers)


def _failure(exc):
    """One line saying why a command failed, or None for a bug."""
    if rpc.peer_too_old(exc):
        return (f'the conductors do not serve this command (conductor '
                f'RPC {HOSTS_VERSION}): upgrade them first')
    if isinstance(exc, messaging.RemoteError):
        # The conductor's refusal, whole: it names what holds the host.
        return (str(exc.value or '').strip().splitlines() or
                [exc.exc_type])[0]
    if isinstance(exc, messaging.MessageUndeliverable):
        return ('no conductor has ever listened on the message broker of '
                '[DEFAULT]transport_url: start cyborg-conductor')
    if isinstance(exc, messaging.MessagingTimeout):
        return ('no conductor answered in time ([DEFAULT]'
                'rpc_response_timeout); one may still be carrying the '
                'command out: see "host list" and the conductors\' logs')
    if isinstance(exc, (amqp_exceptions.AccessRefused,
                        amqp_exceptions.NotAllowed)):
        # At login: a wrong user or password, a virtual host that does
        # not exist or that the user may not use.
        return (f'the message broker of [DEFAULT]transport_url refused '
                f'the user, password or virtual host it names: '
                f'{_amqp_reason(exc)}')
    if isinstance(exc, amqp_exceptions.AMQPError):
        return (f'the message broker of [DEFAULT]transport_url cannot be '
                f'reached: {_amqp_reason(exc)}')
    if isinstance(exc, (messaging.MessagingException, OSError,
                        kombu_exceptions.KombuError)):
        return (f'the message broker of [DEFAULT]transport_url cannot be '
                f'reached: {exception.first_line(exc)}')
    return None


def _amqp_reason(exc):
    """The broker's own words (``ACCESS_REFUSED - Login was refused...``),
    without the channel and method numbers amqp puts before them."""
    return (getattr(exc, 'reply_text', None) or
            exception.first_line(exc)).strip()


def reach_broker(conf, client):
    """Connect to the broker, trying it ``rpc.BROKER_RETRIES`` more times;
    raises what the last try did (kombu's OperationalError for a broker
    nothing answers on, amqp's AccessRefused or NotAllowed for a refused
    login).

    The client's ``retry`` bounds only sending: oslo.messaging opens the
    queue a call's reply comes back on with no bound at all, so that a
    call made while the broker cannot be reached would wait for it
    forever.  A broker that just let this connection in lets that queue's
    in too: only a broker lost in between is waited for.  (The API opens
    its reply queue on a thread of its own instead,
    cyborg.api.conductor_client, which suits a server that must not
    block but tells no reason; a command wants the reason, at once.)
    """
    # No public call for this; another driver (the fake transport) has
    # nothing to wait for.
    driver = getattr(getattr(getattr(client, '_client', None), 'transport',
                             None), '_driver', None)
    connect = getattr(driver, '_get_connection', None)
    if connect is None:
        return
    with service.untold(conf, _RABBIT_LOGGER):
        with connect(retry=rpc.BROKER_RETRIES):
            pass


def main(argv=None):
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    conf.register_cli_opt(command_opt)
    logging.register_options(conf)
    # stdout carries the answer; log lines go to stderr.
    conf.set_default('use_stderr', True)
    service.prepare(argv, conf=conf, prog=PROG)
    # A driver that is not installed, a URL oslo.messaging cannot read:
    # the configuration's fault, said before anything else.
    service.check_transport_url(conf, PROG)
    try:
        client = conductor_rpcapi.ConductorAPI(
            conf, retry=rpc.BROKER_RETRIES, require_queue=True)
    except ValueError as exc:
        service.config_error(PROG, exc)
    try:
        if not client.can_manage_hosts():
            print(f'{PROG}: [upgrade_levels]conductor caps the conductor '
                  f'RPC at {client.version_cap}; host commands need '
                  f'{HOSTS_VERSION}', file=sys.stderr)
            return FAILED
        reach_broker(conf, client)
        return conf.command.func(conf, client,
                                 cyborg_context.get_admin_context())
    except Exception as exc:
        why = _failure(exc)
        if why is None:
            raise
        print(f'{PROG}: {why}', file=sys.stderr)
        return FAILED
    finally:
        rpc.cleanup()
