"""A configuration that cannot work stops a process at start with one
line saying why (exit status 2), not a traceback and not a server that
answers 500 to every request."""

import os
import subprocess
import sys

import pytest

SCRIPTS = ('cyborg-api', 'cyborg-conductor', 'cyborg-agent')


def _run(script, tmp_path, text):
    config = tmp_path / 'cyborg.conf'
    config.write_text(text)
    result = subprocess.run(
        [os.path.join(sys.prefix, 'bin', script), '--config-file',
         str(config)],
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, OS_CYBORG_CONFIG_DIR=str(tmp_path / 'none')))
    return result.returncode, (result.stdout + result.stderr).strip()


@pytest.mark.parametrize('script', SCRIPTS)
@pytest.mark.parametrize('text, says', [
    ('[api]\nport = 99999\n', 'Value for option port from %(config)s is '
                              'not valid: Should be less than or equal to '
                              '65535'),
    ('[api]\nauth_strategy = bogus\n', "but found 'bogus'"),
    ('[health]\ncheck_interval = soon\n', 'check_interval'),
])
def test_a_bad_value_is_one_line(tmp_path, script, text, says):
    rc, output = _run(script, tmp_path, text)
    assert rc == 2, output
    assert output.count('\n') == 0, output
    assert output.startswith('%s: configuration error: ' % script)
    assert says % {'config': tmp_path / 'cyborg.conf'} in output


def test_a_missing_file_is_one_line(tmp_path):
    result = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-conductor'),
         '--config-file', str(tmp_path / 'missing.conf')],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        'cyborg-conductor: configuration error: Failed to find some config '
        'files: %s' % (tmp_path / 'missing.conf'))


def test_keystone_without_credentials_refuses_to_start(tmp_path):
    rc, output = _run('cyborg-api', tmp_path,
                      '[api]\nauth_strategy = keystone\nport = 1\n')
    assert rc == 2, output
    assert output == (
        'cyborg-api: configuration error: [api]auth_strategy is keystone '
        'but [keystone_authtoken] has no auth_type (and the credentials it '
        'goes with): set them, as the install guide shows, or use '
        'auth_strategy = noauth to try cyborg out')


@pytest.mark.parametrize('script', ('cyborg-api', 'cyborg-conductor'))
@pytest.mark.parametrize('text, says', [
    ('[quota]\ndriver = unified_limits\n',
     '[oslo_limit] has no auth_type'),
    ('[quota]\ndriver = unified_limits\n[oslo_limit]\nauth_type = password\n',
     '[oslo_limit] names no endpoint'),
    ('[quota]\ndriver = keystone\n', "but found 'keystone'"),
])
def test_unified_limits_without_what_they_need_refuse_to_start(
        tmp_path, script, text, says):
    rc, output = _run(script, tmp_path,
                      text + '[api]\nport = 1\nauth_strategy = noauth\n')
    assert rc == 2, output
    assert output.count('\n') == 0, output
    assert output.startswith('%s: configuration error: ' % script)
    assert says in output
