"""Policies for devices: read by project managers, maintained by admins.

The names are imported by the operations that use them
(``cyborg.api.routes``), which also document where each applies."""

from cyborg.policies import base

GET_ALL = 'cyborg:device:get_all'
GET_ONE = 'cyborg:device:get_one'
ENABLE = 'cyborg:device:enable'
DISABLE = 'cyborg:device:disable'

rules = [
    base.Rule(GET_ALL, base.ADMIN_OR_PROJECT_MANAGER,
              'List devices.'),
    base.Rule(GET_ONE, base.ADMIN_OR_PROJECT_MANAGER,
              'Show a device.'),
    base.Rule(ENABLE, base.RULE_ADMIN,
              'Put a device back in service.'),
    base.Rule(DISABLE, base.RULE_ADMIN,
              'Take a device out of service (maintaining).'),
]
