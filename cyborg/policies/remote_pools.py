"""Policies for remote (fabric-attached) accelerator pools: registered and
deleted by admins, read by project managers like devices.

The names are imported by the operations that use them
(``cyborg.api.routes``), which also document where each applies."""

from cyborg.policies import base

GET_ALL = 'cyborg:remote_pool:get_all'
GET_ONE = 'cyborg:remote_pool:get_one'
CREATE = 'cyborg:remote_pool:create'
DELETE = 'cyborg:remote_pool:delete'

rules = [
    base.Rule(GET_ALL, base.ADMIN_OR_PROJECT_MANAGER,
              'List remote accelerator pools.'),
    base.Rule(GET_ONE, base.ADMIN_OR_PROJECT_MANAGER,
              'Show a remote accelerator pool.'),
    base.Rule(CREATE, base.RULE_ADMIN,
              'Register a remote accelerator pool.'),
    base.Rule(DELETE, base.RULE_ADMIN,
              'Delete a remote accelerator pool nothing uses.'),
]
