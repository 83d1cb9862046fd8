"""The agent's on-disk record of what the conductor last acknowledged.

It holds the digest the conductor stored for this host and the inventory
that digest stands for, so that a restarted agent sends only what changed
(often nothing) and a change made while the conductor was unreachable is
sent when it comes back.  Writes are atomic (``files.write_json``: temp
file, fsync, rename): a crash leaves either the old or the new record,
never half of one, and the temporary file an agent killed mid-write left
is removed when the next one starts.  A record that cannot be read,
whatever the reason, is no record: the agent sends a full report, and
keeps reporting, rather than stop on the file.
"""

import json
import os

from oslo_log import log as logging

from cyborg.common import files
from cyborg.common import said
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)


def default_path(conf, host):
    """``[agent]cache_file`` or ``$state_path/agent-<host>.json``."""
    return conf.agent.cache_file or os.path.join(conf.state_path,
                                                 f'agent-{host}.json')


class ReportCache:
    """The record at ``path``; made once, as the agent starts (its
    reporter's), which removes the temporary files an agent killed
    mid-write left of it."""

    def __init__(self, path, hostname):
        self.path = path
        self.hostname = hostname
        # What was last wrong with the record, said once (every report
        # reads it).
        self._problems = said.Problems(LOG)
        files.remove_leftovers(path)

    def load(self):
        """``(digest, [DriverDevice])`` last acknowledged, or ``(None,
        None)`` when there is no usable record (first start, another
        host's file, a file that is corrupt, not a record, or that cannot
        be read): the agent then sends a full report.

        The digest becomes the next delta's ``base_digest``: one the
        conductor refuses (not a string, empty, too long) would make it
        refuse every report of the host.  A saved digest is always the
        inventory digest of the saved devices, so a record whose digest
        is anything else (edited by hand, damaged) is no record."""
        try:
            with open(self.path) as f:
                record = json.load(f)
            if not isinstance(record, dict):
                raise ValueError('not a JSON object')
            if record.get('hostname') != self.hostname:
                other = repr(record.get('hostname'))[:80]
                self._problems.say(
                    f'host {other}', 'Ignoring the agent cache %s: it is '
                    'the record of host %s, not of this host %r; the next '
                    'report is a full one, and its record replaces that '
                    'file.', self.path, other, self.hostname)
                return None, None
            devices = [inventory.DriverDevice.from_dict(d)
                       for d in record['devices']]
            digest = record['digest']
            if digest != inventory.inventory_digest(devices):
                raise ValueError(f'its digest {str(digest)[:80]!r} is not '
                                 f'that of its devices')
            found = digest, devices
        except FileNotFoundError:
            found = None, None
        except Exception as exc:
            # Whatever the reason (a file nested too deep for the parser
            # raises RecursionError): the agent must keep reporting.
            problem = f'{type(exc).__name__}: {str(exc)[:200]}'
            self._problems.say(problem, 'Ignoring unreadable agent cache '
                               '%s (%s); the next report is a full one.',
                               self.path, problem)
            return None, None
        self._problems.solved()
        return found

    def save(self, digest, devices):
        """Write the record (its directory made if need be); raises
        OSError when it cannot be, the record of before left as it
        was."""
        files.write_json(self.path, {
            'hostname': self.hostname, 'digest': digest,
            'devices': [d.to_dict() for d in devices]})

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
