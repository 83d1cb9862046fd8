"""Policies for devices: read by project managers, maintained by admins."""

from oslo_policy import policy

from cyborg.policies import base

PREFIX = 'cyborg:device:%s'
PATH = '/v2/devices'

rules = [
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_all',
        check_str=base.ADMIN_OR_PROJECT_MANAGER,
        description='List devices.',
        operations=[{'path': PATH, 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_one',
        check_str=base.ADMIN_OR_PROJECT_MANAGER,
        description='Show a device.',
        operations=[{'path': PATH + '/{uuid}', 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'enable',
        check_str=base.RULE_ADMIN,
        description='Put a device back in service.',
        operations=[{'path': PATH + '/{uuid}/enable', 'method': 'POST'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'disable',
        check_str=base.RULE_ADMIN,
        description='Take a device out of service (maintaining).',
        operations=[{'path': PATH + '/{uuid}/disable', 'method': 'POST'}],
        scope_types=['project']),
]


def list_rules():
    return rules
