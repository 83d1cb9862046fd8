"""cyborg-api refuses to start with a policy file it cannot enforce (exit
status 2 and one line naming the file and the problem), rather than
answer 500, or deny silently, at every request."""

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize('text, says', [
    ('"admin": [role:admin\n', 'it cannot be loaded: while parsing a '
                               'flow sequence (line 1, column 10)'),
    ('"admin": "role admin"\n', 'rule "admin" does not parse'),
    ('"admin": "rule:admins"\n', 'rule "admin" refers to "rule:admins", '
                                 'which is not defined'),
])
def test_an_invalid_policy_file_stops_the_api_at_start(tmp_path, text,
                                                       says):
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text(text)
    config = tmp_path / 'cyborg.conf'
    # An address of no host: without the check it exits, failing to
    # listen, rather than serve.
    config.write_text('[api]\nhost_ip = 192.0.2.1\nauth_strategy = noauth\n'
                      '[oslo_policy]\npolicy_file = %s\n' % policy_file)
    result = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-api'), '--config-file',
         str(config)], capture_output=True, text=True, timeout=60,
        env=dict(os.environ, OS_CYBORG_CONFIG_DIR=str(tmp_path / 'none')))
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, output
    assert output.startswith('cyborg-api: configuration error: the policy '
                             'in %s is not valid: ' % policy_file), output
    assert output.count('\n') == 0, output
    assert says in output
