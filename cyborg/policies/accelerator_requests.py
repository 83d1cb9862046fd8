"""Policies for accelerator requests (ARQs): read by the project, written by
its members or by the service (Nova).

The names are imported by the operations that use them
(``cyborg.api.routes``), which also document where each applies."""

from cyborg.policies import base

GET_ALL = 'cyborg:arq:get_all'
GET_ONE = 'cyborg:arq:get_one'
CREATE = 'cyborg:arq:create'
UPDATE = 'cyborg:arq:update'
DELETE = 'cyborg:arq:delete'
ALLOCATE = 'cyborg:arq:allocate'

rules = [
    base.Rule(GET_ALL, base.ADMIN_OR_PROJECT_READER_OR_SERVICE,
              'List accelerator requests.'),
    base.Rule(GET_ONE, base.ADMIN_OR_PROJECT_READER_OR_SERVICE,
              'Show an accelerator request.'),
    base.Rule(CREATE, base.ADMIN_OR_PROJECT_MEMBER_OR_SERVICE,
              'Create accelerator requests from a device profile.'),
    base.Rule(UPDATE, base.ADMIN_OR_PROJECT_MEMBER_OR_SERVICE,
              'Bind or unbind accelerator requests (the request must also '
              'carry a service token).'),
    base.Rule(DELETE, base.ADMIN_OR_PROJECT_MEMBER_OR_SERVICE,
              'Delete accelerator requests (bound ones and by instance need '
              'a service token; one allocated standalone may also be '
              'deleted by an admin or a service).'),
    base.Rule(ALLOCATE, base.ADMIN_OR_SERVICE,
              'Allocate an accelerator to an accelerator request without '
              'Nova (standalone use: a scheduler such as Kubernetes claims '
              'and binds it for a consumer of its own).'),
]
