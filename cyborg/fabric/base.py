"""The fabric driver interface.

A fabric driver connects a remote accelerator, known by its fabric
address, to a compute host, and disconnects it again: an NVMe-oF driver
would ask the target to export the namespace to the host's NQN, a
composable-infrastructure driver would ask the fabric manager to compose
the GPU into the host.  The conductor calls it outside any database
transaction, for a bind (``attach``) and before the handle is freed
(``detach``), each call on a thread of its own (``cyborg.fabric.calls``)
with a deadline: an attach has the bind's time (``[DEFAULT]bind_timeout``
from the bind's start, less what undoing it may take), a detach
``[fabric]detach_timeout``.  Past it the conductor stops waiting: an
attach is taken for done and detached again, a detach for refused (the
handle stays out of use until the reconcile's retry works).  The call is
not stopped, though, and may still land: a driver should give up on its
own before its deadline (its fabric manager's request timeouts), and
answer with an exception rather than hang.
"""

import abc
import dataclasses


@dataclasses.dataclass(frozen=True)
class FabricHandle:
    """One remote accelerator as a driver sees it."""

    uuid: str               # the handle's uuid in cyborg
    fabric_address: str     # what the fabric knows it by
    pool_name: str          # the remote pool it belongs to


class FabricDriver(abc.ABC):
    """Subclass, set ``name`` to the entry point name and implement both
    methods.  Both must be idempotent: a bind cut short is cleaned up by a
    ``detach`` that may find nothing attached, and a conductor that died
    between attaching and recording it attaches again."""

    name = None

    def __init__(self, conf):
        self.conf = conf

    @abc.abstractmethod
    def attach(self, handle, hostname, instance_uuid):
        """Attach ``handle`` (a FabricHandle) to the compute host
        ``hostname`` for ``instance_uuid``; returns the connection
        information the host needs to use it (a JSON-able dict of
        strings), which the ARQ shows in ``attach_handle_info``.  Raises
        an exception (its text becomes the bind's failure reason) when
        the fabric refuses."""

    @abc.abstractmethod
    def detach(self, handle, hostname, instance_uuid):
        """Detach ``handle`` from ``hostname``; returns nothing.  Raises
        when the fabric could not do it: the handle then stays out of use
        until a later retry (the conductor's reconcile) succeeds."""
