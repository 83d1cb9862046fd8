"""What the FPGA drivers share: programming through the vendor's tool, and
remembering what was programmed.

The tool runs privileged (``cyborg.agent.privileged.run_fpga_tool``); the
driver only names the tool and the PCI address it programs (the
privileged helper finds the tool and builds its command line), and
refuses an address that is not one of its FPGAs, so a bad request never
reaches a vendor tool.

Hardware does not say which Glance image it runs, so the agent records
the image it programmed, per device, in a state file
(``$state_path/fpga-<driver>-<host>.json``) with the card's fingerprint
as it was right after programming: what the card itself shows of the
function it runs (the DFL port's ``afu_id``, XRT's ``xclbinuuid``) and of
which card it is (its PCI vendor, device and subsystem ids, its serial
number where readable; ``RecordsBitstreams.fingerprint``).  Discovery
reports the image as the deployables' ``bitstream_id`` only while the
card shows that same fingerprint, and forgets the record as soon as it
does not: the card reprogrammed by hand, reset or rebooted (the function
id changes or cannot be read), another card in the slot, or the card gone.
A card on which nothing readable proves the function (no function id
shown: nothing loaded, or the function is not bound to the vendor's
driver) has no record that holds: its image is unknown, never the one
recorded before.  The one exception is a DFL function passed through
(vfio-pci) or unbound whose instance cannot reprogram the card (a VF:
the management engine stays on the host's PF), which runs what it ran:
the ids last read on it while dfl-pci was bound stand for it as long as
the card's PCI ids confirm it is the same card, and the boot id that no
reboot came between (``LastSeen``, the Intel driver's).  An Alveo's user
function, or a DFL PF passed through whole, can load functions of its
own from the instance: unknown.

The card's record is removed, on disk, before the tool starts, and the
new image recorded once it has succeeded: a tool that fails, a
privileged helper that dies, or an agent killed mid-write leaves the
image unknown, never the one before.  A refusal of the privileged
helper before the tool ran (no such tool in its directories, a tool that
cannot be started, a bitstream it does not take) never touched the card:
the record is put back as it was.

Records written by the agent of 2027.1 hold a fingerprint of another
form: the sorted function ids of the card's deployables (one per
deployable, '' for one showing none), no mark named (``kind=``).  The
first discovery after the upgrade keeps such a record where it still
proves the image as a record of this release would: the card's
deployables show function ids, the very ids recorded (a deployable
showing none, a VF passed through, proves nothing either way), and
writes it again with the card's fingerprint
(``RecordsBitstreams.with_bitstreams``).  Those that prove nothing are
forgotten as any other: all their ids empty (Xilinx and Inspur cards,
whose deployables show no function id: such a record matched whatever
the card ran), or ids the card no longer shows.
"""

import abc
import json
import os
import threading

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import files
from cyborg.drivers import base, pci_health, sysfs

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

    def replace_stale(self, replaced):
        """Write the records ``replaced`` ({controlpath id: (record, new
        record)}) in place of those still as given, the others kept."""
        def change(records):
            for controlpath_id, (record, new) in replaced.items():
                if records.get(controlpath_id) == record:
                    records[controlpath_id] = new
        if any(self.load().get(c) == r for c, (r, _) in replaced.items()):
            self._update(change)

    def forget_stale(self, stale):
        """Remove the records ``stale`` ({controlpath id: record}) that
        are still as given, the others kept."""
        def change(records):
            for controlpath_id, record in stale.items():
                if records.get(controlpath_id) == record:
                    del records[controlpath_id]
        if any(self.load().get(c) == r for c, r in stale.items()):
            self._update(change)

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


def identity_marks(function):
    """Which card ``function`` (a ``sysfs.PCIFunction``) is, as far as its
    PCI ids say: a fingerprint's ``pci=`` mark."""
    return [f'pci={function.address}={function.vendor}:{function.device}:'
            f'{function.subsystem_vendor or ""}:'
            f'{function.subsystem_device or ""}']


def dfl_ids(function_path, file_name):
    """Ids in the ``file_name`` files (``compat_id``, ``afu_id``) of the
    DFL FPGA regions under the PCI function at ``function_path``, as
    Placement-safe lower-case hex without dashes.  The kernel shows them
    only while dfl-pci is bound to the function."""
    top = os.path.join(function_path, 'fpga_region')
    paths = sysfs.Sysfs(function_path).find_files(top, [file_name])[file_name]
    ids = (sysfs.read_text(p, '') for p in paths)
    return sorted({i.replace('-', '').lower() for i in ids if i})


# The drivers a PCI function is on while what its vendor's driver shows of
# it (the DFL region tree) is gone though the card is unchanged: passed
# through (vfio-pci), or unbound.
PASSTHROUGH_DRIVERS = (None, 'vfio-pci')


def _marks_of(marks, kind):
    return sorted(m for m in marks if m.startswith(kind + '='))


# The boot mark where the boot id cannot be read: it confirms nothing.
UNKNOWN_BOOT = 'boot='


def boot_marks():
    """This boot's identity mark, for what must not outlive a reboot (a
    reset region runs the flash's default): ``boot=<this boot's id>``,
    or ``UNKNOWN_BOOT`` where the id cannot be read, which confirms
    nothing (``_same_card``)."""
    return [UNKNOWN_BOOT + (pci_health.boot_id() or '')]


def _same_card(seen, now):
    """Whether identity marks ``now`` confirm those ``seen``: True (the
    same marks), False (another card: its PCI ids, or a serial number
    read on both, differ; or another boot: the boot ids read on both
    differ) or None (not confirmed: a serial number or boot id read on
    one of them only, a boot id unreadable, any other mark differing)."""
    if _marks_of(seen, 'pci') != _marks_of(now, 'pci'):
        return False
    for kind in ('serial', 'boot'):
        seen_marks, now_marks = _marks_of(seen, kind), _marks_of(now, kind)
        if (seen_marks and now_marks and seen_marks != now_marks
                and UNKNOWN_BOOT not in seen_marks + now_marks):
            return False
    if UNKNOWN_BOOT in seen or UNKNOWN_BOOT in now:
        # The boot id unreadable: nothing says no reboot came between.
        return None
    if sorted(seen) == sorted(now):
        return True
    return None


class LastSeen:
    """What a driver last read on each PCI function while the vendor's
    driver bound to it showed it (the DFL region tree's ``compat_id`` and
    ``afu_id``), kept on disk
    (``$state_path/fpga-ids-<driver>-<host>.json``: ``{PCI address:
    {'identity': [identity marks], <name>: [values]}}``) for while the
    function shows none: passed through (vfio-pci) or unbound, it runs
    what it ran.

    ``read(function, now, identity)`` is ``now`` where the function
    shows it (and it is remembered), the values last seen when the
    function is on vfio-pci or unbound and ``identity`` confirms it is
    still the same card, else None.  Marks of another card, or of
    another boot (a ``boot_marks`` mark: the reset region runs the
    flash's default), forget what was seen; marks that only fail to
    confirm it (a serial number no longer readable, the boot id
    unreadable) leave it unused.  ``keep(addresses)`` forgets the
    functions no longer there, ``forget(addresses)`` those about to
    change (programmed).  A write that fails is logged: memory holds the
    values meanwhile."""

    def __init__(self, conf, driver_name, host):
        self.path = os.path.join(conf.state_path,
                                 f'fpga-ids-{driver_name}-{host}.json')
        self._lock = threading.Lock()
        self._seen = None

    def _load(self):
        if self._seen is None:
            try:
                with open(self.path) as f:
                    self._seen = json.load(f)
            except FileNotFoundError:
                self._seen = {}
            except ValueError:
                LOG.warning('Ignoring unreadable %s', self.path)
                self._seen = {}
        return self._seen

    def read(self, function, now, identity):
        """``now`` (``{name: [values]}`` read on ``function``, a
        ``sysfs.PCIFunction``, or None when it shows nothing) or what was
        last seen on it (see the class); None when nothing stands."""
        identity = sorted(identity)
        with self._lock:
            seen = self._load()
            if now is not None:
                entry = dict(now, identity=identity)
                if seen.get(function.address) != entry:
                    seen[function.address] = entry
                    self._save()
                return now
            entry = seen.get(function.address)
            if entry is None:
                return None
            same = _same_card(entry.get('identity') or [], identity)
            if same is False or not entry.get('identity'):
                # Another card at the address: nothing seen of it.
                del seen[function.address]
                self._save()
            elif same and function.driver in PASSTHROUGH_DRIVERS:
                return {name: list(values) for name, values in entry.items()
                        if name != 'identity'}
            return None

    def keep(self, addresses):
        """Forget the functions not at ``addresses``."""
        with self._lock:
            seen = self._load()
            self._forget(set(seen) - set(addresses))

    def forget(self, addresses):
        """Forget what was seen on the functions at ``addresses``;
        returns what was forgotten, for ``put_back``."""
        with self._lock:
            self._load()
            return self._forget(addresses)

    def put_back(self, forgotten):
        """What ``forget`` returned, seen again (where nothing was seen
        on those functions since)."""
        with self._lock:
            seen = self._load()
            back = {a: e for a, e in forgotten.items() if a not in seen}
            if back:
                seen.update(back)
                self._save()

    def _forget(self, addresses):
        gone = {a: self._seen.pop(a) for a in set(addresses)
                if a in self._seen}
        if gone:
            self._save()
        return gone

    def _save(self):
        try:
            files.write_json(self.path, self._seen)
        except OSError:
            LOG.exception('Could not record the FPGA ids last seen in %s',
                          self.path)


def deployable_function_ids(device):
    """The function ids ``device``'s deployables show (their
    ``function_id`` attributes), sorted, one per deployable ('' for one
    showing none): the whole fingerprint of a record written by the
    agent of 2027.1."""
    return sorted(d.attributes.get('function_id') or ''
                  for d in device.deployables)


def function_ids_in(fingerprint):
    """The function ids a fingerprint of ``deployable_function_ids`` holds
    (a deployable's, comma-separated), each once."""
    return {function_id for entry in fingerprint
            for function_id in entry.split(',') if function_id}


def written_by_2027_1(fingerprint):
    """Whether ``fingerprint`` is of the form the agent of 2027.1 wrote
    (``deployable_function_ids``): function ids, no mark named.  Every
    fingerprint written since names its marks (``kind=...``)."""
    return isinstance(fingerprint, list) and all(
        isinstance(mark, str) and '=' not in mark for mark in fingerprint)


def fingerprint_of(proofs, identity):
    """A fingerprint: ``proofs`` (marks of the function the card runs) and
    ``identity`` (marks of which card it is), sorted; [] when there is no
    proof, for then nothing shows which image the card runs."""
    if not any(proofs):
        return []
    return sorted(set(proofs) | set(identity))


class RecordsBitstreams(base.Programmable):
    """Sets ``bitstream_id`` on discovered devices from the record, and
    forgets the records the cards no longer prove."""

    def _record(self):
        return BitstreamRecord(self.conf, self.name, self.host)

    def _last_seen(self):
        """This driver's ``LastSeen`` (one per driver object)."""
        return self.__dict__.setdefault(
            '_last_seen_values', LastSeen(self.conf, self.name, self.host))

    def _unsaved(self):
        """{controlpath id: record} written since the file could not be:
        this process's word wins over the file's until a save works."""
        return self.__dict__.setdefault('_unsaved_records', {})

    def fingerprint(self, device):
        """What ``device`` (as discovered) shows of the function it runs
        and of which card it is (see ``fingerprint_of``); [] when nothing
        it shows proves which function it runs, or it is gone.  Drivers
        of real cards override it with what their cards show.

        This default is the fake driver's, whose device has nothing to
        read: its deployables' function ids (none: [''])."""
        return deployable_function_ids(device)

    def function_id_fingerprint(self, device):
        """A fingerprint of the function ids ``device``'s deployables
        show (``function_id`` attributes) and the control path
        function's PCI ids; [] when they show none."""
        function = sysfs.Sysfs(self.sysfs_root).pci_function(
            device.controlpath_id.cpid_info)
        if function is None:
            return []
        proofs = sorted(
            'function=' + function_id
            for deployable in device.deployables
            for function_id in (deployable.attributes.get('function_id')
                                or '').split(',') if function_id)
        return fingerprint_of(proofs, identity_marks(function))

    def with_bitstreams(self, devices):
        """``devices`` with the recorded image as ``bitstream_id`` where
        the card still shows the fingerprint recorded with it.  The other
        records (the fingerprint differs or is empty, the card is gone)
        are forgotten; one being written (``remember``) is left alone.
        A record the agent of 2027.1 wrote that the card still proves
        (``_proven_since_2027_1``) is written again with the card's
        fingerprint."""
        records = dict(self._record().load(), **self._unsaved())
        stale = {}
        converted = {}
        for device in devices:
            controlpath_id = device.controlpath_id.cpid_info
            record = records.pop(controlpath_id, None)
            if record is None or record.get('fingerprint') is None:
                continue
            marks = self.fingerprint(device)
            if marks and (record['fingerprint'] == marks or
                          self._proven_since_2027_1(device, record)):
                for deployable in device.deployables:
                    deployable.bitstream_id = record['image_uuid']
                if record['fingerprint'] != marks:
                    converted[controlpath_id] = (
                        record, dict(record, fingerprint=marks))
            else:
                stale[controlpath_id] = record
        if converted:
            self._convert(converted)
        # What is left is the records of cards no longer discovered.
        stale.update((controlpath_id, record)
                     for controlpath_id, record in records.items()
                     if record.get('fingerprint') is not None)
        if stale:
            self._forget_stale(stale)
        return devices

    @staticmethod
    def _proven_since_2027_1(device, record):
        """Whether ``record``, written by the agent of 2027.1
        (``written_by_2027_1``), still proves the image ``device`` runs,
        as a fingerprint of this release would
        (``function_id_fingerprint``): it holds function ids, and the
        card's deployables show these very ids (those showing none, such
        as a VF passed through, prove nothing either way).  One holding
        none (['']: the Xilinx and Inspur cards', whose deployables show
        no function id, which matched whatever the card ran) proves
        nothing."""
        old = record['fingerprint']
        if not written_by_2027_1(old):
            return False
        ids = function_ids_in(old)
        return bool(ids) and ids == function_ids_in(
            deployable_function_ids(device))

    def _convert(self, converted):
        """Write the records ``converted`` ({controlpath id: (record of
        2027.1, record with the card's fingerprint)}) in place of those
        still as given.  Where that fails the old record stays on disk,
        converted again at the next discovery while the card shows its
        ids."""
        unsaved = self._unsaved()
        for controlpath_id, (record, new) in converted.items():
            LOG.info('FPGA %s shows the function ids recorded by an '
                     'earlier release with image %s: its record is kept, '
                     'with the card\'s fingerprint',
                     controlpath_id, record.get('image_uuid'))
            if unsaved.get(controlpath_id) == record:
                unsaved[controlpath_id] = new
        try:
            self._record().replace_stale(converted)
        except OSError:
            LOG.exception('Could not rewrite the records of FPGAs %s with '
                          'their fingerprints', sorted(converted))

    def _forget_stale(self, stale):
        """Forget the records ``stale`` ({controlpath id: record}) that
        are still what is recorded (a card recorded again meanwhile keeps
        its new record)."""
        unsaved = self._unsaved()
        for controlpath_id, record in stale.items():
            LOG.info('FPGA %s no longer shows the fingerprint recorded '
                     'with image %s: its image is unknown',
                     controlpath_id, record.get('image_uuid'))
            if unsaved.get(controlpath_id) == record:
                unsaved.pop(controlpath_id)
        try:
            self._record().forget_stale(stale)
        except OSError:
            # Not reported in this report; removed at a later discovery
            # (unless a card shows its fingerprint again meanwhile).
            LOG.exception('Could not remove the records of FPGAs %s',
                          sorted(stale))

    def remember(self, controlpath_id, image_uuid):
        """Record ``image_uuid`` as what ``controlpath_id`` now runs, with
        the card's fingerprint as it is now.  Where that fails it is kept
        in memory: with the card's fingerprint when it could be read,
        else with none, which matches no card (its image then reads as
        unknown, never as the one before)."""
        unsaved = self._unsaved()
        unsaved[controlpath_id] = {'image_uuid': image_uuid,
                                   'fingerprint': None}
        found = [d for d in self.discover()
                 if d.controlpath_id.cpid_info == controlpath_id]
        marks = self.fingerprint(found[0]) if found else []
        if not marks:
            LOG.warning('Nothing FPGA %s shows proves it runs image %s '
                        '(no function id readable): its image is '
                        'reported as unknown', controlpath_id, image_uuid)
        unsaved[controlpath_id] = {'image_uuid': image_uuid,
                                   'fingerprint': marks}
        self._record().save(controlpath_id, image_uuid, marks)
        unsaved.pop(controlpath_id, None)


class ToolProgrammable(RecordsBitstreams):
    """``Programmable`` by the vendor tool ``fpga_tool`` names."""

    @abc.abstractmethod
    def fpga_tool(self, controlpath_id):
        """``(tool, PCI address)``: the tool (a name of
        ``cyborg.agent.privileged.FPGA_TOOLS``) that programs
        ``controlpath_id``, and the function it is run on."""

    def card_functions(self, controlpath_id):
        """The PCI addresses of the functions of card ``controlpath_id``
        whose function ids programming it changes."""
        return [controlpath_id]

    def program(self, controlpath_id, image_path, image_uuid):
        if controlpath_id not in {d.controlpath_id.cpid_info
                                  for d in self.discover()}:
            raise exception.ResourceNotFound(resource='FPGA',
                                             id=controlpath_id)
        from cyborg.agent import privileged
        tool, address = self.fpga_tool(controlpath_id)
        before = self._forget_before_writing(controlpath_id)
        # What was last seen on the function the tool writes no longer
        # says what it runs: only a reading after the tool does.
        seen_before = self._last_seen().forget(
            [address] + self.card_functions(controlpath_id))
        LOG.info('Programming FPGA %s with image %s: %s on %s, %s',
                 controlpath_id, image_uuid, tool, address, image_path)
        try:
            privileged.run_fpga_tool(tool, address, image_path)
        except REFUSED_BEFORE_THE_TOOL:
            # The helper refused before the tool ran (no such tool, one
            # that cannot start, a bitstream it does not take): the card
            # runs what it ran.
            self._put_back(controlpath_id, before)
            self._last_seen().put_back(seen_before)
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
