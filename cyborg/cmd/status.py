"""cyborg-status upgrade check: is this deployment ready for this release?

Checks: the database schema is at the newest migration and has every table
and column of the models (a revision stamped, or restored, over an older
schema passes for the newest without them); the policy file,
if there is one, is YAML (JSON policy files are no longer read) and parses;
this host's clock is near the database server's (the API and the
conductor compare their clocks); the health timers fit together (a full
health report comes within the suspect window); Placement, where
``[placement]`` is configured, answers and serves the microversion cyborg
pins; no ``[upgrade_levels]`` cap is left set (a rolling upgrade's, which
keeps this release's calls from its peers once they run it too); where
``[glance]`` is configured, every FPGA image a device profile names
(``accel:bitstream_id``, ``accel:function_id``) that Glance has is one
its project(s) may use (``glance.usable``, ``[glance]
trusted_image_owners``).
"""

import json
import sys

from oslo_config import cfg
from oslo_log import log as logging
from oslo_upgradecheck import common_checks
from oslo_upgradecheck import upgradecheck
import sqlalchemy as sa
import yaml

import cyborg.conf
from cyborg.common import exception
from cyborg.common import service
from cyborg.conf import ksa
from cyborg.conf import upgrade_levels
from cyborg.db import migration

LOG = logging.getLogger(__name__)

# The most missing tables and columns a failed check names.
MISSING_NAMED = 10

PROG = 'cyborg-status'
Code = upgradecheck.Code
Result = upgradecheck.Result


class Checks(upgradecheck.UpgradeCommands):

    def __init__(self, conf):
        super().__init__()
        self.conf = conf

    def _check_database(self):
        try:
            current = migration.version(self.conf)
        except Exception as exc:
            LOG.debug('Reading the schema revision failed', exc_info=True)
            return Result(Code.FAILURE,
                          'Cannot read the schema revision from [database] '
                          'connection: %s' % exception.first_line(exc))
        head = migration.head()
        if current is None:
            return Result(Code.FAILURE, 'The database has no cyborg schema; '
                                        'run "cyborg-dbsync upgrade".')
        if current != head and not migration.known(current):
            # Expanded by a newer release, whose migrations add only what
            # this one can run beside: a rolling upgrade's middle.
            return Result(Code.WARNING,
                          'The database schema is at revision %s, which '
                          'this release does not know: a newer release has '
                          'upgraded it (this release runs on it; its '
                          'cyborg-dbsync cannot change it).  Check with the '
                          'newer release\'s cyborg-status.' % current)
        if current != head:
            return Result(Code.FAILURE,
                          'The database schema is at revision %s, this '
                          'release needs %s; run "cyborg-dbsync upgrade".'
                          % (current, head))
        return self._check_tables(current)

    def _check_tables(self, current):
        """The revision row says the newest; do the tables agree?  A
        ``cyborg-dbsync stamp --force``, or a restore that kept the row of
        a later schema, records migrations that never ran."""
        try:
            _present, missing = migration.schema_contents(self.conf)
        except Exception as exc:
            LOG.debug('Reading the schema failed', exc_info=True)
            return Result(Code.FAILURE,
                          'Cannot read the tables from [database] '
                          'connection: %s' % exception.first_line(exc))
        if not missing:
            return Result(Code.SUCCESS)
        named = ', '.join(missing[:MISSING_NAMED])
        if len(missing) > MISSING_NAMED:
            named += ' and %d more' % (len(missing) - MISSING_NAMED)
        return Result(Code.FAILURE,
                      'The database schema is recorded at revision %s, '
                      'the newest, but lacks %s: migrations were recorded '
                      'without being run ("cyborg-dbsync stamp", or a '
                      'restore that kept the revision).  Run "cyborg-dbsync '
                      'stamp --revision base", then "cyborg-dbsync '
                      'upgrade": each migration adds only what is missing.'
                      % (current, named))

    def _policy_file(self):
        """(path, text, failure) of the policy file: path None when there
        is none; failure, a FAILURE Result naming it, when it cannot be
        read as UTF-8 text (a directory, unreadable, another encoding)."""
        path = self.conf.find_file(self.conf.oslo_policy.policy_file)
        if not path:
            return None, None, None
        try:
            with open(path, 'rb') as f:
                return path, f.read().decode('utf-8'), None
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, 'strerror', None) or exc
            return path, None, Result(
                Code.FAILURE, 'Policy file %s cannot be read as UTF-8 '
                              'text: %s' % (path, why))

    def _check_policy_json(self):
        """oslo's common check, which reads the file outside any ``try``:
        a file it cannot read is a failure naming it, not a traceback
        that ends the command before any other check is reported."""
        path, _text, failure = self._policy_file()
        if failure is not None:
            return failure
        try:
            return common_checks.check_policy_json(self, self.conf)
        except (OSError, ValueError) as exc:
            return Result(Code.FAILURE, 'Policy file %s cannot be read: %s'
                                        % (path, exc))

    def _check_policy_yaml(self):
        path, text, failure = self._policy_file()
        if failure is not None:
            return failure
        if not path or _is_json(text):
            # No file: defaults apply.  JSON: the common check reports it.
            return Result(Code.SUCCESS)
        try:
            rules = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            return Result(Code.FAILURE, 'Policy file %s cannot be read as '
                                        'YAML: %s' % (path, exc))
        if rules is not None and not isinstance(rules, dict):
            return Result(Code.FAILURE, 'Policy file %s must map rule names '
                                        'to check strings.' % path)
        from cyborg.common import policy
        problem = policy.config_problem(self.conf)
        if problem:
            # A rule that does not parse or names an undefined rule:
            # cyborg-api refuses to start with it.
            return Result(Code.FAILURE, 'Invalid: %s' % problem)
        return Result(Code.SUCCESS)

    def _check_clock(self):
        from cyborg.db.api import clock as clock_db

        try:
            engine = sa.create_engine(self.conf.database.connection,
                                      poolclass=sa.pool.NullPool)
            try:
                with engine.connect() as connection:
                    skew = clock_db.skew_on(connection)
            finally:
                engine.dispose()
        except Exception as exc:
            LOG.debug('Reading the database server\'s clock failed',
                      exc_info=True)
            return Result(Code.FAILURE,
                          'Cannot read the database server\'s clock: %s'
                          % exception.first_line(exc))
        if skew is not None and abs(skew) > clock_db.TOLERATED_SKEW:
            return Result(Code.WARNING,
                          'This host\'s clock is %.1f s %s the database '
                          'server\'s (more than %d s): the times cyborg '
                          'writes from this host (created_at, health '
                          'times) are off by as much; keep the clocks in '
                          'sync (NTP).' % (
                              abs(skew), 'ahead of' if skew > 0 else 'behind',
                              clock_db.TOLERATED_SKEW))
        return Result(Code.SUCCESS)

    def _check_health_timers(self):
        health = self.conf.health
        if health.enabled and health.report_interval >= health.suspect_window:
            return Result(
                Code.WARNING,
                '[health]report_interval (%d s) is not shorter than '
                '[health]suspect_window (%d s): a transient condition that '
                'lasts (a GPU held in hardware slowdown) passes for healthy '
                'between two full reports, and counts as a new fault at '
                'the next, instead of keeping its device suspect. Make '
                'report_interval shorter on the agents, or suspect_window '
                'longer on the conductors.' % (health.report_interval,
                                               health.suspect_window))
        return Result(Code.SUCCESS)

    def _check_placement(self):
        from cyborg.placement import client as placement_client

        if not ksa.has_credentials(self.conf.placement):
            return Result(Code.SUCCESS,
                          '[placement] is not configured on this host '
                          '(only cyborg-conductor talks to Placement).')
        try:
            served = placement_client.PlacementClient(
                self.conf).max_microversion()
        except Exception as exc:
            LOG.debug('Reading Placement\'s versions failed', exc_info=True)
            return Result(Code.FAILURE,
                          'Cannot read Placement\'s versions with the '
                          '[placement] options: %s'
                          % exception.first_line(exc))
        wanted = placement_client.MICROVERSION
        if (placement_client.version_tuple(served) <
                placement_client.version_tuple(wanted)):
            return Result(Code.FAILURE,
                          'Placement serves microversions up to %s; cyborg '
                          'needs %s (the Placement of OpenStack %s or '
                          'newer): upgrade Placement first.' % (
                              served, wanted,
                              placement_client.MICROVERSION_SINCE))
        return Result(Code.SUCCESS)

    def _check_quota_limits(self):
        from cyborg.common import quota
        from cyborg.conf import quota as quota_conf

        if self.conf.quota.driver != quota_conf.UNIFIED_LIMITS:
            return Result(Code.SUCCESS, 'Quotas are off ([quota]driver).')
        try:
            problem = quota.keystone_problem(self.conf)
        except Exception as exc:
            LOG.debug('Asking Keystone about limits failed', exc_info=True)
            return Result(Code.FAILURE,
                          'Cannot ask Keystone about limits with the '
                          '[oslo_limit] options: %s'
                          % exception.first_line(exc))
        if problem:
            return Result(Code.FAILURE, problem)
        return Result(Code.SUCCESS)

    def _check_upgrade_levels(self):
        """A cap of ``[upgrade_levels]`` is for a rolling upgrade's mixed
        window only: left set, the calls of the versions above it (named
        from the peer's ``HISTORY``) are never sent, though every peer
        runs this release, and the cap still holds after the next
        upgrade."""
        import importlib

        from cyborg.common import rpc

        found = []
        # Each peer's option, and the rpcapi module of its ``HISTORY``.
        for peer, module in sorted(upgrade_levels.RPCAPI.items(),
                                   reverse=True):
            rpcapi = importlib.import_module(module)
            # A value the history does not know stopped the command
            # before (a configuration error, as for the services).
            value = self.conf.upgrade_levels[peer]
            cap = rpcapi.resolve_cap(value)
            if cap is None:
                continue
            above = ['%s (%s)' % (version, change)
                     for version, change in rpcapi.HISTORY
                     if rpc.version_tuple(version) > rpc.version_tuple(cap)]
            if above:
                what = 'disables what the %s RPC versions after it ' \
                    'change: %s' % (peer, '; '.join(above))
            else:
                what = ('caps nothing in this release (%s RPC %s), but '
                        'will cap the next one\'s calls'
                        % (peer, rpcapi.RPC_API_VERSION))
            found.append('[upgrade_levels]%s = %s caps the %s RPC API at %s: '
                         'it %s.  Remove it (and restart) once every %s '
                         'runs this release.' % (
                             peer, value, peer, cap, what, peer))
        if found:
            return Result(Code.WARNING, '  '.join(found))
        return Result(Code.SUCCESS)

    def _check_fpga_images(self):
        """The images the device profiles ask for, as this release's
        conductors look them up for the profiles' projects: one that
        Glance has but the project may not use (an admin project's
        ``shared`` image, the usual upload) no longer programs an FPGA
        (``glance.usable``, ``glance.function_id_candidates``)."""
        if not ksa.has_credentials(self.conf.glance):
            return Result(Code.SUCCESS,
                          '[glance] is not configured on this host (only '
                          'cyborg-conductor reads Glance): not checked.')
        try:
            found = [problem for problem in (
                _image_problem(self.conf, *ask)
                for ask in _profile_image_asks(self.conf)) if problem]
        except Exception as exc:
            LOG.debug('Checking the profiles\' images failed',
                      exc_info=True)
            return Result(Code.WARNING,
                          'Cannot check the FPGA images of the device '
                          'profiles in Glance: %s'
                          % exception.first_line(exc))
        if found:
            return Result(Code.WARNING, '  '.join(found + [
                'List the owners that operators upload bitstreams to in '
                '[glance]trusted_image_owners on every conductor (or make '
                'the images public) before upgrading them.']))
        return Result(Code.SUCCESS)

    @property
    def _upgrade_checks(self):
        return (
            ('Database schema at the newest revision',
             Checks._check_database),
            ('Policy File JSON to YAML Migration',
             Checks._check_policy_json),
            ('Policy file parses as YAML', Checks._check_policy_yaml),
            ('Clock near the database server\'s', Checks._check_clock),
            ('Health timers fit together', Checks._check_health_timers),
            ('Placement serves the microversion cyborg needs',
             Checks._check_placement),
            ('Keystone\'s limits readable ([quota]driver unified_limits)',
             Checks._check_quota_limits),
            ('No [upgrade_levels] cap left set',
             Checks._check_upgrade_levels),
            ('FPGA images of device profiles usable by their projects',
             Checks._check_fpga_images),
        )


def _profile_image_asks(conf):
    """(profile name, key, image id or function id, project or None for
    any) for each ``accel:bitstream_id`` or ``accel:function_id`` of a
    device profile, for each project that may use the profile: its own
    and those it is shared with, None for a public one."""
    from cyborg.common import states
    from cyborg.db import models

    engine = sa.create_engine(conf.database.connection,
                              poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            profiles = connection.execute(sa.select(
                models.DeviceProfile.id, models.DeviceProfile.name,
                models.DeviceProfile.profile_json,
                models.DeviceProfile.project_id,
                models.DeviceProfile.visibility)).all()
            shared = connection.execute(sa.select(
                models.DeviceProfileProject.profile_id,
                models.DeviceProfileProject.project_id)).all()
    finally:
        engine.dispose()
    asks = []
    for row in profiles:
        if row.visibility == states.PUBLIC:
            projects = [None]
        else:
            projects = sorted({row.project_id} | {
                s.project_id for s in shared if s.profile_id == row.id},
                key=str)
        for group in json.loads(row.profile_json or '[]'):
            for key in ('accel:bitstream_id', 'accel:function_id'):
                if group.get(key):
                    asks.extend((row.name, key, group[key], project)
                                for project in projects)
    return sorted(set(asks), key=str)


def _image_problem(conf, name, key, value, project):
    """Why this release's conductors would not find the image a profile
    asks for that Glance has, for ``project`` (None: any), or None."""
    from cyborg.conductor import glance

    who = 'project %s' % project if project else 'every project'
    if key == 'accel:bitstream_id':
        image = glance.shown(conf, value)
        if image is None or glance.usable(
                conf, None, image['id'], image['owner'],
                image['visibility'], project):
            return None
        return ('Device profile %s: its accel:bitstream_id image %s '
                '(owner %s, visibility %s) is not one %s may use.' % (
                    name, value, image['owner'], image['visibility'], who))
    every = glance.listed_with_function_id(conf, value)
    counted = glance.function_id_candidates(conf, value, project)
    if not every or len(counted) == 1:
        return None
    left = sorted({str(i.get('owner')) for i in every
                   if i.get('id') not in {c['id'] for c in counted}})
    return ('Device profile %s: its accel:function_id %s names %d image(s) '
            '%s may use, not one (Glance has %d; not counted: those of '
            'owner(s) %s).' % (name, value, len(counted), who, len(every),
                               ', '.join(left) or 'none'))


def _is_json(text):
    """Whether ``text`` parses as JSON (as ``fileutils.is_json`` decides
    for a file)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def main(argv=None):
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    # The policy options, so the checks can find [oslo_policy]policy_file.
    common_checks.policy_opts.set_defaults(conf)
    argv = sys.argv[1:] if argv is None else argv
    # upgradecheck.main() would parse with oslo.config's default search
    # (home directory included); parse like every cyborg command instead,
    # with its logging options (--debug: a failed check's whole error).
    upgradecheck.register_cli_options(conf, Checks(conf))
    service.prepare(argv, conf, PROG)
    sys.exit(upgradecheck.run(conf))
