"""[database] options (oslo.db)."""

import copy

from oslo_db import options as db_options

# $state_path is interpolated by oslo.config, so the file follows
# [DEFAULT]state_path (/var/lib/cyborg by default).
DEFAULT_CONNECTION = 'sqlite:///$state_path/cyborg.sqlite'

# The conductor uses the database from up to
# [DEFAULT]executor_thread_pool_size RPC threads and [conductor]workers
# bind threads at once.  oslo.db keeps 5 connections and opens up to 50
# more on demand, closing each again as soon as it is returned: under a
# burst (a boot storm of binds) the conductor then spent more CPU opening
# connections (the PyMySQL we install builds an SSL context for each,
# ~50 ms of CPU) than running statements.  Keep up to 30; at most 55 at
# once, as before.  A pool holds only the connections its process has
# needed at once: an API worker serving one request at a time keeps one.
DEFAULTS = {'connection': DEFAULT_CONNECTION, 'max_pool_size': 30,
            'max_overflow': 25}


def register_opts(conf):
    db_options.set_defaults(conf, **DEFAULTS)


def list_opts():
    # oslo.db's own option objects show oslo.db's defaults; the sample
    # must show the ones cyborg sets.
    opts = copy.deepcopy(db_options.database_opts)
    for opt in opts:
        if opt.name in DEFAULTS:
            opt.default = DEFAULTS[opt.name]
    return {'database': opts}
