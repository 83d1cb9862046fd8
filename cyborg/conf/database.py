"""[database] options (oslo.db)."""

import copy

from oslo_db import options as db_options

# $state_path is interpolated by oslo.config, so the file follows
# [DEFAULT]state_path (/var/lib/cyborg by default).
DEFAULT_CONNECTION = 'sqlite:///$state_path/cyborg.sqlite'


def register_opts(conf):
    db_options.set_defaults(conf, connection=DEFAULT_CONNECTION)


def list_opts():
    # oslo.db's own option objects say "no default"; the sample must show
    # the one cyborg sets.
    opts = copy.deepcopy(db_options.database_opts)
    for opt in opts:
        if opt.name == 'connection':
            opt.default = DEFAULT_CONNECTION
    return {'database': opts}
