"""Policies for deployables: read by project managers, programmed by admins."""

from oslo_policy import policy

from cyborg.policies import base

PREFIX = 'cyborg:deployable:%s'
PATH = '/v2/deployables'

rules = [
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_all',
        check_str=base.ADMIN_OR_PROJECT_MANAGER,
        description='List deployables.',
        operations=[{'path': PATH, 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_one',
        check_str=base.ADMIN_OR_PROJECT_MANAGER,
        description='Show a deployable.',
        operations=[{'path': PATH + '/{uuid}', 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'program',
        check_str=base.RULE_ADMIN,
        description='Program an FPGA deployable with a Glance image.',
        operations=[{'path': PATH + '/{uuid}/program', 'method': 'PATCH'}],
        scope_types=['project']),
]


def list_rules():
    return rules
