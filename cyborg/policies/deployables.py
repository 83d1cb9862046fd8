"""Policies for deployables: read by project managers, programmed by admins.

The names are imported by the operations that use them
(``cyborg.api.routes``), which also document where each applies."""

from cyborg.policies import base

GET_ALL = 'cyborg:deployable:get_all'
GET_ONE = 'cyborg:deployable:get_one'
PROGRAM = 'cyborg:deployable:program'

rules = [
    base.Rule(GET_ALL, base.ADMIN_OR_PROJECT_MANAGER,
              'List deployables.'),
    base.Rule(GET_ONE, base.ADMIN_OR_PROJECT_MANAGER,
              'Show a deployable.'),
    base.Rule(PROGRAM, base.RULE_ADMIN,
              'Program an FPGA deployable with a Glance image.'),
]
