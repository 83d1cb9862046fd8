"""doc/source/install.rst, run as written: its shell blocks in order, its
"serve" block and systemd units as processes, against the local MariaDB
and RabbitMQ, in a temporary directory standing for /etc/cyborg and
/var/lib/cyborg; so the page cannot rot.  A unit of ``Type=notify`` is
given a socket to say it is ready on, as systemd gives it, and waited
for as systemd waits for it before it starts the units ordered after it
(nova-compute after the agent).

Each code block of the page is preceded by a comment saying what to do
with it (``.. test: run``, ``serve NAME``, ``unit NAME``, ``vars``,
``skip (reason)``); an unmarked shell block fails the test.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid

import pytest
import requests
import sqlalchemy as sa

from tests.fixtures import databases
from tests.fixtures import processes

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir))
GUIDE = os.path.join(ROOT, 'doc', 'source', 'install.rst')
BIN = os.path.dirname(sys.executable)
MARK = re.compile(r'^\.\. test: (run|vars|serve|unit|skip)\b ?(.*)$')
BLOCK = re.compile(r'^\.\. code-block:: (\w+)\s*$')


def parse_guide(path=GUIDE):
    """[(action, argument, language, code)] in page order."""
    with open(path) as f:
        lines = f.read().splitlines()
    blocks, mark = [], None
    i = 0
    while i < len(lines):
        found = MARK.match(lines[i])
        if found:
            mark = found.groups()
        block = BLOCK.match(lines[i])
        if block:
            i += 1
            code = []
            while i < len(lines) and (not lines[i].strip() or
                                      lines[i].startswith('   ')):
                code.append(lines[i][3:])
                i += 1
            text = '\n'.join(code).strip('\n') + '\n'
            action, argument = mark or (None, None)
            blocks.append((action, argument, block.group(1), text))
            mark = None
            continue
        i += 1
    return blocks


def test_every_block_is_marked():
    blocks = parse_guide()
    assert len(blocks) > 10
    unmarked = [code for action, _arg, _lang, code in blocks
                if action is None]
    assert unmarked == []
    skipped = [arg for action, arg, _lang, _code in blocks
               if action == 'skip']
    assert all(arg.startswith('(') and len(arg) > 5 for arg in skipped)


def _local(text):
    # /opt/cyborg/bin is where the guide installs; here, this virtualenv.
    return text.replace('/opt/cyborg/bin', BIN)


def _exec_start(unit):
    command = _settings(unit, 'ExecStart')
    assert len(command) == 1, unit
    return _local(command[0]).split()


def _settings(unit, key):
    """The values ``key`` is given in ``unit``, in order."""
    return [line.split('=', 1)[1] for line in unit.splitlines()
            if line.startswith(key + '=')]


def _notify_socket():
    """A socket as systemd makes for a unit of ``Type=notify``: bound in
    the abstract namespace, named in ``$NOTIFY_SOCKET``; (socket,
    name)."""
    name = '@cyborg-guide-' + uuid.uuid4().hex
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind('\0' + name[1:])
    return sock, name


def _wait_ready(sock, timeout):
    """The fields of the message saying ``READY=1`` (the messages before
    it say how the start goes)."""
    sock.settimeout(timeout)
    while True:
        fields = _fields(sock.recv(4096))
        if fields.get('READY') == '1':
            return fields


def _fields(message):
    """A notification's fields: {key: value}."""
    return dict(line.split('=', 1) for line in message.decode().split('\n'))


class _Guide:
    """The variables, processes and leftovers of one run of the page."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        tag = uuid.uuid4().hex[:8]
        self.names = {'db': 'cyb_guide_%s' % tag,
                      'user': 'cyb_guide_%s' % tag,
                      'vhost': 'cyb_guide_%s' % tag}
        self.env = dict(
            os.environ,
            CONTROLLER='127.0.0.1', CYBORG_HOST='guide-%s' % tag,
            CYBORG_DB=self.names['db'], CYBORG_DB_USER=self.names['user'],
            CYBORG_DB_PASSWORD='db-%s' % tag,
            CYBORG_RABBIT_USER=self.names['user'],
            CYBORG_RABBIT_VHOST=self.names['vhost'],
            CYBORG_RABBIT_PASSWORD='rabbit-%s' % tag,
            CYBORG_KEYSTONE_PASSWORD='keystone-%s' % tag,
            CYBORG_API_PORT=str(processes.free_port()),
            PLACEMENT_PORT=str(processes.free_port()),
            OS_CYBORG_CONFIG_DIR=str(tmp_path / 'etc' / 'cyborg'),
            CYBORG_STATE_DIR=str(tmp_path / 'var' / 'lib' / 'cyborg'),
            PATH=BIN + os.pathsep + os.environ.get('PATH', ''),
            HOME=str(tmp_path / 'operator-home'))
        self.env.pop('OS_CYBORG_CONFIG', None)
        os.makedirs(self.env['HOME'])
        self.services = {}
        self.sandboxes = {}
        # Unit name -> the socket systemd would hear it on (Type=notify).
        self.notify = {}

    def run(self, code):
        done = subprocess.run(['bash', '-euo', 'pipefail', '-c',
                               _local(code)], env=self.env, cwd=self.tmp,
                              capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (code, done.stdout, done.stderr)
        return done.stdout

    def start(self, name, command, env=None):
        """A long-running process with a home, TMPDIR and working
        directory of its own, which must stay empty."""
        box = self.tmp / 'sandbox' / name
        dirs = {d: box / d for d in ('home', 'tmp', 'cwd')}
        for path in dirs.values():
            os.makedirs(path)
        self.sandboxes[name] = dirs
        environ = dict(self.env, HOME=str(dirs['home']),
                       TMPDIR=str(dirs['tmp']), PYTHONUNBUFFERED='1',
                       **(env or {}))
        log = open(self.tmp / ('%s.log' % name), 'wb')  # noqa: SIM115
        self.services[name] = (subprocess.Popen(
            command, env=environ, cwd=dirs['cwd'], stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True), log)

    def log(self, name):
        return (self.tmp / ('%s.log' % name)).read_text(errors='replace')

    def stop_all(self):
        """SIGTERM each service; returns {name: exit status}."""
        statuses = {}
        for name, (proc, log) in reversed(list(self.services.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            statuses[name] = proc.returncode
            log.close()
        self.services.clear()
        return statuses

    def cleanup(self):
        self.stop_all()
        for sock in self.notify.values():
            sock.close()
        admin = sa.create_engine(databases.MYSQL_ADMIN_URL,
                                 isolation_level='AUTOCOMMIT',
                                 poolclass=sa.pool.NullPool)
        with admin.connect() as connection:
            for db in (self.names['db'], self.names['db'] + '_placement'):
                connection.execute(sa.text('DROP DATABASE IF EXISTS %s'
                                           % db))
            for host in ('localhost', '%'):
                connection.execute(sa.text("DROP USER IF EXISTS '%s'@'%s'"
                                           % (self.names['user'], host)))
        for args in (('delete_vhost', self.names['vhost']),
                     ('delete_user', self.names['user'])):
            subprocess.run(('rabbitmqctl', '-q') + args,
                           capture_output=True, timeout=60)


def _devices(guide):
    url = 'http://127.0.0.1:%s/v2/devices' % guide.env['CYBORG_API_PORT']
    try:
        return requests.get(url, timeout=5).json()['devices']
    except (requests.RequestException, ValueError, KeyError):
        return []


@pytest.mark.skipif(shutil.which('mysql') is None or
                    shutil.which('rabbitmqctl') is None,
                    reason='the guide uses the mysql and rabbitmqctl '
                           'commands of the database and broker servers')
def test_the_install_guide_works_as_written(tmp_path):
    guide = _Guide(tmp_path)
    try:
        _follow(guide)
    finally:
        guide.cleanup()


def _follow(guide):
    units_started = False
    for action, argument, language, code in parse_guide():
        if action == 'run':
            assert language == 'bash', code
            if units_started:
                processes.wait_for(
                    lambda: any(d['hostname'] == guide.env['CYBORG_HOST']
                                for d in _devices(guide)),
                    timeout=120, what='the agent\'s first report')
                units_started = False
            output = guide.run(code)
            if 'device list' in code:
                assert guide.env['CYBORG_HOST'] in output, output
                assert 'FPGA' in output and '0xABCD' in output, output
            if 'device profile create' in code:
                assert 'fpga-dp' in output, output
        elif action == 'serve':
            assert argument == 'placement'
            guide.start('placement', ['bash', '-c', _local(code.strip())])
            url = 'http://127.0.0.1:%s/' % guide.env['PLACEMENT_PORT']
            processes.wait_for(lambda: _answers(url), timeout=60,
                               what='Placement')
        elif action == 'unit':
            _start_unit(guide, argument, code)
            units_started = True
    assert not units_started, 'the page checks nothing after the units'

    # Only the agent holds units after it (nova-compute) until ready.
    assert list(guide.notify) == ['cyborg-agent']
    # The services logged their version on start, and an access line per
    # request of the openstack client.
    assert 'cyborg-conductor %s starting' % _version() in guide.log(
        'cyborg-conductor')
    assert 'GET /accelerator/v2/devices' in guide.log('cyborg-api')
    statuses = guide.stop_all()
    assert _told(guide.notify['cyborg-agent']) == [{'STOPPING': '1'}]
    for name in ('cyborg-conductor', 'cyborg-api', 'cyborg-agent'):
        assert statuses[name] == 0, (name, guide.log(name)[-3000:])
        log = guide.log(name)
        assert 'Traceback' not in log and ' ERROR ' not in log, log[-3000:]
        # Nothing written outside the state directory.
        for where, path in guide.sandboxes[name].items():
            assert os.listdir(path) == [], (name, where, os.listdir(path))
    state = os.listdir(guide.env['CYBORG_STATE_DIR'])
    assert 'agent-%s.json' % guide.env['CYBORG_HOST'] in state


def _told(sock):
    """The messages ``sock`` holds, not read yet."""
    sock.setblocking(False)
    told = []
    while True:
        try:
            message = sock.recv(4096)
        except BlockingIOError:
            return told
        told.append(_fields(message))


def _start_unit(guide, name, unit):
    """Start the unit's command; one of ``Type=notify`` as systemd does:
    told where to say it is ready (and only its main process heard:
    ``NotifyAccess=main``), and waited for until it says so."""
    if _settings(unit, 'Type') != ['notify']:
        guide.start(name, _exec_start(unit))
        return
    assert _settings(unit, 'NotifyAccess') == ['main'], unit
    sock, address = _notify_socket()
    guide.notify[name] = sock
    guide.start(name, _exec_start(unit), env={'NOTIFY_SOCKET': address})
    try:
        ready = _wait_ready(sock, timeout=120)
    except TimeoutError:
        raise AssertionError('%s never said it was ready: %s' % (
            name, guide.log(name)[-3000:])) from None
    # The guide's agent runs the fake driver, which makes no mdevs.
    assert ready == {'READY': '1', 'STATUS': 'no enabled driver makes '
                     'mdevs: none to make again'}, ready


def _answers(url):
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


def _version():
    from cyborg import version
    return version.version_string()
