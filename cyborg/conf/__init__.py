"""Configuration: one module per option group, all registered on ``CONF``.

Code receives ``CONF`` (or a ConfigOpts) and reads options when it needs
them; no option is read at import time.
"""

from oslo_config import cfg

from cyborg.conf import agent
from cyborg.conf import api
from cyborg.conf import conductor
from cyborg.conf import database
from cyborg.conf import default
from cyborg.conf import glance
from cyborg.conf import health
from cyborg.conf import metrics
from cyborg.conf import nova
from cyborg.conf import placement
from cyborg.conf import service_user

CONF = cfg.CONF

_MODULES = (default, api, conductor, database, agent, placement, nova,
            glance, service_user, health, metrics)


def register_opts(conf):
    for module in _MODULES:
        module.register_opts(conf)


register_opts(CONF)
