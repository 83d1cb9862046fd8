"""Every policy rule of the API, one module per noun (oslo.policy entry
point ``cyborg.policies:list_rules``)."""

import itertools

from cyborg.policies import accelerator_requests
from cyborg.policies import attributes
from cyborg.policies import base
from cyborg.policies import deployables
from cyborg.policies import device_profiles
from cyborg.policies import devices


def list_rules():
    return list(itertools.chain(
        base.list_rules(),
        device_profiles.list_rules(),
        accelerator_requests.list_rules(),
        devices.list_rules(),
        deployables.list_rules(),
        attributes.list_rules(),
    ))
