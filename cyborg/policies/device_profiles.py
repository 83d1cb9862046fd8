"""Policies for device profiles: read by project users, written by admins.

The names are imported by the operations that use them
(``cyborg.api.routes``), which also document where each applies."""

from cyborg.policies import base

GET_ALL = 'cyborg:device_profile:get_all'
GET_ONE = 'cyborg:device_profile:get_one'
CREATE = 'cyborg:device_profile:create'
DELETE = 'cyborg:device_profile:delete'

rules = [
    base.Rule(GET_ALL, base.ADMIN_OR_PROJECT_READER_OR_SERVICE,
              'List device profiles.'),
    base.Rule(GET_ONE, base.ADMIN_OR_PROJECT_READER_OR_SERVICE,
              'Show a device profile by uuid or (>= 2.2) name.'),
    base.Rule(CREATE, base.RULE_ADMIN,
              'Create a device profile.'),
    base.Rule(DELETE, base.RULE_ADMIN,
              'Delete device profiles.'),
]
