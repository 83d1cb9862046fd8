"""The Containerfile builds one image for the three services: checked
without docker (the suite must not need it) by reading it."""

import configparser
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir, os.pardir))


def _instructions():
    with open(os.path.join(ROOT, 'Containerfile')) as f:
        text = f.read().replace('\\\n', ' ')
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith('#')]


def _console_scripts():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, 'setup.cfg'))
    return {line.split('=')[0].strip() for line in
            parser['entry_points']['console_scripts'].strip().splitlines()}


def test_default_command_is_a_console_script_and_no_entrypoint():
    lines = _instructions()
    [cmd] = [line for line in lines if line.startswith('CMD ')]
    assert cmd == 'CMD ["cyborg-api"]'
    assert 'cyborg-api' in _console_scripts()
    # No ENTRYPOINT: "run IMAGE cyborg-agent" picks the service.
    assert not [line for line in lines if line.startswith('ENTRYPOINT')]


def test_services_only_config_from_etc_cyborg_state_in_var_lib():
    lines = _instructions()
    installs = [line for line in lines if 'pip install' in line]
    assert installs and all('[aio]' not in line and 'placement' not in line
                            for line in installs)
    assert 'ENV OS_CYBORG_CONFIG_DIR=/etc/cyborg PYTHONUNBUFFERED=1' in lines
    assert 'VOLUME ["/var/lib/cyborg"]' in lines
    assert 'USER cyborg' in lines
    # What the build copies is there (and .git is not needed: PBR_VERSION).
    for name in ('requirements.txt', 'setup.cfg', 'setup.py'):
        assert os.path.exists(os.path.join(ROOT, name))
    assert any(line.startswith('ENV PBR_VERSION=') for line in lines)
