"""cyborg-dbsync: manage the database schema (alembic migrations).

    cyborg-dbsync [--config-file F] upgrade [--revision REV]
    cyborg-dbsync version
    cyborg-dbsync stamp [--revision REV] [--force]
    cyborg-dbsync revision -m MESSAGE [--autogenerate]

``upgrade`` is idempotent and safe to run on every deployment, and again
after an interrupted run (doc/source/upgrade.rst).  It refuses a database
a newer release upgraded, and a ``--revision`` older than the database's
(downgrades are not supported: restore the backup).  A table another
session holds for ``--lock-wait`` seconds ends it with the sessions
named: retry once they are done.

``stamp`` records a revision without running anything.  Over a database
that already has cyborg tables it refuses (status 2) to record one newer
than the database's, which would pass its migrations off as run (the
schema then lacks what they add, and ``cyborg-status upgrade check`` says
so), unless ``--force`` says the schema really is at that revision.
"""

import sys

from oslo_config import cfg
from oslo_log import log as logging
import sqlalchemy.exc

import cyborg.conf
from cyborg.common import service
from cyborg.db import migration

LOG = logging.getLogger(__name__)


def do_upgrade(conf):
    migration.check_upgrade(migration.version(conf), conf.command.revision)
    migration.upgrade(conf, conf.command.revision,
                      lock_wait=conf.command.lock_wait)
    print('Database schema is at revision %s' % migration.version(conf))


def do_version(conf):
    print(migration.version(conf) or 'None (empty database)')


class StampRefused(Exception):
    """Stamping would record migrations as run over tables they did not
    change; the message says what to do instead."""


def _skips_migrations(current, target):
    """Whether recording ``target`` over revision ``current`` (None: none
    recorded) passes migrations off as run: not when it stays or goes
    back (``upgrade`` runs them then, adding only what is missing), nor
    over a revision of a newer release."""
    if target == 'base':
        return False
    if current is None:
        return True
    if target in ('head', 'heads'):
        target = migration.head()
    if target == current or not migration.known(current):
        return False
    try:
        migration.check_upgrade(current, target)
    except migration.UpgradeRefused:
        return False                # older than the database's
    return True


def do_stamp(conf):
    target = conf.command.revision
    if not conf.command.force:
        current = migration.version(conf)
        present, _missing = migration.schema_contents(conf)
        if present and _skips_migrations(current, target):
            raise StampRefused(
                'the database has cyborg tables %s; stamping %s would '
                'record the migrations in between as run, and nothing '
                'would add what they add: run "cyborg-dbsync upgrade" '
                'instead (each migration adds only what is missing), or '
                'add --force if the schema really is at %s' % (
                    'at schema revision %s' % current if current
                    else 'but no schema revision', target, target))
    migration.stamp(conf, target)


def do_revision(conf):
    script = migration.revision(conf, conf.command.message,
                                autogenerate=conf.command.autogenerate)
    print('Wrote %s' % script.path)


def _add_parsers(subparsers):
    for name, func, help_text in (
            ('upgrade', do_upgrade,
             'Upgrade the schema to a revision (default: head).'),
            ('stamp', do_stamp,
             'Record a revision without running migrations.')):
        parser = subparsers.add_parser(name, help=help_text)
        parser.add_argument('--revision', default='head')
        parser.set_defaults(func=func)
        if name == 'stamp':
            parser.add_argument(
                '--force', action='store_true',
                help='Record the revision even over cyborg tables at an '
                     'older one (or at none): their migrations are then '
                     'taken as run.')
        if name == 'upgrade':
            parser.add_argument(
                '--lock-wait', type=int, default=migration.LOCK_WAIT,
                metavar='SECONDS',
                help='Give up after this long waiting for a table another '
                     'session holds (every query of the table waits '
                     'meanwhile); default %(default)s.')

    parser = subparsers.add_parser(
        'version', help='Print the schema revision of the database.')
    parser.set_defaults(func=do_version)

    parser = subparsers.add_parser(
        'revision', help='Write a new migration script (developers).')
    parser.add_argument('-m', '--message', required=True)
    parser.add_argument('--autogenerate', action='store_true',
                        help='Compare the models with the database and '
                             'write the differences.')
    parser.set_defaults(func=do_revision)


command_opt = cfg.SubCommandOpt('command', title='Commands',
                                help='Available commands',
                                handler=_add_parsers)


def main(argv=None):
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    conf.register_cli_opt(command_opt)
    logging.register_options(conf)
    # stdout carries the answer (``version``); progress goes to stderr.
    conf.set_default('use_stderr', True)
    service.prepare(argv, conf=conf, prog='cyborg-dbsync')
    try:
        conf.command.func(conf)
    except StampRefused as exc:
        print('cyborg-dbsync: %s' % exc, file=sys.stderr)
        sys.exit(2)
    except migration.UpgradeRefused as exc:
        # What to do is the message: no traceback, no log prefix.
        print('cyborg-dbsync: %s' % exc, file=sys.stderr)
        sys.exit(1)
    except sqlalchemy.exc.OperationalError as exc:
        LOG.error('Database error: %s', exc.orig or exc)
        sys.exit(1)
    except Exception as exc:
        LOG.error('%s failed: %s', conf.command.name, exc)
        sys.exit(1)
