"""Telling systemd how a service is doing: the sd_notify protocol.

A unit of ``Type=notify`` counts as started only once its process says
``READY=1``; units ordered after it (``Before=`` on its side, ``After=``
on theirs) start then, not as soon as its process runs.  systemd names
the socket to say it on in ``$NOTIFY_SOCKET`` (a path, or a name in the
abstract namespace when it starts with ``@``); each message is one
datagram of newline-separated ``KEY=value`` fields (``READY=1``,
``STATUS=<a line systemctl status shows>``, ``STOPPING=1``,
``EXTEND_TIMEOUT_USEC=<µs>``).  See sd_notify(3).

Written here rather than taken from a library: it is one datagram, and
the agent's hosts would otherwise need one more package.  Without
``$NOTIFY_SOCKET`` (not started by systemd, or by a unit of another
type) nothing is sent.  A message that cannot be sent is logged and
dropped, never raised: telling systemd must not stop the service.  With
``NotifyAccess=main`` systemd hears the main process only; what a child
process (the privileged helper) inherits of the variable is ignored.
"""

import os
import socket

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

ENVIRONMENT = 'NOTIFY_SOCKET'
# How long a message may wait for room on the socket (systemd reads its
# messages at once; a socket nobody reads must not hang the caller).
_SEND_TIMEOUT = 2.0


def listening():
    """Whether systemd asked to be told (``$NOTIFY_SOCKET`` is set)."""
    return bool(os.environ.get(ENVIRONMENT))


def notify(*fields):
    """Send ``fields`` (``'KEY=value'`` strings) as one message; True
    when it was sent, False when nobody listens or it could not be sent
    (logged: WARNING, DEBUG when nobody listens)."""
    name = os.environ.get(ENVIRONMENT)
    if not name:
        LOG.debug('$%s is not set: not telling systemd %s', ENVIRONMENT,
                  ', '.join(fields))
        return False
    address = _address(name)
    if address is None:
        LOG.warning('Cannot tell systemd %s: $%s (%s) is neither a path '
                    'nor an abstract socket name (@...)', ', '.join(fields),
                    ENVIRONMENT, name)
        return False
    message = '\n'.join(fields).encode()
    try:
        with socket.socket(socket.AF_UNIX,
                           socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(_SEND_TIMEOUT)
            sock.sendto(message, address)
    except (OSError, ValueError) as exc:
        LOG.warning('Cannot tell systemd %s on %s: %s', ', '.join(fields),
                    name, exc)
        return False
    LOG.debug('Told systemd %s', ', '.join(fields))
    return True


def _address(name):
    """The socket address of ``$NOTIFY_SOCKET``'s value, None when it is
    none this module can send to (systemd's vsock addresses)."""
    if name.startswith('@'):
        return '\0' + name[1:]
    if name.startswith('/'):
        return name
    return None


def ready(status):
    """``READY=1``, with ``status``: the start-up is done."""
    return notify('READY=1', 'STATUS=' + status)


def status(text, extend_timeout=None):
    """``STATUS=text``; with ``extend_timeout`` (seconds), also asks
    systemd to wait that long from now before it gives up on the start
    (``EXTEND_TIMEOUT_USEC``; it never shortens ``TimeoutStartSec``)."""
    fields = ['STATUS=' + text]
    if extend_timeout is not None:
        fields.append('EXTEND_TIMEOUT_USEC=%d' % (extend_timeout * 1e6))
    return notify(*fields)


def stopping():
    """``STOPPING=1``: the service is stopping."""
    return notify('STOPPING=1')
