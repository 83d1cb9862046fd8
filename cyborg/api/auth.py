"""Who is calling: keystonemiddleware auth_token, or noauth.

Both leave the identity in the standard ``X-*`` request headers that
``oslo.context`` reads, plus ``cyborg.is_service`` in the environ: True when
the request carries a service token (Nova's), which the bind and
instance-wide delete paths require.
"""

from keystoneauth1 import exceptions as ksa_exceptions
from keystonemiddleware import auth_token
from oslo_log import log as logging

from cyborg.api import faults
from cyborg.conf import api as api_conf
from cyborg.conf import ksa

LOG = logging.getLogger(__name__)

# Version documents answer without a token (clients discover with them).
PUBLIC_PATHS = ('/', '/v2', '/v2/', '/v2/openapi.json')

# Every header oslo.context reads an identity from (its older names
# included: X-Tenant-Id, X-User, X-Role...): a request naming any of them
# names an identity, and is not taken for the all-in-one's operator.
_IDENTITY_HEADERS = ('HTTP_X_PROJECT_ID', 'HTTP_X_TENANT_ID', 'HTTP_X_TENANT',
                     'HTTP_X_USER_ID', 'HTTP_X_USER', 'HTTP_X_ROLES',
                     'HTTP_X_ROLE', 'HTTP_X_DOMAIN_ID',
                     'HTTP_OPENSTACK_SYSTEM_SCOPE')
IS_SERVICE = 'cyborg.is_service'
# Set once auth_token has let a request through to the application.
_PASSED = 'cyborg.auth_passed'
# What auth_token lets out when Keystone cannot be asked (it answers 503
# itself for some of them, not for those met fetching its own token).
_KEYSTONE_AWAY = (ksa_exceptions.ConnectionError,
                  ksa_exceptions.RequestTimeout,
                  ksa_exceptions.DiscoveryFailure,
                  ksa_exceptions.HttpServerError)


def noauth(app):
    """Identity from X-Project-Id, X-User-Id and X-Roles (or their older
    names), trusted as sent.

    A request naming no identity at all is the admin of project 'admin'
    (the all-in-one's operator); one with X-Service-Token is a service's.
    """
    def middleware(env, start_response):
        if not any(env.get(h) for h in _IDENTITY_HEADERS):
            env['HTTP_X_PROJECT_ID'] = 'admin'
            env['HTTP_X_USER_ID'] = 'admin'
            env['HTTP_X_ROLES'] = 'admin,manager,member,reader'
        env['HTTP_X_IDENTITY_STATUS'] = 'Confirmed'
        env[IS_SERVICE] = bool(env.get('HTTP_X_SERVICE_TOKEN'))
        return app(env, start_response)
    return middleware


def register_keystone_opts(conf):
    """keystonemiddleware's options; returns its group's name."""
    groups = auth_token.list_opts()
    for grp, opts in groups:
        conf.register_opts(opts, group=grp)
    group = groups[0][0]
    conf.set_default('http_connect_timeout', api_conf.KEYSTONE_TIMEOUT,
                     group=group)
    return group


def keystone_config_problem(conf):
    """Why ``auth_strategy = keystone`` cannot work with ``conf``, or None.

    Without credentials of its own auth_token cannot validate any token,
    and every request would fail with a 500."""
    if conf.api.auth_strategy != 'keystone':
        return None
    group = register_keystone_opts(conf)
    section = conf[group]
    if not ksa.has_credentials(section):
        return ('[api]auth_strategy is keystone but [%s] has no auth_type '
                '(and the credentials it goes with): set them, as the '
                'install guide shows, or use auth_strategy = noauth to try '
                'cyborg out' % group)
    return None


def keystone(app, conf):
    """auth_token, skipped for the public version documents."""
    group = register_keystone_opts(conf)
    protected = auth_token.AuthProtocol(_ServiceMarker(app, conf, group),
                                        {'oslo_config_config': conf})

    def middleware(environ, start_response):
        if environ.get('PATH_INFO', '') in PUBLIC_PATHS:
            environ[IS_SERVICE] = False
            return app(environ, start_response)
        try:
            return protected(environ, start_response)
        except _KEYSTONE_AWAY as exc:
            if environ.get(_PASSED):
                raise           # the application's own, not auth_token's
            # Keystone away or too slow ([keystone_authtoken]
            # http_connect_timeout): the request cannot be authenticated
            # now, which is the client's to retry, not a server fault.
            LOG.warning('Cannot validate a token: Keystone did not answer '
                        '(%s: %s)', type(exc).__name__, exc)
            return faults.response(
                503, 'Service Unavailable: the identity service cannot be '
                     'reached to validate the token; try again later')(
                environ, start_response)
    return middleware


class _ServiceMarker:
    """Marks requests whose valid service token has a service role.

    Also refuses, with auth_token's own 401 (which adds
    ``WWW-Authenticate`` on the way out), a request whose token (or
    service token) was not confirmed: with ``[keystone_authtoken]
    delay_auth_decision = true`` auth_token lets such a request through
    for the application to decide, and nothing here is served to an
    anonymous caller (the version documents never reach auth_token), so
    it was refused by policy as a 403 that told the client nothing of
    its token."""

    def __init__(self, app, conf, group):
        self.app = app
        self.roles = set()
        if conf is not None:
            self.roles = set(getattr(conf, group).service_token_roles)

    def __call__(self, environ, start_response):
        if (environ.get('HTTP_X_IDENTITY_STATUS') != 'Confirmed'
                or environ.get('HTTP_X_SERVICE_IDENTITY_STATUS',
                               'Confirmed') != 'Confirmed'):
            return faults.response(
                401, 'Unauthorized: the request you have made requires '
                     'authentication')(environ, start_response)
        confirmed = environ.get(
            'HTTP_X_SERVICE_IDENTITY_STATUS') == 'Confirmed'
        roles = {r.strip().lower() for r in
                 environ.get('HTTP_X_SERVICE_ROLES', '').split(',')}
        wanted = {r.lower() for r in self.roles}
        environ[IS_SERVICE] = bool(confirmed and roles & wanted)
        environ[_PASSED] = True
        return self.app(environ, start_response)
