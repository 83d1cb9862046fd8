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
import re
import sys

from alembic import command as alembic_command
from alembic import config as alembic_config
from alembic import migration as alembic_migration
from alembic import op
from alembic import script as alembic_script
from alembic import util as alembic_util
from alembic.script import revision as alembic_revision
import sqlalchemy as sa

from cyborg.db import models

# Seconds a migration waits for a table another session holds (MariaDB's
# metadata lock, PostgreSQL's table lock) before it gives up: meanwhile
# every query of that table queues behind the waiting ALTER.
LOCK_WAIT = 30

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


class UpgradeRefused(Exception):
    """The schema cannot be brought where asked; the message says why and
    what to do."""


def _config(url, connection=None, lock_wait=None):
    config = alembic_config.Config()
    config.set_main_option('script_location', script_location())
    # configparser interpolation: a literal '%' in a password must be '%%'.
    config.set_main_option('sqlalchemy.url', url.replace('%', '%%'))
    if connection is not None:
        config.attributes['connection'] = connection
    # Read by alembic/env.py: None waits as long as the server does.
    config.attributes['lock_wait'] = lock_wait
    return config


def _url(conf_or_url):
    if isinstance(conf_or_url, str):
        return conf_or_url
    return conf_or_url.database.connection


def upgrade(conf_or_url, revision='head', lock_wait=LOCK_WAIT,
            connection=None):
    """Bring the schema up to ``revision`` (idempotent; after an
    interruption at any statement, running it again finishes the job).
    A table another session holds for more than ``lock_wait`` seconds
    ends it with UpgradeRefused naming the sessions in a transaction."""
    url = _url(conf_or_url)
    try:
        alembic_command.upgrade(_config(url, connection, lock_wait),
                                revision)
    except sa.exc.OperationalError as exc:
        if not _lock_wait_timeout(exc):
            raise
        raise UpgradeRefused(
            'gave up after %s s waiting for a table another session holds '
            '(a long transaction: %s); nothing is lost, run cyborg-dbsync '
            'upgrade again once it has ended'
            % (lock_wait, _transactions(url))) from exc


def _lock_wait_timeout(exc):
    orig = getattr(exc, 'orig', None)
    # MariaDB/MySQL ER_LOCK_WAIT_TIMEOUT; PostgreSQL lock_not_available.
    return ((getattr(orig, 'args', None) or (None,))[0] == 1205
            or getattr(orig, 'pgcode', None) == '55P03')


def _transactions(url):
    """The other sessions of the database in a transaction, in words."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            if connection.dialect.name in ('mysql', 'mariadb'):
                rows = connection.execute(sa.text(
                    'SELECT p.id, p.user, p.host, t.trx_started '
                    'FROM information_schema.innodb_trx t '
                    'JOIN information_schema.processlist p '
                    'ON p.id = t.trx_mysql_thread_id '
                    'WHERE p.id != CONNECTION_ID() '
                    'ORDER BY t.trx_started')).all()
                what = 'session %s of %s@%s, in a transaction since %s'
            elif connection.dialect.name == 'postgresql':
                rows = connection.execute(sa.text(
                    'SELECT pid, usename, client_addr, xact_start '
                    'FROM pg_stat_activity '
                    'WHERE datname = current_database() '
                    'AND pid != pg_backend_pid() '
                    'AND xact_start IS NOT NULL '
                    'ORDER BY xact_start')).all()
                what = 'pid %s of %s from %s, in a transaction since %s'
            else:
                rows = []
    except sa.exc.DBAPIError:
        return 'could not list them'
    finally:
        engine.dispose()
    return '; '.join(what % tuple(row) for row in rows) or 'none seen now'


def check_upgrade(current, target):
    """UpgradeRefused unless upgrading a database at ``current`` (None:
    empty) to ``target`` is an upgrade this release can run."""
    if current is None:
        return
    if not known(current):
        raise UpgradeRefused(
            'the database is at schema revision %s, which a newer release '
            'of cyborg upgraded it to; this release cannot change it (run '
            'that release\'s cyborg-dbsync, or restore the backup taken '
            'before the upgrade)' % current)
    if target in ('head', 'heads', current):
        return
    named = _named(target, current)
    if named == 'base' or any(
            script.revision == named
            for script in _scripts().iterate_revisions(current, 'base')
            if script.revision != current):
        raise UpgradeRefused(
            'the database is at schema revision %s, newer than %s: '
            'downgrades are not supported: restore the backup taken '
            'before the upgrade' % (current, target))


def _named(target, current):
    """The revision ``target`` names as alembic reads it: a full id, a
    unique start of one (``2967``), or one relative to another or to
    ``current`` (``head-1``, ``-2``, ``d4b8+1``); ``base`` before the
    first.  ``target`` itself where alembic cannot resolve it (it says
    why when it runs)."""
    scripts = _scripts()
    relative = re.fullmatch(r'(.*?)([-+][0-9]+)', target)
    try:
        named = scripts.get_revision(
            (relative.group(1) or current) if relative else target)
        if not relative:
            return 'base' if named is None else named.revision
        # Oldest first: the history is one line (base is before it).
        order = [script.revision
                 for script in scripts.walk_revisions()][::-1]
        at = -1 if named is None else order.index(named.revision)
    except (alembic_util.CommandError, alembic_revision.RevisionError,
            ValueError):
        return target
    at += int(relative.group(2))
    if at < 0:
        return 'base'
    return order[at] if at < len(order) else target


def stamp(conf_or_url, revision='head'):
    """Record ``revision`` as current without running migrations."""
    alembic_command.stamp(_config(_url(conf_or_url)), revision)


def revision(conf_or_url, message, autogenerate=False):
    """Write a new migration script into the source tree's versions/."""
    return alembic_command.revision(_config(_url(conf_or_url)),
                                    message=message,
                                    autogenerate=autogenerate)


def _scripts():
    return alembic_script.ScriptDirectory.from_config(_config('sqlite://'))


def head():
    """The newest revision the scripts know."""
    return _scripts().get_current_head()


def known(revision):
    """Whether the scripts know ``revision`` (a newer release's is not)."""
    return any(script.revision == revision
               for script in _scripts().walk_revisions())


def version(conf_or_url):
    """The database's current revision, or None for an empty database."""
    engine = sa.create_engine(_url(conf_or_url))
    try:
        with engine.connect() as connection:
            context = alembic_migration.MigrationContext.configure(connection)
            return context.get_current_revision()
    finally:
        engine.dispose()


def schema_contents(conf_or_url):
    """What the database has of cyborg's models: (the names of the models'
    tables it has, those of their tables and columns it lacks, as
    ``table`` and ``table.column``, in the models' order).  What it has
    beyond them (a newer release's, alembic's own table) is no concern."""
    engine = sa.create_engine(_url(conf_or_url),
                           poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            inspector = sa.inspect(connection)
            there = set(inspector.get_table_names())
            present, missing = [], []
            for table in models.Base.metadata.sorted_tables:
                if table.name not in there:
                    missing.append(table.name)
                    continue
                present.append(table.name)
                columns = {column['name']
                           for column in inspector.get_columns(table.name)}
                missing.extend('%s.%s' % (table.name, column.name)
                               for column in table.columns
                               if column.name not in columns)
    finally:
        engine.dispose()
    return present, missing


# Steps for the scripts under alembic/versions.  MariaDB and MySQL commit
# each DDL statement at once: a migration interrupted between two of them
# (a signal, a lost connection, a lock wait given up) leaves the first
# done and the revision unchanged, and is run again from its start.  So
# each step looks before it adds what may already be there.

def _inspector():
    return sa.inspect(op.get_bind())


def has_table(table):
    return _inspector().has_table(table)


def missing_columns(table, *columns):
    """Those of ``columns`` (sa.Column) the table does not have yet."""
    there = {column['name'] for column in _inspector().get_columns(table)}
    return [column for column in columns if column.name not in there]


def has_index(table, name):
    """Whether ``table`` has an index or unique key called ``name``."""
    inspector = _inspector()
    names = {index['name'] for index in inspector.get_indexes(table)}
    names |= {unique['name']
              for unique in inspector.get_unique_constraints(table)}
    return name in names


def has_foreign_key(table, name):
    return name in {key['name']
                    for key in _inspector().get_foreign_keys(table)}


def create_table(table, *items, **kwargs):
    if not has_table(table):
        op.create_table(table, *items, **kwargs)


def create_index(name, table, columns):
    if not has_index(table, name):
        op.create_index(name, table, columns)


def _unique_keys(table, column):
    inspector = _inspector()
    keys = {unique['name']: unique['column_names']
            for unique in inspector.get_unique_constraints(table)}
    keys.update((index['name'], index['column_names'])
                for index in inspector.get_indexes(table)
                if index.get('unique'))
    return {name: columns for name, columns in keys.items()
            if column in columns}


def exact_name(table, column, nullable):
    """On MariaDB and MySQL, compare ``table.column`` (a String(255)) with
    models.EXACT_COLLATION; nothing elsewhere, nor where it already does.

    Values equal under that collation but not under the column's own
    (values differing in trailing spaces only, where the database's
    collation is NO PAD, such as MySQL 8's default) would break a unique
    key on the column: UpgradeRefused names them, before anything is
    changed, to be renamed first."""
    bind = op.get_bind()
    if bind.dialect.name not in ('mysql', 'mariadb'):
        return
    collation = bind.execute(sa.text(
        'SELECT collation_name FROM information_schema.columns '
        'WHERE table_schema = DATABASE() AND table_name = :t '
        'AND column_name = :c'), {'t': table, 'c': column}).scalar()
    if collation == models.EXACT_COLLATION:
        return
    for key, columns in sorted(_unique_keys(table, column).items()):
        grouped = ', '.join(
            'CONVERT(`%s` USING utf8mb4) COLLATE %s' % (
                name, models.EXACT_COLLATION)
            if name == column else '`%s`' % name for name in columns)
        clashes = bind.execute(sa.text(
            "SELECT GROUP_CONCAT(CONCAT('\"', `%s`, '\"') SEPARATOR ' and ') "
            'FROM `%s` GROUP BY %s HAVING COUNT(*) > 1 LIMIT 10'
            % (column, table, grouped))).scalars().all()
        if clashes:
            raise UpgradeRefused(
                'cannot make %s.%s compare exactly: its unique key %s would '
                'then hold equal values (%s differ in trailing spaces only); '
                'rename all but one of each, then run cyborg-dbsync upgrade '
                'again' % (table, column, key, '; '.join(clashes)))
    op.alter_column(table, column,
                    type_=sa.String(255, collation=models.EXACT_COLLATION),
                    existing_type=sa.String(255),
                    existing_nullable=nullable)


def retype(table, *columns):
    """On MariaDB and MySQL, give each of ``columns`` (sa.Column of a
    models type) that ``table`` has that type where the table's differs
    in a DATETIME's fraction or a string's collation, keeping its
    nullability: all in one ALTER TABLE, so a table is rebuilt once.
    Nothing elsewhere, nor for a column the table lacks yet.  For
    columns with no server default, and collations that make no two
    values of a unique key equal (models.exact_collation, on a column
    that ``exact_name`` has made exact)."""
    bind = op.get_bind()
    dialect = bind.dialect
    if dialect.name not in ('mysql', 'mariadb'):
        return
    there = {row.name: row for row in bind.execute(sa.text(
        'SELECT column_name AS name, datetime_precision AS fsp, '
        'collation_name AS collation, is_nullable AS nullable '
        'FROM information_schema.columns '
        'WHERE table_schema = DATABASE() AND table_name = :t'),
        {'t': table})}
    quote = dialect.identifier_preparer.quote
    changes = []
    for column in columns:
        row = there.get(column.name)
        if row is None:
            continue
        wanted = column.type.dialect_impl(dialect)
        collation = getattr(wanted, 'collation', None)
        if (getattr(wanted, 'fsp', None) or 0) == (row.fsp or 0) and \
                collation in (None, row.collation):
            continue
        changes.append('MODIFY %s %s %s' % (
            quote(column.name), dialect.type_compiler.process(wanted),
            'NULL' if row.nullable == 'YES' else 'NOT NULL'))
    if changes:
        op.execute('ALTER TABLE %s %s' % (quote(table), ', '.join(changes)))
