"""oslo.policy enforcement with secure-RBAC defaults enforced.

One enforcer per ConfigOpts; ``get_enforcer`` is the oslopolicy tools'
entry point (``oslo.policy.enforcer`` in setup.cfg).

Only valid policy files are enforced: the API refuses to start on one
that is not (``config_problem``), and a file changed at run time into one
that is not leaves the rules loaded before it in force, with an error in
the log, until it is fixed (``_Enforcer.load_rules``).
"""

import contextlib
import logging
import re
import threading
import time

from oslo_config import cfg
from oslo_log import log
from oslo_policy import _checks
from oslo_policy import _parser
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from cyborg.common import exception
from cyborg import policies
from cyborg.policies import base

LOG = log.getLogger(__name__)

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
# What the API answers while no valid policy was ever loaded (the file
# was changed into an invalid one between the start-up check and the
# first request): the log names the file and the problem.
NO_VALID_POLICY = ('the policy file is not valid (the API\'s log says '
                   'why)')


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
    under.

    And it enforces valid rules only.  oslo.policy fails every request
    on a file that is not YAML (or not a mapping) and on a rule that
    refers to itself, and silently denies a rule that does not parse or
    refers to a rule nobody defined.  Rules loaded with any of these
    (``rules_problem``) are not used: the rules of the last valid load
    stay in force, and the problem is logged once as an error (and kept
    in ``problem``) until the files are fixed.  With no valid load yet,
    every decision is a 503 (``NO_VALID_POLICY``)."""

    _checked_at = None

    def __init__(self, *args, **kwargs):
        self._decisions = {}
        self._remembering = False
        self._load_lock = threading.Lock()
        # (rules, file_rules) of the last valid load, None before one.
        self._valid = None
        # The rules object last looked at (valid or not): unchanged
        # files leave it in place, and it is not looked at again.
        self._looked_at = None
        # Why the policy files are not valid now, or None.
        self.problem = None
        # Whether a problem goes unlogged (the start-up check says it).
        self.quiet = False
        super().__init__(*args, **kwargs)

    def load_rules(self, force_reload=False):
        if not force_reload and self._recently_checked():
            return
        with self._load_lock:
            if not force_reload and self._recently_checked():
                return          # another thread just did
            now = time.monotonic()
            self._forget()
            try:
                with _parse_failures():
                    super().load_rules(force_reload)
            except Exception as exc:  # noqa: BLE001 - any is the file's
                self._reject(self._load_error(exc))
            else:
                if self.rules is not self._looked_at:
                    problem = rules_problem(self.rules, self.file_rules)
                    if problem is None:
                        self._accept()
                    else:
                        self._reject(problem)
            self._checked_at = now
            self._remembering = all(_pure(check)
                                    for check in self.rules.values())

    def check_rules(self, raise_on_violation=False):
        # oslo.policy's own look at the rules loaded warns of undefined
        # rules on every load; ``rules_problem`` says it (and more) once,
        # as an error, or in the start-up check's one line.
        if raise_on_violation:
            return super().check_rules(raise_on_violation)
        return rules_problem(self.rules, self.file_rules) is None

    def _recently_checked(self):
        return (self._checked_at is not None and
                time.monotonic() - self._checked_at < RELOAD_CHECK_SECONDS)

    def _accept(self):
        if self.problem is not None:
            LOG.info('The policy in %s is valid again and enforced',
                     self.sources())
        self.problem = None
        self._valid = (self.rules, dict(self.file_rules))
        self._looked_at = self.rules

    def _reject(self, problem):
        """Keep enforcing the last valid rules, if any, instead of the
        rules just loaded."""
        problem = '%s is not valid: %s' % (self.sources(), problem)
        if problem != self.problem and not self.quiet:
            LOG.error('The policy in %s; %s', problem,
                      'the rules loaded before it are still enforced '
                      'until it is fixed' if self._valid is not None else
                      'every request is refused (503) until it is fixed')
        self.problem = problem
        if self._valid is not None:
            self.rules, file_rules = self._valid
            self.file_rules = dict(file_rules)
        self._looked_at = self.rules

    def _load_error(self, exc):
        """What loading the files failed with, in a line."""
        for cached in list(self._file_cache.values()):
            try:
                rules = policy.parse_file_contents(cached.get('data'))
            except ValueError:
                continue        # the YAML error, which ``exc`` is
            if not isinstance(rules, dict):
                return ('it is YAML but not a mapping of rule names to '
                        'check strings')
        return 'it cannot be loaded: %s' % _one_line(exc)

    def sources(self):
        """The policy files in use, as a log line names them."""
        found = [self.policy_path or self.policy_file]
        for path in self.conf.oslo_policy.policy_dirs:
            try:
                found.append(self._get_policy_path(path))
            except cfg.ConfigFilesNotFoundError:
                continue
        return ', '.join(found)

    def set_rules(self, *args, **kwargs):
        self._forget()
        super().set_rules(*args, **kwargs)

    def clear(self):
        super().clear()     # sets no rules through set_rules: forgets
        self._checked_at = None
        self._valid = self._looked_at = self.problem = None

    def _forget(self):
        self._remembering = False
        self._decisions = {}

    def decide(self, rule, target, creds):
        """Whether ``creds`` may do ``rule`` on ``target`` (a rule out of
        scope is not allowed)."""
        self.load_rules()
        if self._valid is None and self.problem is not None:
            raise exception.ServiceUnavailable(reason=NO_VALID_POLICY)
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


def rules_problem(rules, file_rules):
    """Why ``rules`` (oslo.policy's, loaded from the files whose rules
    are ``file_rules``) cannot be enforced as written, or None: a rule of
    the files that does not parse (oslo.policy would deny it silently),
    a rule referring to one nobody defined (denied likewise) or to
    itself (every request that checks it would fail)."""
    problems = []
    for name in sorted(file_rules):
        check_str = file_rules[name].check_str
        with _parse_failures() as failures:
            _parser.parse_rule(check_str)
        if failures:
            problems.append('rule "%s" does not parse (%r)'
                            % (name, check_str))
    for name in sorted(rules):
        for missing in sorted(set(_references(rules[name])) - set(rules)):
            problems.append('rule "%s" refers to "rule:%s", which is not '
                            'defined' % (name, missing))
    for name in sorted(rules):
        if _refers_back(rules, name):
            problems.append('rule "%s" refers back to itself' % name)
    return '; '.join(problems) or None


def _references(check):
    """The names of the rules ``check`` refers to (``rule:NAME``)."""
    stack = [check]
    while stack:
        item = stack.pop()
        if isinstance(item, _checks.RuleCheck):
            yield item.match
        stack.extend(c for c in getattr(item, 'rules', None) or
                     [getattr(item, 'rule', None)]
                     if isinstance(c, _checks.BaseCheck))


def _refers_back(rules, name):
    """Whether rule ``name`` leads back to itself through the rules it
    refers to."""
    seen = set()
    stack = list(_references(rules[name]))
    while stack:
        other = stack.pop()
        if other == name:
            return True
        if other in seen or other not in rules:
            continue
        seen.add(other)
        stack.extend(_references(rules[other]))
    return False


class _ParseFailures(logging.Filter):
    """Catches oslo.policy's "Failed to understand rule" errors (with a
    traceback each) in the threads collecting them (``_parse_failures``):
    the enforcer reports the rule once itself, with the file it is in."""

    def __init__(self):
        super().__init__()
        self.local = threading.local()

    def filter(self, record):
        collected = getattr(self.local, 'collected', None)
        if collected is None:
            return True
        collected.append(record.getMessage())
        return False


_PARSER_LOG = logging.getLogger(_parser.__name__)
_PARSE_FAILURES = _ParseFailures()
_PARSER_LOG.addFilter(_PARSE_FAILURES)


@contextlib.contextmanager
def _parse_failures():
    """Collect, in this thread, oslo.policy's errors about the rules it
    cannot parse (the list given), instead of logging them."""
    outer = getattr(_PARSE_FAILURES.local, 'collected', None)
    collected = _PARSE_FAILURES.local.collected = []
    try:
        yield collected
    finally:
        _PARSE_FAILURES.local.collected = outer


def _one_line(exc):
    """``exc`` as one line.  A YAML error spans several: the text around
    the mistake (indented) is left out, and where it is kept."""
    lines = [line.strip() for line in str(exc).splitlines()
             if line.strip() and not line.startswith('    ')]
    text = _YAML_MARK.sub(r' (\1)', '\n'.join(lines)).replace('\n', '; ')
    return text or type(exc).__name__


_YAML_MARK = re.compile(r'\s*in "<unicode string>", (line \d+, column \d+):')


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


def config_problem(conf):
    """Why the policy files of ``conf`` (``[oslo_policy]policy_file`` and
    ``policy_dirs``) cannot be enforced, or None; for the API's start,
    which refuses such a file rather than fail every request.  Loads the
    rules into the enforcer of ``conf``."""
    enforcer = get_enforcer(conf)
    enforcer.quiet = True
    try:
        enforcer.load_rules(force_reload=True)
    finally:
        enforcer.quiet = False
    if enforcer.problem is None:
        return None
    return 'the policy in %s' % enforcer.problem


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
