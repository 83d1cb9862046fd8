"""Who is calling: keystonemiddleware auth_token, or noauth.

Both leave the identity in the standard ``X-*`` request headers that
``oslo.context`` reads, plus ``cyborg.is_service`` in the environ: True when
the request carries a service token (Nova's), which the bind and
instance-wide delete paths require.
"""

from keystonemiddleware import auth_token

# Version documents answer without a token (clients discover with them).
PUBLIC_PATHS = ('/', '/v2', '/v2/', '/v2/openapi.json')

_IDENTITY_HEADERS = ('HTTP_X_PROJECT_ID', 'HTTP_X_USER_ID', 'HTTP_X_ROLES')
IS_SERVICE = 'cyborg.is_service'


def noauth(app):
    """Identity from X-Project-Id, X-User-Id and X-Roles, trusted as sent.

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
    for grp, opts in auth_token.list_opts():
        conf.register_opts(opts, group=grp)
    return auth_token.list_opts()[0][0]


def keystone_config_problem(conf):
    """Why ``auth_strategy = keystone`` cannot work with ``conf``, or None.

    Without credentials of its own auth_token cannot validate any token,
    and every request would fail with a 500."""
    if conf.api.auth_strategy != 'keystone':
        return None
    group = register_keystone_opts(conf)
    section = conf[group]
    if not (getattr(section, 'auth_type', None)
            or getattr(section, 'auth_section', None)):
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
        return protected(environ, start_response)
    return middleware


class _ServiceMarker:
    """Marks requests whose valid service token has a service role."""

    def __init__(self, app, conf, group):
        self.app = app
        self.roles = set()
        if conf is not None:
            self.roles = set(getattr(conf, group).service_token_roles)

    def __call__(self, environ, start_response):
        confirmed = environ.get(
            'HTTP_X_SERVICE_IDENTITY_STATUS') == 'Confirmed'
        roles = {r.strip().lower() for r in
                 environ.get('HTTP_X_SERVICE_ROLES', '').split(',')}
        wanted = {r.lower() for r in self.roles}
        environ[IS_SERVICE] = bool(confirmed and roles & wanted)
        return self.app(environ, start_response)
