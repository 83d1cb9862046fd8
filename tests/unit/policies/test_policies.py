"""The policy rules: names and defaults of doc/source/contract.rst
("Policy defaults"), enforcement
with secure-RBAC defaults, and the committed sample kept current."""

import os
import subprocess
import sys
import time

from oslo_policy import policy as oslo_policy
import pytest

from cyborg.common import context
from cyborg.common import exception
from cyborg.common import policy
from cyborg import policies
from tests.fixtures import recording_http

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

DOCUMENTED_RULES = {
    'cyborg:arq:%s' % a for a in ('get_all', 'get_one', 'create', 'update',
                                  'delete', 'allocate')
} | {
    'cyborg:device_profile:%s' % a for a in ('get_all', 'get_one', 'create',
                                             'delete')
} | {
    'cyborg:device:%s' % a for a in ('get_all', 'get_one', 'enable',
                                      'disable')
} | {
    'cyborg:deployable:%s' % a for a in ('get_all', 'get_one', 'program')
} | {
    'cyborg:attribute:%s' % a for a in ('get_all', 'get_one', 'create',
                                         'delete')
} | {
    'cyborg:remote_pool:%s' % a for a in ('get_all', 'get_one', 'create',
                                           'delete')
} | {
    'cyborg:export:%s' % a for a in ('resource_slices', 'gres_conf')
} | {'cyborg:quota:get'}


def test_rule_names_are_the_contract_s():
    names = {r.name for r in policies.list_rules()
             if r.name.startswith('cyborg:')}
    assert names == DOCUMENTED_RULES


def test_every_api_rule_is_documented_and_project_scoped():
    for rule in policies.list_rules():
        if rule.name.startswith('cyborg:'):
            assert rule.description and rule.operations, rule.name
            assert rule.scope_types == ['project'], rule.name


def _ctx(roles, project='p1', service=False):
    return context.RequestContext(project_id=project, user_id='u',
                                  roles=roles, is_service=service)


@pytest.mark.parametrize('rule, roles, service, allowed', [
    ('cyborg:arq:get_all', ['reader'], False, True),
    ('cyborg:arq:get_all', [], False, False),
    ('cyborg:arq:create', ['reader'], False, False),
    ('cyborg:arq:create', ['member'], False, True),
    ('cyborg:arq:create', [], True, True),
    ('cyborg:arq:update', ['admin'], False, True),
    ('cyborg:device_profile:create', ['member'], False, False),
    ('cyborg:device_profile:create', ['admin'], False, True),
    ('cyborg:device:get_all', ['member'], False, False),
    ('cyborg:device:get_all', ['manager'], False, True),
    ('cyborg:device:disable', ['manager'], False, False),
    ('cyborg:deployable:program', ['admin'], False, True),
    ('cyborg:attribute:get_one', ['reader'], False, False),
    # The service role passes the service rule without a service token
    # (Cyborg's role:service), as a service token does without the role.
    ('cyborg:arq:get_all', ['service'], False, True),
    ('cyborg:arq:get_one', ['service'], False, True),
    ('cyborg:arq:create', ['service'], False, True),
    ('cyborg:arq:update', ['service'], False, True),
    ('cyborg:arq:delete', ['service'], False, True),
    ('cyborg:arq:delete', [], True, True),
    ('cyborg:device_profile:get_one', ['service'], False, True),
    ('cyborg:device_profile:create', ['service'], True, False),
    ('cyborg:device:get_all', ['service'], True, False),
    ('cyborg:deployable:get_one', ['service'], False, False),
    ('cyborg:attribute:create', ['service'], True, False),
    ('cyborg:quota:get', ['reader'], False, True),
    ('cyborg:quota:get', [], True, False),
    ('cyborg:quota:get', ['service'], False, False),
    ('cyborg:quota:get', ['admin'], False, True),
])
def test_defaults(conf, rule, roles, service, allowed):
    ctx = _ctx(roles, service=service)
    if allowed:
        policy.authorize(conf, ctx, rule)
    else:
        with pytest.raises(exception.PolicyNotAuthorized) as info:
            policy.authorize(conf, ctx, rule)
        assert str(info.value) == (
            'Access was denied to the following resource: %s' % rule)


def test_reader_of_another_project_is_denied(conf):
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, _ctx(['reader'], 'p1'), 'cyborg:arq:get_one',
                         {'project_id': 'p2'})


def test_quota_of_another_project_is_denied_to_its_non_readers(conf):
    target = {'project_id': 'p2'}
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, _ctx(['member', 'reader'], 'p1'),
                         'cyborg:quota:get', target)
    policy.authorize(conf, _ctx(['reader'], 'p2'), 'cyborg:quota:get',
                     target)
    policy.authorize(conf, _ctx(['admin'], 'p1'), 'cyborg:quota:get',
                     target)


def _project_rules():
    """The rules a project's reader, member or manager may pass."""
    return sorted(r.name for r in policies.operation_rules()
                  if 'project_' in r.check_str)


@pytest.mark.parametrize('rule', _project_rules())
@pytest.mark.parametrize('project', [None, ''])
def test_a_caller_without_a_project_passes_no_project_rule(conf, rule,
                                                           project):
    """noauth without X-Project-Id: no project, so no project's rule.  It
    passed them all (oslo.policy compared the missing owner of the
    target, its own project, with its missing project: 'None' ==
    'None')."""
    ctx = _ctx(['manager', 'member', 'reader'], project)
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, ctx, rule)


@pytest.mark.parametrize('target', [None, {'project_id': None},
                                    {'project_id': 'None'},
                                    {'project_id': ''}])
def test_a_caller_without_a_project_reads_no_projects_quota(conf, target):
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, _ctx(['reader'], None), 'cyborg:quota:get',
                         target)


@pytest.mark.parametrize('roles, service', [
    (['admin'], False), (['service'], False), ([], True)])
def test_admins_and_services_need_no_project(conf, roles, service):
    """What the noauth all-in-one's operator and a service without a
    project may still do: the rules that name no project."""
    ctx = _ctx(roles, None, service)
    policy.authorize(conf, ctx, 'cyborg:arq:get_all')
    policy.authorize(conf, ctx, 'cyborg:arq:create')
    policy.authorize(conf, ctx, 'cyborg:arq:allocate')
    if roles == ['admin']:
        policy.authorize(conf, ctx, 'cyborg:device:get_all')
        policy.authorize(conf, ctx, 'cyborg:quota:get',
                         {'project_id': 'p2'})


def test_new_defaults_are_enforced(conf):
    policy.get_enforcer(conf)
    assert conf.oslo_policy.enforce_new_defaults is True


def test_system_scoped_admin_is_refused(conf):
    ctx = context.RequestContext(system_scope='all', roles=['admin'],
                                 user_id='u')
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, ctx, 'cyborg:device:get_all')


def test_sample_file_is_current(tmp_path):
    """etc/cyborg/policy.yaml.sample is what the generator makes now
    (regenerate: oslopolicy-sample-generator --config-file
    etc/cyborg/cyborg-policy-generator.conf)."""
    out = tmp_path / 'policy.yaml.sample'
    generator = os.path.join(os.path.dirname(sys.executable),
                             'oslopolicy-sample-generator')
    subprocess.run([generator, '--config-file',
                    'etc/cyborg/cyborg-policy-generator.conf',
                    '--output-file', str(out)], cwd=ROOT, check=True,
                   capture_output=True)
    with open(os.path.join(ROOT, 'etc/cyborg/policy.yaml.sample')) as f:
        assert f.read() == out.read_text()


def test_a_changed_policy_file_takes_effect_within_the_reload_check(
        conf, tmp_path, monkeypatch):
    """Policy files are looked at no more than once per
    RELOAD_CHECK_SECONDS, and a change is picked up after that, without a
    restart."""
    monkeypatch.setattr(policy, 'RELOAD_CHECK_SECONDS', 0.2)
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text('"cyborg:device:get_all": "role:admin"\n')
    policy.reset()
    policy.get_enforcer(conf)  # registers [oslo_policy]
    conf.set_override('policy_file', str(policy_file), group='oslo_policy')
    policy.reset()
    reader = _ctx(['reader'], 'p1')
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, reader, 'cyborg:device:get_all')
    policy_file.write_text('"cyborg:device:get_all": "role:reader"\n')
    # Make sure the modification time differs, however coarse the clock.
    stat = os.stat(policy_file)
    os.utime(policy_file, (stat.st_atime, stat.st_mtime + 5))
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, reader, 'cyborg:device:get_all')
    time.sleep(0.3)
    policy.authorize(conf, reader, 'cyborg:device:get_all')
    policy.reset()


def test_remembered_decisions_follow_target_and_credentials(conf):
    """Decisions are remembered per rule, target and credentials: asking
    again, in any order, gives each its own answer."""
    reader, member = _ctx(['reader'], 'p1'), _ctx(['member', 'reader'], 'p1')
    for _ in range(3):
        policy.authorize(conf, reader, 'cyborg:arq:get_one',
                         {'project_id': 'p1'})
        with pytest.raises(exception.PolicyNotAuthorized):
            policy.authorize(conf, reader, 'cyborg:arq:get_one',
                             {'project_id': 'p2'})
        with pytest.raises(exception.PolicyNotAuthorized):
            policy.authorize(conf, reader, 'cyborg:arq:create')
        policy.authorize(conf, member, 'cyborg:arq:create')
        with pytest.raises(exception.PolicyNotAuthorized):
            policy.authorize(conf, _ctx(['member', 'reader'], 'p2'),
                             'cyborg:arq:get_one', {'project_id': 'p1'})


def test_rules_set_anew_are_used_at_once(conf):
    """No decision outlives the rules it was made under."""
    reader = _ctx(['reader'], 'p1')
    policy.authorize(conf, reader, 'cyborg:arq:get_all')
    enforcer = policy.get_enforcer(conf)
    enforcer.set_rules(oslo_policy.Rules.from_dict(
        {'cyborg:arq:get_all': '!'}), overwrite=False, use_conf=False)
    with pytest.raises(exception.PolicyNotAuthorized):
        policy.authorize(conf, reader, 'cyborg:arq:get_all')
    policy.reset()


def test_an_http_check_is_asked_every_time(conf, tmp_path):
    """An operator's rule that asks a server (``http:``) is evaluated at
    every request: its answer may change at any time."""
    answer = {'text': b'True'}
    with recording_http.RecordingServer(
            lambda request: (200, {}, answer['text'])) as server:
        policy_file = tmp_path / 'policy.yaml'
        policy_file.write_text('"cyborg:device:get_all": "http:%s/check"\n'
                               % server.url.replace('http:', '', 1))
        policy.reset()
        policy.get_enforcer(conf)  # registers [oslo_policy]
        conf.set_override('policy_file', str(policy_file),
                          group='oslo_policy')
        policy.reset()
        reader = _ctx(['reader'], 'p1')
        for _ in range(3):
            policy.authorize(conf, reader, 'cyborg:device:get_all')
        assert len(server.requests) == 3
        answer['text'] = b'False'
        with pytest.raises(exception.PolicyNotAuthorized):
            policy.authorize(conf, reader, 'cyborg:device:get_all')
        # The other rules are still decided as their defaults say.
        policy.authorize(conf, reader, 'cyborg:arq:get_all')
    policy.reset()
