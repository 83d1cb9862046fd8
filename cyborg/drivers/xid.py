"""NVIDIA XID errors: what each one says about the GPU.

Source: NVIDIA's Xid catalog, "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html),
whose "Resolution Bucket (Immediate Action)" column is what we follow:

- RESTART_APP (the workload failed, the GPU is fine) -> ``application``:
  counted, never changes the device's health;
- RESET_GPU / RESTART_BM / hardware investigation (the GPU cannot be
  trusted until it is reset, repaired or replaced) -> ``fatal``;
- early warnings and errors the GPU recovered from -> ``transient``.

An XID missing from the table is ``transient``: the driver only raises an
XID when something went wrong, so it is not ignored, but without knowing
that it is fatal one event must not take a GPU out; the conductor's
repetition rule (``[health]suspect_threshold``) decides.
"""

from cyborg.common import states

APPLICATION = states.APPLICATION
TRANSIENT = states.TRANSIENT
FATAL = states.FATAL

# xid -> (severity, what it means)
CATALOGUE = {
    # A channel stopped making progress (idle timeout): the job hung.
    8: (APPLICATION, 'GPU stopped processing'),
    # The application sent a malformed push buffer.
    11: (APPLICATION, 'Invalid or corrupted push buffer stream'),
    # Exceptions in the application's kernels (illegal address, ...).
    13: (APPLICATION, 'Graphics Engine Exception'),
    # The application touched memory it does not map (MMU fault).
    31: (APPLICATION, 'GPU memory page fault'),
    # A bad push buffer from the application (or a DMA from the host).
    32: (APPLICATION, 'Invalid or corrupted push buffer stream'),
    # A channel was reset after the application's own error.
    43: (APPLICATION, 'GPU stopped processing'),
    # A fault while switching contexts; NVIDIA asks for a GPU reset.
    44: (FATAL, 'Graphics Engine fault during context switch'),
    # Channels torn down because their process exited or was killed.
    45: (APPLICATION, 'Preemptive cleanup, due to previous errors'),
    # Uncorrectable double bit error in device memory.
    48: (FATAL, 'Double Bit ECC Error'),
    # Internal micro-controller warning: the GPU carried on.
    61: (TRANSIENT, 'Internal micro-controller breakpoint/warning'),
    # Internal micro-controller halted: needs a GPU reset.
    62: (FATAL, 'Internal micro-controller halt'),
    # A row remap / page retirement was recorded: the row is marked for
    # remapping at the next GPU reset, and the GPU carries on meanwhile
    # (NVML: a pending remap does not affect the work that follows).  It
    # is raised when the remap becomes pending, which the row remapper's
    # reading (nvml_health ``_remapped_rows``, ``ecc:row_remap_pending``)
    # reports as a transient condition for as long as it lasts: that
    # reading decides, and a fatal XID here would take every GPU out at
    # each new remap, max_suspect_time = 0 or not.
    63: (TRANSIENT, 'ECC page retirement or row remapping recording event'),
    # Recording the row remap / page retirement failed: the bad memory
    # cannot be kept out of use.
    64: (FATAL, 'ECC page retirement or row remapper recording failure'),
    # A video decoder exception caused by the application's stream.
    68: (APPLICATION, 'NVDEC0 Exception'),
    # A class error of the application's graphics work.
    69: (APPLICATION, 'Graphics Engine class error'),
    # NVLink failure: link hardware, needs a reset and investigation.
    74: (FATAL, 'NVLink Error'),
    # The GPU no longer answers on PCIe.
    79: (FATAL, 'GPU has fallen off the bus'),
    # Corrected single bit errors at a high rate: an early warning.
    92: (TRANSIENT, 'High single-bit ECC error rate'),
    # An uncorrectable error contained to the application that hit it.
    94: (APPLICATION, 'Contained ECC error'),
    # An uncorrectable error that could not be contained: reset the GPU.
    95: (FATAL, 'Uncontained ECC error'),
    # The application's context did not switch out in time.
    109: (APPLICATION, 'Context Switch Timeout Error'),
    # The GPU System Processor stopped answering: reset the GPU.
    119: (FATAL, 'GSP RPC Timeout'),
    # The GPU System Processor reported an error: reset the GPU.
    120: (FATAL, 'GSP Error'),
    # An ECC error the hardware could not recover.
    140: (FATAL, 'Unrecovered ECC Error'),
    # The GPU failed to initialise.
    143: (FATAL, 'GPU Initialization Failure'),
    # The driver's recommended recovery action changed; the action itself
    # (reset, reboot, drain) is reported by the XIDs that caused it.
    154: (TRANSIENT, 'GPU recovery action changed'),
}


def classify(xid):
    """``(severity, description)`` of XID number ``xid``."""
    return CATALOGUE.get(xid, (TRANSIENT, 'Unknown XID'))
