"""[database] options (oslo.db)."""

from oslo_db import options as db_options

_DEFAULT_SQL_CONNECTION = 'sqlite:////var/lib/cyborg/cyborg.sqlite'


def register_opts(conf):
    db_options.set_defaults(conf, connection=_DEFAULT_SQL_CONNECTION)


def list_opts():
    return {'database': db_options.database_opts}
