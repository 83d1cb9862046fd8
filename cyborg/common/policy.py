"""oslo.policy enforcement with secure-RBAC defaults enforced.

One enforcer per ConfigOpts; ``get_enforcer`` is the oslopolicy tools'
entry point (``oslo.policy.enforcer`` in setup.cfg).
"""

import threading
import time

from oslo_config import cfg
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from cyborg.common import exception
from cyborg import policies

_ENFORCERS = {}
_LOCK = threading.Lock()
# How often a request may look at the policy files for changes.
RELOAD_CHECK_SECONDS = 1.0


class _Enforcer(policy.Enforcer):
    """oslo.policy's enforcer, looking for changed policy files at most
    once a second rather than on every check (several stat calls each
    time, a tenth of a small request).  A changed file takes effect within
    a second, as before without a restart."""

    _checked_at = None

    def load_rules(self, force_reload=False):
        now = time.monotonic()
        if (not force_reload and self._checked_at is not None
                and now - self._checked_at < RELOAD_CHECK_SECONDS):
            return
        super().load_rules(force_reload)
        self._checked_at = now

    def clear(self):
        super().clear()
        self._checked_at = None


def _defaults(conf):
    # New defaults are on: a deployment opts out in its own config file,
    # never by our default.  Scope is always checked by oslo.policy >= 5.
    policy_opts.set_defaults(conf, enforce_new_defaults=True)


def get_enforcer(conf=None):
    """The enforcer for ``conf`` (the global CONF for the oslopolicy tools)."""
    conf = conf if conf is not None else cfg.CONF
    with _LOCK:
        enforcer = _ENFORCERS.get(id(conf))
        if enforcer is None or enforcer.conf is not conf:
            _defaults(conf)
            enforcer = _Enforcer(conf)
            enforcer.register_defaults(policies.list_rules())
            _ENFORCERS[id(conf)] = enforcer
        return enforcer


def reset():
    with _LOCK:
        _ENFORCERS.clear()


def authorize(conf, context, rule, target=None):
    """Raise PolicyNotAuthorized (403) unless ``context`` may do ``rule``.

    The target defaults to the caller's own project, which is what list
    calls and calls on objects without an owner are checked against.
    """
    target = dict(target or {})
    target.setdefault('project_id', context.project_id)
    values = context.to_policy_values()
    # A plain dict: oslo.context warns about any key added to its own.
    creds = dict(getattr(values, '_data', values))
    creds['is_service'] = bool(context.is_service)
    try:
        get_enforcer(conf).authorize(rule, target, creds, do_raise=True,
                                     exc=exception.PolicyNotAuthorized,
                                     action=rule)
    except policy.InvalidScope:
        raise exception.PolicyNotAuthorized(action=rule)
