"""The agent's on-disk record of what the conductor last acknowledged.

It holds the digest the conductor stored for this host and the inventory
that digest stands for, so that a restarted agent sends only what changed
(often nothing) and a change made while the conductor was unreachable is
sent when it comes back.  Writes are atomic (temp file, fsync, rename): a
crash leaves either the old or the new record, never half of one.  A
record that cannot be read, whatever the reason, is no record: the agent
sends a full report, and keeps reporting, rather than stop on the file.
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
        # What was last wrong with the record, said once (every report
        # reads it).
        self._unreadable = None

    def load(self):
        """``(digest, [DriverDevice])`` last acknowledged, or ``(None,
        None)`` when there is no usable record (first start, another
        host's file, a file that is corrupt, not a record, or that cannot
        be read): the agent then sends a full report."""
        try:
            with open(self.path) as f:
                record = json.load(f)
            if not isinstance(record, dict):
                raise ValueError('not a JSON object')
            if record.get('hostname') != self.hostname:
                return None, None
            devices = [inventory.DriverDevice.from_dict(d)
                       for d in record['devices']]
            found = record['digest'], devices
        except FileNotFoundError:
            found = None, None
        except (OSError, ValueError, KeyError, TypeError,
                AttributeError) as exc:
            problem = f'{type(exc).__name__}: {exc}'
            if problem != self._unreadable:
                LOG.warning('Ignoring unreadable agent cache %s (%s); the '
                            'next report is a full one.', self.path,
                            problem)
            self._unreadable = problem
            return None, None
        self._unreadable = None
        return found

    def save(self, digest, devices):
        record = {'hostname': self.hostname, 'digest': digest,
                  'devices': [d.to_dict() for d in devices]}
        directory = os.path.dirname(self.path) or '.'
        os.makedirs(directory, exist_ok=True)
        tmp = '%s.tmp.%d' % (self.path, os.getpid())
        try:
            with open(tmp, 'w') as f:
                json.dump(record, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            # Leave no half-written file behind (a full disk).
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def clear(self):
        """Forget the record (the next report is a full one); a record
        that cannot be removed is left, said in the log: it is only
        ever a base the conductor can refuse."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            LOG.warning('Cannot remove the agent cache %s (%s).', self.path,
                        exc)
