"""Device profiles: read by the API and by ARQ creation, written by
cyborg.conductor.device_profiles.

Visibility (microversion 2.5): a reader passes ``visible_to``, the project
whose view it wants, and gets only the profiles that project may see:
public ones, its own and the private ones shared with it.  ``visible_to``
None (the default) reads every profile: an admin's view, and the
conductor's.
"""

import sqlalchemy as sa

from cyborg.common import states
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer

_SHARES = models.DeviceProfileProject


def _visible(query, visible_to):
    """``query`` of profiles restricted to those ``visible_to`` sees."""
    return query.where(*_visibility(visible_to))


def _visibility(visible_to):
    """The conditions of the profiles ``visible_to`` sees (none: all)."""
    if visible_to is None:
        return ()
    p = models.DeviceProfile
    shared = sa.select(_SHARES.profile_id).where(
        _SHARES.project_id == visible_to)
    return (sa.or_(p.visibility == states.PUBLIC,
                   p.project_id == visible_to,
                   p.id.in_(shared)),)


@reader
def get(context, uuid=None, name=None, visible_to=None):
    """One device profile (a row of its columns) by uuid or name, or None
    (also when ``visible_to`` may not see it)."""
    return _one(context, True, uuid, name, visible_to)


@reader
def get_all(context, names=None, visible_to=None, limit=None, marker=None):
    """Device profiles by id, optionally only those with one of ``names``,
    and only those ``visible_to`` may see.  With ``limit`` and ``marker``
    (a profile's uuid): at most ``limit`` of them after that profile;
    None when it names no profile ``visible_to`` may see."""
    p = models.DeviceProfile
    if not _sql.matchable(visible_to):
        return None if marker is not None else []
    after_id = None
    if marker is not None:
        after_id = _sql.marker_id(context, p.id, p.uuid, marker,
                                  *_visibility(visible_to))
        if after_id is None:
            return None
    if not _sql.matchable(names):
        return []
    params = {'names': None if names is None else list(names),
              'visible_to': visible_to, 'after_id': after_id, 'limit': limit}
    given = {key: value for key, value in params.items()
             if value is not None}
    return _sql.connection(context).execute(
        _list_statement(*(key in given for key in params)), given).all()


@_sql.built_once
def _list_statement(named, visible, after, limited):
    # Nova's every boot lists the profile it names (?name=): built once
    # per shape, with bind parameters, as the profile's other reads.
    p = models.DeviceProfile
    query = sa.select(p.__table__).order_by(p.id)
    if named:
        query = query.where(p.name.in_(sa.bindparam('names', expanding=True)))
    if visible:
        query = _visible(query, sa.bindparam('visible_to'))
    if after:
        query = query.where(p.id > sa.bindparam('after_id'))
    if limited:
        query = query.limit(sa.bindparam('limit'))
    return query


@reader
def shared_with(context, profile_ids):
    """{profile id: sorted project ids it is shared with} for the private
    profiles among ``profile_ids`` that are shared at all."""
    if not profile_ids:
        return {}
    found = {}
    for profile_id, project_id in _sql.connection(context).execute(
            sa.select(_SHARES.profile_id, _SHARES.project_id)
            .where(_SHARES.profile_id.in_(list(profile_ids)))
            .order_by(_SHARES.project_id)):
        found.setdefault(profile_id, []).append(project_id)
    return found


@reader
def get_groups(context, uuid=None, name=None, visible_to=None):
    """(id, name, profile_json) of a device profile by uuid or name, or
    None (also when ``visible_to`` may not see it): what making its ARQs
    needs, without loading the whole row."""
    return _one(context, False, uuid, name, visible_to)


def _one(context, whole, uuid, name, visible_to):
    """The row (``whole``, or what making ARQs needs) of the profile with
    ``uuid`` and/or ``name`` that ``visible_to`` sees, or None."""
    if (uuid is None and name is None) or not _sql.matchable(
            uuid, name, visible_to):
        return None
    statement = _one_statement(whole, uuid is not None, name is not None,
                               visible_to is not None)
    params = {'uuid': uuid, 'name': name, 'visible_to': visible_to}
    row = _sql.connection(context).execute(statement, {
        key: value for key, value in params.items()
        if value is not None}).first()
    if row is not None and name is not None and row.name != name:
        # MySQL's collations, binary ones too, ignore trailing spaces
        # ('p ' = 'p'; MariaDB's EXACT_NAME, NO PAD, does not): a name
        # is exact on every engine.
        return None
    return row


@_sql.built_once
def _one_statement(whole, by_uuid, by_name, visible):
    # An ARQ create and Nova's reads of a profile run it: built once, with
    # bind parameters (building it anew cost more than running it).
    p = models.DeviceProfile
    query = sa.select(*((p.__table__,) if whole else
                        (p.id, p.name, p.profile_json)))
    if by_uuid:
        query = query.where(p.uuid == sa.bindparam('uuid'))
    if by_name:
        query = query.where(p.name == sa.bindparam('name'))
    if visible:
        query = _visible(query, sa.bindparam('visible_to'))
    return query


@writer
def insert(context, values, projects=()):
    """Insert a profile row and the projects it is shared with; the
    unique keys reject duplicates."""
    row = models.DeviceProfile(**values)
    context.session.add(row)
    context.session.flush()
    if projects:
        context.session.execute(sa.insert(_SHARES), [
            {'profile_id': row.id, 'project_id': project,
             'created_at': models._now()} for project in projects])
    return row


@writer
def delete_many(context, uuids):
    """Delete the profiles with ``uuids`` (and their shares); returns how
    many went."""
    p = models.DeviceProfile
    ids = sa.select(p.id).where(p.uuid.in_(list(uuids)))
    # Not left to ON DELETE CASCADE: SQLite enforces foreign keys only
    # when asked to.
    context.session.execute(
        sa.delete(_SHARES).where(_SHARES.profile_id.in_(ids))
        .execution_options(synchronize_session=False))
    return context.session.execute(
        sa.delete(p).where(p.uuid.in_(list(uuids)))
        .execution_options(synchronize_session=False)).rowcount


@reader
def in_use(context, uuids):
    """Uuids of the profiles among ``uuids`` that ARQs use."""
    a, p = models.ExtARQ, models.DeviceProfile
    return set(_sql.connection(context).scalars(
        sa.select(p.uuid).distinct().join(a, a.device_profile_id == p.id)
        .where(p.uuid.in_(list(uuids)))))
