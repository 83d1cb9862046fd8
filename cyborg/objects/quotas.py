"""Quota usage: what a project's accelerator requests use, by resource
(``cyborg.common.quota`` names the resources and how they are counted)."""

from cyborg.common import quota
from cyborg.db.api import quotas as quota_db


def usage(context, project_id):
    """{resource name: usage} of ``project_id``'s ARQs now."""
    return quota.usage([(quota.groups_of(profile_json), group_id, count)
                        for profile_json, group_id, count in
                        quota_db.held(context, project_id)])
