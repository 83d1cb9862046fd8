"""[placement] options: keystoneauth session, auth and adapter.

Without Keystone (the all-in-one, tests) set ``auth_type = none`` and
``endpoint_override = <Placement URL>``: the client then sends the token
Placement's ``noauth2`` strategy reads as an admin.
"""

from cyborg.conf import ksa

GROUP = 'placement'
# Below the API's [api]conductor_timeout (20 s): a bind waits for its
# allocation lookup before the conductor answers the API.
TIMEOUT = 10


def register_opts(conf):
    ksa.register_client_opts(conf, GROUP, 'placement', TIMEOUT)


def list_opts():
    return {GROUP: ksa.client_opts(TIMEOUT)}
