"""Database schema migrations (alembic), for cyborg-dbsync and the tests.

The migration scripts live in the top-level ``alembic/`` directory of the
source tree; an installed (non-editable) package carries a copy under
``share/cyborg/alembic`` of its install scheme's data directory (see
setup.cfg data_files): ``sys.prefix`` in a virtualenv or the python.org
images, but ``/usr/local`` for a root ``pip install`` on Debian's python3
and ``~/.local`` for ``pip install --user``, so the installed package's own
file list says where.  The alembic configuration is built here, so no
alembic.ini has to be found on disk.
"""

from importlib import metadata
import os
import sys

from alembic import command as alembic_command
from alembic import config as alembic_config
from alembic import migration as alembic_migration
from alembic import script as alembic_script
import sqlalchemy as sa

_HERE = os.path.dirname(os.path.abspath(__file__))
_DATA_ENV_PY = ('share', 'cyborg', 'alembic', 'env.py')


def _installed_location():
    """Where the installed distribution's RECORD puts the alembic scripts
    (None for a source tree or an editable install, which list none)."""
    try:
        files = metadata.distribution('cyborg').files or ()
    except metadata.PackageNotFoundError:
        return None
    for record in files:
        if tuple(record.parts[-len(_DATA_ENV_PY):]) == _DATA_ENV_PY:
            return os.path.dirname(str(record.locate()))
    return None


def _candidates():
    # Source checkout or editable install: <repo>/alembic.
    candidates = [os.path.join(_HERE, os.pardir, os.pardir, 'alembic')]
    # Installed package: pbr data_files, wherever the scheme put them.
    installed = _installed_location()
    if installed:
        candidates.append(installed)
    candidates.append(os.path.join(sys.prefix, *_DATA_ENV_PY[:-1]))
    return candidates


def script_location():
    """The directory holding env.py and versions/."""
    candidates = _candidates()
    for path in candidates:
        if os.path.isfile(os.path.join(path, 'env.py')):
            return os.path.normpath(path)
    raise RuntimeError('cyborg alembic scripts not found in any of: %s'
                       % ', '.join(os.path.normpath(p) for p in candidates))


def _config(url, connection=None):
    config = alembic_config.Config()
    config.set_main_option('script_location', script_location())
    # configparser interpolation: a literal '%' in a password must be '%%'.
    config.set_main_option('sqlalchemy.url', url.replace('%', '%%'))
    if connection is not None:
        config.attributes['connection'] = connection
    return config


def _url(conf_or_url):
    if isinstance(conf_or_url, str):
        return conf_or_url
    return conf_or_url.database.connection


def upgrade(conf_or_url, revision='head'):
    """Bring the schema up to ``revision`` (idempotent)."""
    alembic_command.upgrade(_config(_url(conf_or_url)), revision)


def stamp(conf_or_url, revision='head'):
    """Record ``revision`` as current without running migrations."""
    alembic_command.stamp(_config(_url(conf_or_url)), revision)


def revision(conf_or_url, message, autogenerate=False):
    """Write a new migration script into the source tree's versions/."""
    return alembic_command.revision(_config(_url(conf_or_url)),
                                    message=message,
                                    autogenerate=autogenerate)


def head():
    """The newest revision the scripts know."""
    scripts = alembic_script.ScriptDirectory.from_config(_config('sqlite://'))
    return scripts.get_current_head()


def known(revision):
    """Whether the scripts know ``revision`` (a newer release's is not)."""
    scripts = alembic_script.ScriptDirectory.from_config(_config('sqlite://'))
    return any(script.revision == revision
               for script in scripts.walk_revisions())


def version(conf_or_url):
    """The database's current revision, or None for an empty database."""
    engine = sa.create_engine(_url(conf_or_url))
    try:
        with engine.connect() as connection:
            context = alembic_migration.MigrationContext.configure(connection)
            return context.get_current_revision()
    finally:
        engine.dispose()
