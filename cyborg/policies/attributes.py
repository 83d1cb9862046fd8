"""Policies for deployable attributes: read by project managers, written by
admins."""

from oslo_policy import policy

from cyborg.policies import base

PREFIX = 'cyborg:attribute:%s'
PATH = '/v2/attributes'

rules = [
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_all',
        check_str=base.ADMIN_OR_PROJECT_MANAGER,
        description='List attributes.',
        operations=[{'path': PATH, 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_one',
        check_str=base.ADMIN_OR_PROJECT_MANAGER,
        description='Show an attribute.',
        operations=[{'path': PATH + '/{uuid}', 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'create',
        check_str=base.RULE_ADMIN,
        description='Add an attribute to a deployable.',
        operations=[{'path': PATH, 'method': 'POST'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'delete',
        check_str=base.RULE_ADMIN,
        description='Delete an attribute.',
        operations=[{'path': PATH + '/{uuid}', 'method': 'DELETE'}],
        scope_types=['project']),
]


def list_rules():
    return rules
