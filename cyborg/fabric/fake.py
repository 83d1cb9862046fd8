"""The fake fabric driver (``fake``): a fabric that exists only as files.

It keeps what is attached where in ``[fabric]fake_state_dir``
(``attached.json``: {fabric address: {hostname, instance_uuid, handle}})
and appends every call to ``journal.jsonl``, one JSON object a line
(``op``: ``attach`` | ``detach``, ``fabric_address``, ``handle``,
``hostname``, ``instance_uuid``, ``pool``), so a test in another process
can check what the conductor asked of the fabric.  Like a real fabric it
refuses to attach an address that is attached to another host.  A file
named ``fail_attach`` (``fail_detach``) in the directory makes every
attach (detach) fail, to test what follows a fabric's refusal.  While a
file named ``hang`` is there, every call (journaled first) waits without
answering, like a fabric manager that hangs; once it is removed, the
calls go on and do what they were asked.
"""

import json
import os
import threading
import time

from cyborg.fabric import base

JOURNAL = 'journal.jsonl'
ATTACHED = 'attached.json'
FAIL_ATTACH = 'fail_attach'
FAIL_DETACH = 'fail_detach'
HANG = 'hang'
# Seconds between two looks, while hanging, for ``hang`` gone.
HANG_POLL = 0.05


class FakeFabricError(Exception):
    pass


class FakeFabricDriver(base.FabricDriver):
    name = 'fake'

    _lock = threading.Lock()

    def _dir(self):
        path = self.conf.fabric.fake_state_dir
        if not path:
            raise FakeFabricError('the fake fabric driver needs '
                                  '[fabric]fake_state_dir')
        os.makedirs(path, exist_ok=True)
        return path

    def attach(self, handle, hostname, instance_uuid):
        path = self._dir()
        self._journal(path, 'attach', handle, hostname, instance_uuid)
        self._hang(path)
        with self._lock:
            if os.path.exists(os.path.join(path, FAIL_ATTACH)):
                raise FakeFabricError('the fake fabric refused to attach '
                                      '%s' % handle.fabric_address)
            attached = self._read(path)
            now = attached.get(handle.fabric_address)
            if now is not None and now['hostname'] != hostname:
                raise FakeFabricError('%s is attached to %s' % (
                    handle.fabric_address, now['hostname']))
            attached[handle.fabric_address] = {
                'hostname': hostname, 'instance_uuid': instance_uuid,
                'handle': handle.uuid}
            self._write(path, attached)
        return {'transport': 'fake', 'target': handle.fabric_address,
                'host': hostname,
                'device_path': '/dev/disk/by-id/fake-' + handle.uuid}

    def detach(self, handle, hostname, instance_uuid):
        path = self._dir()
        self._journal(path, 'detach', handle, hostname, instance_uuid)
        self._hang(path)
        with self._lock:
            if os.path.exists(os.path.join(path, FAIL_DETACH)):
                raise FakeFabricError('the fake fabric refused to detach '
                                      '%s' % handle.fabric_address)
            attached = self._read(path)
            now = attached.get(handle.fabric_address)
            if now is not None and now['hostname'] == hostname:
                del attached[handle.fabric_address]
                self._write(path, attached)

    @staticmethod
    def _hang(path):
        while os.path.exists(os.path.join(path, HANG)):
            time.sleep(HANG_POLL)

    @classmethod
    def _journal(cls, path, op, handle, hostname, instance_uuid):
        line = json.dumps({'op': op, 'fabric_address': handle.fabric_address,
                           'handle': handle.uuid, 'pool': handle.pool_name,
                           'hostname': hostname,
                           'instance_uuid': instance_uuid})
        with cls._lock, open(os.path.join(path, JOURNAL), 'a') as journal:
            journal.write(line + '\n')

    @staticmethod
    def _read(path):
        try:
            with open(os.path.join(path, ATTACHED)) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    @staticmethod
    def _write(path, attached):
        tmp = os.path.join(path, ATTACHED + '.tmp')
        with open(tmp, 'w') as f:
            json.dump(attached, f, sort_keys=True)
        os.replace(tmp, os.path.join(path, ATTACHED))


def journal(path):
    """The fake fabric's journal in ``path``: a list of dicts (tests)."""
    try:
        with open(os.path.join(path, JOURNAL)) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def attached(path):
    """{fabric address: {hostname, instance_uuid, handle}} (tests)."""
    return FakeFabricDriver._read(path)
