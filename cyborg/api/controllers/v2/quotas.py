"""Quotas: /v2/quotas (the caller's project) and /v2/quotas/{project_id}
(a project's readers, or an admin), from microversion 2.7.

Limits come from ``[quota]driver`` (Keystone's unified limits, or none);
usage is counted from the database as the conductor counts it when it
enforces the limits."""

from cyborg.api.views import quotas as view
from cyborg.common import exception
from cyborg.common import quota
from cyborg.objects import quotas as quota_objects


def show_own_quota(r):
    """Show the caller's project's limits and usage."""
    if not r.context.project_id:
        raise exception.Invalid(reason='the request names no project')
    return _show(r, r.context.project_id)


def show_quota(r, project_id):
    """Show a project's limits and usage."""
    return _show(r, project_id)


def _show(r, project_id):
    limits = quota.get_driver(r.conf).limits(project_id)
    return view.show(project_id, limits,
                     quota_objects.usage(r.context, project_id))
