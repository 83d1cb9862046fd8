"""Policies for quotas: a project's readers see its limits and usage,
admins any project's.

The names are imported by the operations that use them
(``cyborg.api.routes``), which also document where each applies."""

from cyborg.policies import base

GET = 'cyborg:quota:get'

rules = [
    base.Rule(GET, base.ADMIN_OR_PROJECT_READER,
              'Show a project\'s accelerator limits and usage.'),
]
