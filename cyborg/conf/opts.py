"""Entry point for oslo-config-generator (namespace ``cyborg``)."""

from cyborg.conf import agent
from cyborg.conf import api
from cyborg.conf import conductor
from cyborg.conf import database
from cyborg.conf import default
from cyborg.conf import fabric
from cyborg.conf import glance
from cyborg.conf import health
from cyborg.conf import metrics
from cyborg.conf import nova
from cyborg.conf import placement
from cyborg.conf import privsep
from cyborg.conf import quota
from cyborg.conf import service_user
from cyborg.conf import upgrade_levels

_MODULES = (default, api, conductor, database, agent, placement, nova,
            glance, service_user, health, metrics, privsep, fabric,
            quota, upgrade_levels)


def list_opts():
    """Return [(group, [opts])] sorted by group, as the generator wants."""
    groups = {}
    for module in _MODULES:
        for group, opts in module.list_opts().items():
            groups.setdefault(group, []).extend(opts)
    return sorted(groups.items())


def set_defaults(conf=None):
    """Defaults other projects' options take in cyborg."""
