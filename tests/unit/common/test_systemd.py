"""The sd_notify protocol (``cyborg.common.systemd``), heard on real
datagram sockets bound where ``$NOTIFY_SOCKET`` says, as systemd binds
its own: a path, or a name in the abstract namespace (``@...``)."""

import logging
import os
import shutil
import socket
import select
import tempfile
import threading
import time
import uuid

import pytest

from cyborg.common import systemd


class Listener:
    """What systemd hears: each message as {field: value}, in order; read
    from any thread."""

    def __init__(self, sock):
        self.sock = sock
        self.sock.setblocking(False)
        self._lock = threading.Lock()
        self._heard = []

    def next(self, timeout=30):
        """The next message; fails after ``timeout`` s without one."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                self._read()
                if self._heard:
                    return self._heard.pop(0)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f'systemd was told nothing within '
                                     f'{timeout} s')
            select.select([self.sock], [], [], min(left, 0.1))

    def pending(self):
        """The messages sent and not read yet (a datagram is in the
        socket's queue once its ``sendto`` returned)."""
        with self._lock:
            self._read()
            heard, self._heard = self._heard, []
        return heard

    def _read(self):
        while True:
            try:
                self._heard.append(_fields(self.sock.recv(4096)))
            except BlockingIOError:
                return


def _fields(message):
    return dict(line.split('=', 1)
                for line in message.decode().split('\n'))


@pytest.fixture(params=['path', 'abstract'])
def notify_socket(request, monkeypatch):
    """A socket systemd would listen on, named in ``$NOTIFY_SOCKET``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    where = None
    if request.param == 'path':
        # Short: a socket's path is 107 bytes at most.
        where = tempfile.mkdtemp(prefix='sd-')
        name = address = os.path.join(where, 'notify')
    else:
        name = '@cyborg-test-' + uuid.uuid4().hex
        address = '\0' + name[1:]
    sock.bind(address)
    monkeypatch.setenv(systemd.ENVIRONMENT, name)
    yield Listener(sock)
    sock.close()
    if where is not None:
        shutil.rmtree(where)


def test_a_message_is_one_datagram_of_its_fields(notify_socket):
    assert systemd.listening()
    assert systemd.ready('all set')
    assert systemd.status('waiting', extend_timeout=70.5)
    assert systemd.stopping()
    assert notify_socket.pending() == [
        {'READY': '1', 'STATUS': 'all set'},
        {'STATUS': 'waiting', 'EXTEND_TIMEOUT_USEC': '70500000'},
        {'STOPPING': '1'}]


@pytest.mark.parametrize('value', [None, ''])
def test_nothing_is_sent_where_systemd_does_not_listen(monkeypatch, caplog,
                                                       value):
    if value is None:
        monkeypatch.delenv(systemd.ENVIRONMENT, raising=False)
    else:
        monkeypatch.setenv(systemd.ENVIRONMENT, value)
    caplog.set_level(logging.DEBUG, logger=systemd.__name__)
    assert not systemd.listening()
    assert systemd.ready('all set') is False
    assert [r.levelname for r in caplog.records] == ['DEBUG']


@pytest.mark.parametrize('name', [
    'relative/notify',          # neither a path nor an abstract name
    'vsock:2:1234',             # systemd's vsock: not spoken here
    '/nonexistent-cyborg-test/notify',  # nobody bound it
    '@cyborg-test-unbound-'])
def test_a_message_that_cannot_be_sent_is_logged_not_raised(
        monkeypatch, caplog, name):
    if name.startswith('@'):
        name += uuid.uuid4().hex
    monkeypatch.setenv(systemd.ENVIRONMENT, name)
    caplog.set_level(logging.WARNING, logger=systemd.__name__)
    assert systemd.ready('all set') is False
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and 'READY=1' in said[0], said


def test_a_socket_nobody_reads_does_not_hang_the_caller(
        notify_socket, monkeypatch, caplog):
    """Its queue full, a message waits ``_SEND_TIMEOUT`` at most, and is
    dropped (logged)."""
    monkeypatch.setattr(systemd, '_SEND_TIMEOUT', 0.05)
    caplog.set_level(logging.WARNING, logger=systemd.__name__)
    sent = 0
    while systemd.status('message %d' % sent):
        sent += 1
        assert sent < 100000, 'the queue never filled'
    assert sent > 0
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and 'timed out' in said[0], said
    assert len(notify_socket.pending()) == sent
