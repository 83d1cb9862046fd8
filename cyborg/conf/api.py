"""[api] options, and the default cyborg gives keystonemiddleware's."""

from oslo_config import cfg

from cyborg.conf import ksa

GROUP = 'api'

# keystonemiddleware's auth_token options, registered by cyborg.api.auth.
KEYSTONE_NAMESPACE = 'keystonemiddleware.auth_token'
# Seconds a token validation waits for Keystone ([keystone_authtoken]
# http_connect_timeout, whose library default is to wait forever): a hung
# Keystone answers the API's requests 503 instead of holding its threads.
KEYSTONE_TIMEOUT = 10
# Seconds a request waits for the conductor by default: above the longest
# a write waits for a row lock (cyborg.db.api.LOCK_WAIT), so that such a
# write answers with its own 503.
CONDUCTOR_TIMEOUT = 20
# Seconds a client has to send a whole request by default: far more than
# the largest body allowed ([oslo_middleware]max_request_body_size) takes
# on any link a client of the API uses.
REQUEST_READ_TIMEOUT = 30

opts = [
    cfg.HostAddressOpt('host_ip', default='0.0.0.0',
                       help='Address the cyborg-api server listens on.'),
    cfg.PortOpt('port', default=6666,
                help='Port the cyborg-api server listens on.'),
    cfg.IntOpt('api_workers', default=1, min=1,
               help='Number of cyborg-api worker processes.'),
    cfg.IntOpt('threads', default=16, min=1,
               help='Request threads per cyborg-api worker process.'),
    cfg.StrOpt('public_endpoint',
               help='Public URL of the API, used in links, e.g. '
                    'https://cloud.example.com/accelerator. When unset, the '
                    'request\'s host URL is used.'),
    cfg.StrOpt('auth_strategy', default='keystone',
               choices=[('keystone', 'Validate tokens with Keystone '
                                     '(keystonemiddleware auth_token).'),
                        ('noauth', 'No authentication: identity comes from '
                                   'the X-Project-Id, X-User-Id and X-Roles '
                                   'headers. For the all-in-one and tests '
                                   'only.')],
               help='How API requests are authenticated.'),
    cfg.BoolOpt('noauth_on_any_address', default=False,
                help='Let cyborg-api start with auth_strategy = noauth while '
                     'host_ip is not a loopback address (127.0.0.1, ::1). '
                     'Dangerous: noauth trusts the identity headers as '
                     'sent, and makes a request without any the admin, so '
                     'everyone who can reach host_ip and port is an '
                     'administrator of the cloud\'s accelerators. Without '
                     'it cyborg-api refuses to start with that '
                     'combination. Set it only where no one but you can '
                     'reach that address (a private test network).'),
    cfg.IntOpt('max_limit', default=1000, min=1,
               help='Largest number of items a list call returns at once: '
                    'a page of deployables, from microversion 2.11 a '
                    'page of devices, ARQs, device profiles or attributes, '
                    'and from 2.12 a page of remote pools (each links to '
                    'the next page).'),
    cfg.IntOpt('conductor_timeout', default=CONDUCTOR_TIMEOUT, min=2,
               help='Seconds a request waits for the conductor before it '
                    'answers 503. Keep it below the WSGI server\'s own '
                    'request timeout (gunicorn\'s --timeout defaults to 30 '
                    's, uWSGI\'s harakiri is often 60 s), or the server '
                    'kills the worker first and the client gets an HTML '
                    'error instead of a JSON 503; and above the time a '
                    'write waits for a row lock another transaction holds '
                    '(10 s, the operations guide\'s "Timeouts"), or '
                    'such a write answers 503 without saying why. At least '
                    '2: the conductor rolls back a write that would commit '
                    'within a second of the API giving up.'),
    cfg.IntOpt('request_read_timeout', default=REQUEST_READ_TIMEOUT, min=0,
               help='Seconds a client has to send a whole request (request '
                    'line, headers and body) once a request thread of '
                    'cyborg-api or cyborg-aio takes it up. A client that '
                    'takes longer is answered 408 and its connection '
                    'closed, so that clients sending a byte now and then '
                    'cannot hold the request threads (each read of the '
                    'socket alone waits at most 10 s). 0: no such limit. '
                    'Behind uWSGI or Apache, their own settings apply '
                    'instead.'),
    cfg.IntOpt('broker_retries', default=2, min=0,
               help='How many more times a request tries to reach the '
                    'message broker (about a second apart) before it '
                    'answers 503.'),
    cfg.BoolOpt('validate_responses', default=False, advanced=True,
                help='Check every success response against the schema its '
                     'operation declares, and answer 500 (logging why) '
                     'when it does not match. For tests and debugging: it '
                     'costs time on every request. The test suite sets it '
                     'through the environment (OS_API__VALIDATE_RESPONSES).'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)


def list_opts():
    listed = {GROUP: opts}
    listed.update(ksa.library_opts(KEYSTONE_NAMESPACE,
                                   http_connect_timeout=KEYSTONE_TIMEOUT))
    return listed
