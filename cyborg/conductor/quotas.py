"""Quota enforcement when ARQs are created (doc/source/quotas.rst).

The limits are read from Keystone before the transaction (a slow Keystone
never holds a database lock); the transaction then locks the project's
quota row as its first statement, counts the project's usage and refuses
with 403, writing nothing, when the new ARQs would go over a limit
(``cyborg.db.api.quotas`` explains the lock).  A periodic deletes the
lock rows of projects left without ARQs (``purge_unused_locks``).
"""

from oslo_log import log as logging

from cyborg.common import quota
from cyborg.db import api as db_api
from cyborg.db.api import quotas as quota_db
from cyborg.objects import quotas as quota_objects

LOG = logging.getLogger(__name__)

# Lock rows one purge transaction deletes at most.
PURGE_BATCH = 500


def limits_for(conf, project_id):
    """The project's Limits when quotas are enforced, else None (no lock,
    no count: the noop driver costs nothing)."""
    if conf is None or not project_id:
        return None
    driver = quota.get_driver(conf)
    if not driver.enforced:
        return None
    return driver.limits(project_id)


def lock(context, project_id, limits):
    """Serialise the project's quota-checked creates; call first in the
    transaction."""
    if _enforced(limits, project_id):
        quota_db.lock_project(context, project_id)


def check(context, project_id, groups, limits):
    """Raise QuotaExceeded when creating the ARQs of ``groups`` would take
    the project over a limit; call in the transaction, after ``lock``."""
    if not _enforced(limits, project_id):
        return
    limits.check(quota_objects.usage(context, project_id),
                 quota.requested(groups))


def _enforced(limits, project_id):
    # ARQs of no project (noauth without X-Project-Id) are not limited.
    return bool(project_id) and limits is not None and limits.enforced


def purge_unused_locks(conf, context):
    """Periodic: delete the lock rows of projects that have no ARQ left,
    but those a create holds (``cyborg.db.api.quotas``), ``PURGE_BATCH``
    at a time, each batch in a short transaction of its own; returns how
    many went."""
    purged, after = 0, 0
    while True:
        ids = quota_db.unused_locks(context, after, PURGE_BATCH)
        if ids:
            purged += db_api.write_retrying(
                context, quota_db.delete_unused, context, ids)
        if len(ids) < PURGE_BATCH:
            break
        after = ids[-1]
    if purged:
        LOG.info('Deleted the quota lock rows of %d project(s) that have no '
                 'accelerator request left', purged)
    return purged
