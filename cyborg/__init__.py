"""cyborg: accelerator management, wire-compatible with OpenStack Cyborg.

oslo.service's threading backend is selected here, before any cyborg module
imports oslo.messaging (whose server module resolves the oslo.service
backend at import time and would otherwise load eventlet): no cyborg
process or test runs eventlet.
"""

import warnings

from oslo_service import backend as _oslo_service_backend

# eventlet is installed (oslo.service depends on it) and futurist imports it
# when present, without using it; its deprecation banner on every start
# would only mislead operators into thinking cyborg runs on eventlet.
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')

try:
    _oslo_service_backend.init_backend(
        _oslo_service_backend.BackendType.THREADING)
except _oslo_service_backend.exceptions.BackendAlreadySelected:
    # Imported by a tool that loaded oslo.messaging first (the config and
    # policy generators): it runs no cyborg service, so it does not matter.
    pass
