"""What the FPGA drivers share: programming through the vendor's tool, and
remembering what was programmed.

The tool runs privileged (``cyborg.agent.privileged.run_fpga_tool``); the
driver only names the tool and the PCI address it programs (the
privileged helper finds the tool and builds its command line), and
refuses an address that is not one of its FPGAs, so a bad request never
reaches a vendor tool.

Hardware does not say which Glance image it runs, so the agent records
the image it programmed, per device, in a state file
(``$state_path/fpga-<driver>-<host>.json``) with the device's function ids
as they were right after programming; discovery reports the image as the
deployables' ``bitstream_id`` while those ids are unchanged (someone
reprogramming the card by hand makes it unknown again, not wrong).  The
card's record is removed, on disk, before the tool starts, and the new
image recorded once it has succeeded: a tool that fails, a privileged
helper that dies, or an agent killed mid-write leaves the image unknown,
never the one before.  A refusal of the privileged helper before the tool
ran (no such tool in its directories, a tool that cannot be started, a
bitstream it does not take) never touched the card: the record is put
back as it was.
"""

import abc
import json
import os
import threading

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import files
from cyborg.drivers import base

LOG = logging.getLogger(__name__)


# What the privileged helper raises when it refused before the vendor
# tool ran (``run_fpga_tool``): the card was not touched.
REFUSED_BEFORE_THE_TOOL = (exception.Invalid, exception.NotFound,
                           exception.Conflict)

# Serialises the records' read-modify-write in this process: the agent
# programs two cards of one driver at once (one RPC thread each).
_RECORDS_LOCK = threading.Lock()


class BitstreamRecord:
    """``{controlpath id: {'image_uuid', 'fingerprint'}}`` on disk."""

    def __init__(self, conf, driver_name, host):
        self.path = os.path.join(conf.state_path,
                                 f'fpga-{driver_name}-{host}.json')

    def load(self):
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}
        except ValueError:
            LOG.warning('Ignoring unreadable %s', self.path)
            return {}

    def save(self, controlpath_id, image_uuid, fingerprint):
        """Record one card, the others' records kept."""
        def change(records):
            records[controlpath_id] = {'image_uuid': image_uuid,
                                       'fingerprint': fingerprint}
        self._update(change)

    def forget(self, controlpath_id):
        """Remove one card's record, the others' kept; returns the record
        removed (None when there was none)."""
        removed = []
        self._update(lambda records: removed.append(
            records.pop(controlpath_id, None)))
        return removed[0]

    def _update(self, change):
        """``change(records)`` written to disk: under a lock, through a
        temporary file of its own (renamed into place), so two cards
        recorded at once neither lose each other's record nor mix their
        writes, and synced, directory included, so that what is on disk
        when the vendor tool starts stays there whatever happens next."""
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        with _RECORDS_LOCK:
            records = self.load()
            change(records)
            files.write_json(self.path, records, sync_directory=True)


def fingerprint(device):
    """What identifies the loaded function(s): the deployables' function
    ids (empty for FPGAs that do not expose one)."""
    return sorted(d.attributes.get('function_id') or ''
                  for d in device.deployables)


class RecordsBitstreams(base.Programmable):
    """Sets ``bitstream_id`` on discovered devices from the record."""

    def _record(self):
        return BitstreamRecord(self.conf, self.name, self.host)

    def _unsaved(self):
        """{controlpath id: record} written since the file could not be:
        this process's word wins over the file's until a save works."""
        return self.__dict__.setdefault('_unsaved_records', {})

    def with_bitstreams(self, devices):
        records = dict(self._record().load(), **self._unsaved())
        for device in devices:
            record = records.get(device.controlpath_id.cpid_info)
            if record and record['fingerprint'] == fingerprint(device):
                for deployable in device.deployables:
                    deployable.bitstream_id = record['image_uuid']
        return devices

    def remember(self, controlpath_id, image_uuid):
        """Record ``image_uuid`` as what ``controlpath_id`` now runs.
        Where that fails it is kept in memory: with the card's function
        ids when they could be read, else with none, which matches no card
        (its image then reads as unknown, never as the one before)."""
        unsaved = self._unsaved()
        unsaved[controlpath_id] = {'image_uuid': image_uuid,
                                   'fingerprint': None}
        found = [d for d in self.discover()
                 if d.controlpath_id.cpid_info == controlpath_id]
        marks = fingerprint(found[0]) if found else []
        unsaved[controlpath_id]['fingerprint'] = marks
        self._record().save(controlpath_id, image_uuid, marks)
        unsaved.pop(controlpath_id, None)


class ToolProgrammable(RecordsBitstreams):
    """``Programmable`` by the vendor tool ``fpga_tool`` names."""

    @abc.abstractmethod
    def fpga_tool(self, controlpath_id):
        """``(tool, PCI address)``: the tool (a name of
        ``cyborg.agent.privileged.FPGA_TOOLS``) that programs
        ``controlpath_id``, and the function it is run on."""

    def program(self, controlpath_id, image_path, image_uuid):
        if controlpath_id not in {d.controlpath_id.cpid_info
                                  for d in self.discover()}:
            raise exception.ResourceNotFound(resource='FPGA',
                                             id=controlpath_id)
        from cyborg.agent import privileged
        tool, address = self.fpga_tool(controlpath_id)
        before = self._forget_before_writing(controlpath_id)
        LOG.info('Programming FPGA %s with image %s: %s on %s, %s',
                 controlpath_id, image_uuid, tool, address, image_path)
        try:
            privileged.run_fpga_tool(tool, address, image_path)
        except REFUSED_BEFORE_THE_TOOL:
            # The helper refused before the tool ran (no such tool, one
            # that cannot start, a bitstream it does not take): the card
            # runs what it ran.
            self._put_back(controlpath_id, before)
            raise
        # Whatever else it raises, the image recorded before is gone: the
        # tool failing may have written part of the card, the privileged
        # helper dying ("Premature eof") may have left it writing.
        try:
            self.remember(controlpath_id, image_uuid)
        except Exception:
            # The card runs the image: the programming succeeded, and the
            # conductor records it.  What reports say it runs comes from
            # memory meanwhile (``remember``).
            LOG.exception('FPGA %s was programmed with image %s, but the '
                          'record of it could not be written',
                          controlpath_id, image_uuid)

    def _forget_before_writing(self, controlpath_id):
        """Remove the card's record from disk before the tool may change
        the card, so that no report after it (this agent's, or a
        restarted one's after being killed mid-write) names the image it
        ran before.  Where that cannot be written (a full disk) nothing
        is programmed: a refusal, the card as it was.  Returns the record
        removed (None when there was none), for ``_put_back``."""
        unsaved = self._unsaved()
        before = unsaved.pop(controlpath_id, None)
        try:
            on_disk = self._record().forget(controlpath_id)
        except OSError as exc:
            if before is not None:
                unsaved[controlpath_id] = before
            raise exception.Conflict(
                message=f'Could not clear the record of the image FPGA '
                        f'{controlpath_id} runs ({exc}); the card was not '
                        f'touched')
        # This process's word wins over the file's (``with_bitstreams``).
        return before or on_disk

    def _put_back(self, controlpath_id, record):
        """The card's record as it was before ``_forget_before_writing``
        (``record``; nothing when there was none): in memory where it
        cannot be written."""
        if record is None:
            return
        try:
            self._record().save(controlpath_id, record['image_uuid'],
                                record['fingerprint'])
        except OSError:
            LOG.exception('Could not restore the record of the image FPGA '
                          '%s runs; reported from memory meanwhile',
                          controlpath_id)
            self._unsaved()[controlpath_id] = record
