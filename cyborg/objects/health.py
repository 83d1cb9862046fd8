"""Health readings: what drivers see and agents report (plain data).

A ``Reading`` is one observation of one device (or of one deployable of
it: a MIG instance) by one health source.  Drivers return readings from
``HealthReporting.check_health``; the agent sends them to the conductor
(``ConductorAPI.report_health``), whose state machine decides what they
mean for the device's health.  The vocabulary is ``cyborg.common.states``.

Health report format (``ConductorAPI.report_health``)::

    {'full': bool,          # True: a reading for every device the agent
                            # watches (periodic); False: only what changed
     'readings': [Reading.to_dict(), ...]}
"""

import dataclasses

from cyborg.common import states

# The code of a re-probe's "not yet" (a card being programmed: its
# re-probe fails, and the conductor asks again later), sent for the
# device and each of its deployables; a verdict only for what is out.
PROBE_NOT_YET = 'probe:programming'


@dataclasses.dataclass
class Reading:
    device: str                  # DriverDevice.key(), e.g. 'PCI:0000:3b:00.0'
    severity: str                # one of states.SEVERITIES
    reason: str = ''             # for people: 'XID 79: GPU has fallen off..'
    # A deployable name when only that partition is concerned (a MIG
    # instance); None: the whole device, hence all its deployables.
    deployable: str = None
    source: str = ''             # 'nvml', 'aer', 'pci', 'fpga', 'ras',
                                 # 'qat', 'nvme', 'nic', 'fake', 'probe'
                                 # (an active re-probe's verdict)
    code: str = None             # machine-readable: 'xid:79', 'aer:fatal'
    # Cumulative counters behind the reading (for metrics and events), e.g.
    # {'xid': 3, 'aer_fatal': 0, 'ecc_uncorrected': 2}.
    counters: dict = dataclasses.field(default_factory=dict)
    # A new occurrence the check saw happen (an XID, new ECC or AER
    # errors, a failed heartbeat), as opposed to a condition that holds (a
    # slowdown, a pending row remap, an error register set): the agent
    # sends each event that is not harmless, and a condition only when it
    # appears.  A numbered event (``seq``) in a full report is a new
    # occurrence, not a re-statement (an older conductor drops the flag:
    # no RPC version).
    event: bool = False
    # Set by the conductor, reading by reading, for those of a full
    # snapshot that re-state conditions the agent already reported, so a
    # transient one does not count as one more fault; never for a
    # numbered event or a probe's verdict (cyborg.conductor.health).
    restated: bool = False

    def __post_init__(self):
        if self.severity not in states.SEVERITIES:
            raise ValueError(f'unknown health severity {self.severity!r}')

    @property
    def harmless(self):
        return self.severity in states.HARMLESS

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values):
        known = {f.name for f in dataclasses.fields(cls)}
        # A newer agent may send fields we do not know: keep the reading.
        return cls(**{k: v for k, v in values.items() if k in known})


def worst(readings):
    """The most severe of ``readings`` (None for none)."""
    order = states.SEVERITIES
    return max(readings, key=lambda r: order.index(r.severity),
               default=None)
