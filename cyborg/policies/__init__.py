"""Every policy rule of the API, one module per noun (oslo.policy entry
point ``cyborg.policies:list_rules``).

A noun's module names its rules (constants the API's operations import)
and their defaults; the paths and methods each rule is documented with are
those of the operations that declare it in ``cyborg.api.routes``, so they
cannot drift apart.
"""

import itertools

from oslo_policy import policy

from cyborg.policies import accelerator_requests
from cyborg.policies import attributes
from cyborg.policies import base
from cyborg.policies import deployables
from cyborg.policies import device_profiles
from cyborg.policies import devices
from cyborg.policies import exports
from cyborg.policies import quotas
from cyborg.policies import remote_pools

NOUNS = (device_profiles, accelerator_requests, devices, deployables,
         attributes, quotas, remote_pools, exports)
SCOPE_TYPES = ['project']


def operation_rules():
    """Every rule an operation may declare (``base.Rule`` tuples)."""
    return list(itertools.chain.from_iterable(n.rules for n in NOUNS))


def list_rules():
    from cyborg.api import routes
    documented = []
    for rule in operation_rules():
        operations = [{'path': op.path, 'method': op.method}
                      for op in routes.OPERATIONS if op.policy == rule.name]
        documented.append(policy.DocumentedRuleDefault(
            name=rule.name, check_str=rule.check_str,
            description=rule.description, operations=operations,
            scope_types=SCOPE_TYPES))
    return base.list_rules() + documented
