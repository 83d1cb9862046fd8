"""Only a valid policy file is enforced, with the real oslo.policy
enforcer and real files: the API refuses to start on an invalid one
(``policy.config_problem``), and a file changed at run time into an
invalid one leaves the rules loaded before it in force, with an error in
the log naming the file and the problem, instead of failing every
request (doc/source/reference/policy.rst)."""

import logging
import os

import pytest
import webob

from cyborg.common import context
from cyborg.common import exception
from cyborg.common import policy
from tests.fixtures import api as api_fixture

# Readers may list devices (the default is admins only).
VALID = '"cyborg:device:get_all": "role:reader"\n'
# (text, what the problem names): each also denies the readers, which
# would be seen if its rules were enforced.
INVALID = {
    'not YAML': ('"cyborg:device:get_all": [role:admin\n',
                 "it cannot be loaded: while parsing a flow sequence "
                 "(line 1, column 26); expected ',' or ']'"),
    'not a mapping': ('- "cyborg:device:get_all"\n- "!"\n',
                      'not a mapping of rule names to check strings'),
    'a rule that does not parse': (
        '"cyborg:device:get_all": "role:admin and (role:x"\n',
        'rule "cyborg:device:get_all" does not parse '
        "('role:admin and (role:x')"),
    'a check without a kind': (
        '"cyborg:device:get_all": "role admin"\n',
        'rule "cyborg:device:get_all" does not parse'),
    'an undefined rule': (
        '"cyborg:device:get_all": "rule:admins"\n',
        'rule "cyborg:device:get_all" refers to "rule:admins", which is '
        'not defined'),
    'a rule referring to itself': (
        '"cyborg:device:get_all": "rule:readers"\n'
        '"readers": "role:reader and rule:readers"\n',
        'rule "readers" refers back to itself'),
}


@pytest.fixture
def policy_file(conf, tmp_path, monkeypatch):
    """A policy file ``conf`` uses (written by the test), looked at
    every 0.1 s."""
    monkeypatch.setattr(policy, 'RELOAD_CHECK_SECONDS', 0.1)
    path = tmp_path / 'policy.yaml'
    path.write_text(VALID)
    policy.reset()
    policy.get_enforcer(conf)  # registers [oslo_policy]
    conf.set_override('policy_file', str(path), group='oslo_policy')
    policy.reset()
    yield path
    policy.reset()


def _rewrite(path, text, enforcer):
    """Change the file and make sure the enforcer looks at it now."""
    stamp = os.stat(path).st_mtime
    path.write_text(text)
    os.utime(path, (stamp + 5, stamp + 5))  # a new time, however coarse
    enforcer._checked_at = None


def _reader():
    return context.RequestContext(project_id='p1', user_id='u',
                                  roles=['reader'])


def test_a_valid_file_and_no_file_are_no_problem(conf, policy_file):
    assert policy.config_problem(conf) is None
    conf.set_override('policy_file', str(policy_file) + '.absent',
                      group='oslo_policy')
    policy.reset()
    assert policy.config_problem(conf) is None


@pytest.mark.parametrize('kind', sorted(INVALID))
def test_the_start_refuses_an_invalid_file_naming_it_and_the_problem(
        conf, policy_file, kind):
    text, problem = INVALID[kind]
    policy_file.write_text(text)
    found = policy.config_problem(conf)
    assert found.startswith('the policy in %s is not valid: ' % policy_file)
    assert problem in found
    assert '\n' not in found


@pytest.mark.parametrize('kind', sorted(INVALID))
def test_an_invalid_change_keeps_the_last_valid_rules(
        conf, policy_file, kind, caplog):
    text, problem = INVALID[kind]
    reader = _reader()
    policy.authorize(conf, reader, 'cyborg:device:get_all')
    enforcer = policy.get_enforcer(conf)
    _rewrite(policy_file, text, enforcer)
    with caplog.at_level(logging.INFO, logger=policy.__name__):
        for _ in range(3):
            # The rules of VALID, not an error, not the new file's.
            policy.authorize(conf, reader, 'cyborg:device:get_all')
            enforcer._checked_at = None
    errors = [r.getMessage() for r in caplog.records
              if r.levelno == logging.ERROR]
    # Once per change, naming the file and the problem.
    assert len(errors) == 1, errors
    assert str(policy_file) in errors[0] and problem in errors[0]
    assert 'the rules loaded before it are still enforced' in errors[0]
    assert problem in enforcer.problem
    # The other rules are still their defaults.
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, reader, 'cyborg:device:enable')

    # Fixed: the new valid rules take effect.
    _rewrite(policy_file, '"cyborg:device:get_all": "role:admin"\n',
             enforcer)
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, reader, 'cyborg:device:get_all')
    assert enforcer.problem is None


def test_with_no_valid_rules_yet_every_decision_is_a_503(conf, policy_file,
                                                         caplog):
    """The file changed into an invalid one before the first request
    (after the start's check): nothing valid to keep."""
    policy_file.write_text(INVALID['an undefined rule'][0])
    with pytest.raises(exception.ServiceUnavailable) as info:
        policy.authorize(conf, _reader(), 'cyborg:device:get_all')
    assert 'the policy file is not valid' in str(info.value)
    assert str(policy_file) in caplog.text


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        yield service


@pytest.mark.parametrize('kind', ['not YAML', 'a rule referring to itself'])
def test_the_api_answers_by_the_last_valid_rules(service, tmp_path,
                                                 monkeypatch, kind):
    """Through the API: no request fails (it did, 500, for a file that
    is not YAML and for a rule referring to itself)."""
    monkeypatch.setattr(policy, 'RELOAD_CHECK_SECONDS', 0.1)
    path = tmp_path / 'policy.yaml'
    path.write_text(VALID)
    policy.reset()
    policy.get_enforcer(service.conf)  # registers [oslo_policy]
    service.conf.set_override('policy_file', str(path),
                              group='oslo_policy')
    policy.reset()
    headers = {'X-Roles': 'reader', 'X-Project-Id': 'p1',
               'X-User-Id': 'u'}
    try:
        for text in (VALID, INVALID[kind][0]):
            _rewrite(path, text, policy.get_enforcer(service.conf))
            resp = webob.Request.blank('/v2/devices',
                                       headers=headers).get_response(
                service.app)
            assert resp.status_int == 200, resp.text
    finally:
        service.conf.clear_override('policy_file', group='oslo_policy')
        policy.reset()
