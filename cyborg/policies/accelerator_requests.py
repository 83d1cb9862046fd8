"""Policies for accelerator requests (ARQs): read by the project, written by
its members or by the service (Nova)."""

from oslo_policy import policy

from cyborg.policies import base

PREFIX = 'cyborg:arq:%s'
PATH = '/v2/accelerator_requests'

rules = [
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_all',
        check_str=base.ADMIN_OR_PROJECT_READER_OR_SERVICE,
        description='List accelerator requests.',
        operations=[{'path': PATH, 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'get_one',
        check_str=base.ADMIN_OR_PROJECT_READER_OR_SERVICE,
        description='Show an accelerator request.',
        operations=[{'path': PATH + '/{uuid}', 'method': 'GET'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'create',
        check_str=base.ADMIN_OR_PROJECT_MEMBER_OR_SERVICE,
        description='Create accelerator requests from a device profile.',
        operations=[{'path': PATH, 'method': 'POST'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'update',
        check_str=base.ADMIN_OR_PROJECT_MEMBER_OR_SERVICE,
        description='Bind or unbind accelerator requests (the request '
                    'must also carry a service token).',
        operations=[{'path': PATH, 'method': 'PATCH'},
                    {'path': PATH + '/{uuid}', 'method': 'PATCH'}],
        scope_types=['project']),
    policy.DocumentedRuleDefault(
        name=PREFIX % 'delete',
        check_str=base.ADMIN_OR_PROJECT_MEMBER_OR_SERVICE,
        description='Delete accelerator requests (bound ones and by '
                    'instance need a service token).',
        operations=[{'path': PATH, 'method': 'DELETE'},
                    {'path': PATH + '/{uuid}', 'method': 'DELETE'}],
        scope_types=['project']),
]


def list_rules():
    return rules
