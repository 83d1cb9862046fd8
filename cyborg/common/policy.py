"""oslo.policy enforcement with secure-RBAC defaults enforced.

One enforcer per ConfigOpts; ``get_enforcer`` is the oslopolicy tools'
entry point (``oslo.policy.enforcer`` in setup.cfg).
"""

import threading
import time

from oslo_config import cfg
from oslo_policy import _checks
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from cyborg.common import exception
from cyborg import policies
from cyborg.policies import base

_ENFORCERS = {}
_LOCK = threading.Lock()
# How often a request may look at the policy files for changes.
RELOAD_CHECK_SECONDS = 1.0
# Decisions an enforcer remembers at most (all are forgotten when full).
DECISIONS_KEPT = 4096
# Checks whose answer depends on nothing but the target and the
# credentials.  An operator's rules with any other check (``http:``, which
# asks a server, or a check of a library's own) are evaluated every time.
# (oslo.policy exports only some of these classes outside _checks.)
_PURE_CHECKS = (_checks.RoleCheck, _checks.GenericCheck, _checks.RuleCheck,
                _checks.TrueCheck, _checks.FalseCheck, _checks.AndCheck,
                _checks.OrCheck, _checks.NotCheck)


class _Enforcer(policy.Enforcer):
    """oslo.policy's enforcer, looking for changed policy files at most
    once a second rather than on every check (several stat calls each
    time, a tenth of a small request).  A changed file takes effect within
    a second, as before without a restart.

    It also remembers its decisions (``decide``): the same rule for the
    same credentials and target is decided once, not at every request
    (oslo.policy inspects each check's signature whenever it evaluates it:
    a tenth of a small read).  What it remembers is forgotten whenever the
    rules are loaded or set, so no decision outlives the rules it was made
    under."""

    _checked_at = None

    def __init__(self, *args, **kwargs):
        self._decisions = {}
        self._remembering = False
        super().__init__(*args, **kwargs)

    def load_rules(self, force_reload=False):
        now = time.monotonic()
        if (not force_reload and self._checked_at is not None
                and now - self._checked_at < RELOAD_CHECK_SECONDS):
            return
        self._forget()
        super().load_rules(force_reload)
        self._checked_at = now
        self._remembering = all(_pure(check)
                                for check in self.rules.values())

    def set_rules(self, *args, **kwargs):
        self._forget()
        super().set_rules(*args, **kwargs)

    def clear(self):
        super().clear()     # sets no rules through set_rules: forgets
        self._checked_at = None

    def _forget(self):
        self._remembering = False
        self._decisions = {}

    def decide(self, rule, target, creds):
        """Whether ``creds`` may do ``rule`` on ``target`` (a rule out of
        scope is not allowed)."""
        self.load_rules()
        # The decisions of the rules as loaded now: a decision is kept
        # only if no load began meanwhile (a load starts a new dict).
        decisions = self._decisions
        key = _decision_key(rule, target, creds) if self._remembering \
            else None
        allowed = decisions.get(key) if key is not None else None
        if allowed is not None:
            return allowed
        try:
            allowed = bool(self.authorize(rule, target, creds,
                                          do_raise=True))
        except (policy.PolicyNotAuthorized, policy.InvalidScope):
            allowed = False
        if key is not None and decisions is self._decisions:
            if len(decisions) >= DECISIONS_KEPT:
                decisions.clear()
            decisions[key] = allowed
        return allowed


def _pure(check):
    if not isinstance(check, _PURE_CHECKS):
        return False
    inner = getattr(check, 'rules', None) or [getattr(check, 'rule', None)]
    return all(_pure(c) for c in inner
               if isinstance(c, _checks.BaseCheck))


def _decision_key(rule, target, creds):
    """A hashable form of one question; None when a value cannot be
    one (the decision is then not remembered)."""
    try:
        key = (rule, _frozen(target), _frozen(creds))
        hash(key)
    except TypeError:
        return None
    return key


def _frozen(values):
    return tuple(sorted(
        (name, tuple(value) if isinstance(value, list) else value)
        for name, value in values.items()))


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

    A caller with no project (noauth without ``X-Project-Id``) owns
    nothing: no check on the project (``project_id:%(project_id)s``)
    matches for it, so only the rules that need no project (admin,
    service) let it in.
    """
    if not allows(conf, context, rule, target):
        raise exception.PolicyNotAuthorized(action=rule)


def allows(conf, context, rule, target=None):
    """Whether ``context`` may do ``rule`` on ``target`` (``authorize``
    without the 403)."""
    target = dict(target or {})
    target.setdefault('project_id', context.project_id)
    target = _present(target)
    values = context.to_policy_values()
    # A plain dict: oslo.context warns about any key added to its own.
    creds = _present(dict(getattr(values, '_data', values)))
    creds['is_service'] = bool(context.is_service)
    return get_enforcer(conf).decide(rule, target, creds)


def base_rights(conf, context):
    """(admin, service): whether ``context`` passes the policy's ``admin``
    and ``service`` rules, checked against its own project.

    Who sees every project's ARQs and private profiles is decided by
    these, as the operator's policy file has them, never by the names of
    the caller's roles: an operator who narrows ``admin`` (to the cloud
    admin's project, say) narrows that too, not only the rules that
    name it (Nova's ``context_is_admin`` likewise)."""
    return (allows(conf, context, base.ADMIN_RULE),
            allows(conf, context, base.SERVICE_RULE))


def _present(values):
    """``values`` without those that are None or empty.

    oslo.policy compares text: a caller without a project checked against
    a target without one would be ``'None' == 'None'``, a match, and the
    caller would pass every rule of a project.  A key that is missing on
    either side matches nothing instead."""
    return {name: value for name, value in values.items()
            if value is not None and value != ''}
