"""Policies for deployable attributes: read by project managers, written by
admins.

The names are imported by the operations that use them
(``cyborg.api.routes``), which also document where each applies."""

from cyborg.policies import base

GET_ALL = 'cyborg:attribute:get_all'
GET_ONE = 'cyborg:attribute:get_one'
CREATE = 'cyborg:attribute:create'
DELETE = 'cyborg:attribute:delete'

rules = [
    base.Rule(GET_ALL, base.ADMIN_OR_PROJECT_MANAGER,
              'List attributes.'),
    base.Rule(GET_ONE, base.ADMIN_OR_PROJECT_MANAGER,
              'Show an attribute.'),
    base.Rule(CREATE, base.RULE_ADMIN,
              'Add an attribute to a deployable.'),
    base.Rule(DELETE, base.RULE_ADMIN,
              'Delete an attribute.'),
]
