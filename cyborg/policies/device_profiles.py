"""Policies for device profiles: read by project users, written by admins."""

from oslo_policy import policy

from cyborg.policies import base

PREFIX = 'cyborg:device_profile:%s'
PATH = '/v2/device_profiles'

rules = [
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_all',
        check_str=base.ADMIN_OR_PROJECT_READER_OR_SERVICE,
        description='List device profiles.',
        operations=[{'path': PATH, 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_one',
        check_str=base.ADMIN_OR_PROJECT_READER_OR_SERVICE,
        description='Show a device profile by uuid or (>= 2.2) name.',
        operations=[{'path': PATH + '/{name_or_uuid}', 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'create',
        check_str=base.RULE_ADMIN,
        description='Create a device profile.',
        operations=[{'path': PATH, 'method': 'POST'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'delete',
        check_str=base.RULE_ADMIN,
        description='Delete device profiles.',
        operations=[{'path': PATH + '/{name_or_uuid}', 'method': 'DELETE'},
                    {'path': PATH + '?value={names}', 'method': 'DELETE'}],
        scope_types=['project']),
]


def list_rules():
    return rules
