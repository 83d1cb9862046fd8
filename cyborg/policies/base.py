"""Check strings shared by the per-noun policy modules (secure RBAC).

Roles imply each other in Keystone (admin > manager > member > reader);
noauth sends roles as given, so the admin alternatives are spelled out.
``is_service`` is True for requests carrying a service token (Nova's).

A service is either: a caller holding the ``service`` role (Cyborg's and
Nova's convention, ``role:service``) or a request with a valid service
token.  The handlers still ask for the token itself for binding,
unbinding, deleting a bound ARQ and deleting an instance's ARQs (Nova's
paths; a role alone does not do them).
"""

import collections

from oslo_policy import policy

ADMIN = 'role:admin'
PROJECT_READER = 'role:reader and project_id:%(project_id)s'
PROJECT_MEMBER = 'role:member and project_id:%(project_id)s'
PROJECT_MANAGER = 'role:manager and project_id:%(project_id)s'
SERVICE = 'role:service or is_service:True'

# The names of the base rules that say who is an admin and who is a
# service: the API also decides by them who sees every project's ARQs
# and profiles (``cyborg.api.dispatch``), so that an operator's narrower
# rule narrows that too.
ADMIN_RULE = 'admin'
SERVICE_RULE = 'service'

RULE_ADMIN = 'rule:' + ADMIN_RULE

ADMIN_OR_PROJECT_READER = 'rule:admin or rule:project_reader'
ADMIN_OR_PROJECT_READER_OR_SERVICE = ('rule:admin or rule:project_reader '
                                      'or rule:service')
ADMIN_OR_PROJECT_MEMBER_OR_SERVICE = ('rule:admin or rule:project_member '
                                      'or rule:service')
ADMIN_OR_PROJECT_MANAGER = 'rule:admin or rule:project_manager'
ADMIN_OR_SERVICE = 'rule:admin or rule:service'

# One operation rule of a noun: the API documents where it applies (the
# operations that name it) when the rules are listed.
Rule = collections.namedtuple('Rule', 'name check_str description')

rules = [
    policy.RuleDefault(ADMIN_RULE, ADMIN,
                       description='An administrator: also sees and '
                                   'changes every project\'s accelerator '
                                   'requests and private device profiles.'),
    policy.RuleDefault('project_reader', PROJECT_READER,
                       description='A reader of the target\'s project.'),
    policy.RuleDefault('project_member', PROJECT_MEMBER,
                       description='A member of the target\'s project.'),
    policy.RuleDefault('project_manager', PROJECT_MANAGER,
                       description='A manager of the target\'s project.'),
    policy.RuleDefault(SERVICE_RULE, SERVICE,
                       description='A service: a caller with the service '
                                   'role, or a request carrying a service '
                                   'token with a service role (Nova\'s). '
                                   'It also sees and changes every '
                                   'project\'s accelerator requests.'),
]


def list_rules():
    return rules
