"""Policies for exporting the inventory to other schedulers (Kubernetes
ResourceSlices, Slurm gres.conf): what GET /devices shows, so read by the
same callers.

The names are imported by the operations that use them
(``cyborg.api.routes``), which also document where each applies."""

from cyborg.policies import base

RESOURCE_SLICES = 'cyborg:export:resource_slices'
GRES_CONF = 'cyborg:export:gres_conf'

rules = [
    base.Rule(RESOURCE_SLICES, base.ADMIN_OR_PROJECT_MANAGER,
              'Export the inventory as Kubernetes DRA ResourceSlices.'),
    base.Rule(GRES_CONF, base.ADMIN_OR_PROJECT_MANAGER,
              'Export the inventory as a Slurm gres.conf.'),
]
