"""The agent's on-disk record of what the conductor last acknowledged.

It holds the digest the conductor stored for this host and the inventory
that digest stands for, so that a restarted agent sends only what changed
(often nothing) and a change made while the conductor was unreachable is
sent when it comes back.  Writes are atomic (temp file, fsync, rename): a
crash leaves either the old or the new record, never half of one.
"""

import json
import os

from oslo_log import log as logging

from cyborg.objects import inventory

LOG = logging.getLogger(__name__)


def default_path(conf, host):
    """``[agent]cache_file`` or ``$state_path/agent-<host>.json``."""
    return conf.agent.cache_file or os.path.join(conf.state_path,
                                                 f'agent-{host}.json')


class ReportCache:

    def __init__(self, path, hostname):
        self.path = path
        self.hostname = hostname

    def load(self):
        """``(digest, [DriverDevice])`` last acknowledged, or ``(None,
        None)`` when there is no usable record (first start, another
        host's file, a corrupt file): the agent then sends a full report."""
        try:
            with open(self.path) as f:
                record = json.load(f)
            if record.get('hostname') != self.hostname:
                return None, None
            devices = [inventory.DriverDevice.from_dict(d)
                       for d in record['devices']]
            return record['digest'], devices
        except FileNotFoundError:
            return None, None
        except (ValueError, KeyError, TypeError) as exc:
            LOG.warning('Ignoring unreadable agent cache %s (%s); the next '
                        'report is a full one.', self.path, exc)
            return None, None

    def save(self, digest, devices):
        record = {'hostname': self.hostname, 'digest': digest,
                  'devices': [d.to_dict() for d in devices]}
        directory = os.path.dirname(self.path) or '.'
        os.makedirs(directory, exist_ok=True)
        tmp = '%s.tmp.%d' % (self.path, os.getpid())
        with open(tmp, 'w') as f:
            json.dump(record, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def clear(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
