"""The Containerfile builds one image for the three services: checked
without a builder (the suite must not need one, nor a registry) by reading
it, and tools/build-image.sh by the commands it prints with --dry-run.  The
real build, and the image's services run, are recorded in
doc/source/deployment/kolla.rst."""

import configparser
import os
import subprocess

import pytest

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


def test_base_is_a_build_arg_defaulting_to_python_slim():
    lines = _instructions()
    froms = [i for i, line in enumerate(lines) if line.startswith('FROM ')]
    assert 'ARG BASE_IMAGE=docker.io/library/python:3.11-slim' in \
        lines[:froms[0]]
    assert [lines[i] for i in froms] == ['FROM ${BASE_IMAGE} AS build',
                                         'FROM ${BASE_IMAGE}']


def test_pip_settings_of_the_build_machine_are_unset_by_default():
    # An empty PIP_INDEX_URL would be an empty index: no default at all.
    lines = _instructions()
    assert 'ARG PIP_INDEX_URL' in lines and 'ARG PIP_CERT' in lines


def test_user_and_group_ids_do_not_depend_on_the_base():
    [run] = [line for line in _instructions() if 'useradd' in line]
    assert 'groupadd --system --gid 42480 cyborg' in run
    assert '--uid 42480 --gid cyborg' in run


def _build_image(*args, **env):
    done = subprocess.run(
        [os.path.join(ROOT, 'tools', 'build-image.sh'), '--dry-run', *args],
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, **env))
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize('builder,build', [
    ('docker', 'docker build '),
    ('podman', 'podman build --isolation chroot '),
    ('buildah', 'buildah bud --isolation chroot --layers ')])
def test_build_script_commands(builder, build):
    rc, out, err = _build_image('--builder', builder, '--version', '1.2.3',
                                '--base', 'localhost/base:1', '--tag', 'x:1',
                                '--', '--no-cache')
    assert rc == 0, err
    [line] = out.splitlines()
    assert line.startswith(build)
    for arg in ('--build-arg CYBORG_VERSION=1.2.3', '-t x:1',
                '-f Containerfile', '--build-arg BASE_IMAGE=localhost/base:1',
                '--no-cache .'):
        assert arg in line


def test_build_script_local_base_and_pip_settings(tmp_path):
    cert = tmp_path / 'ca.pem'
    cert.write_text('')
    rc, out, err = _build_image('--builder', 'buildah', '--make-base',
                                '--pip-cert', str(cert),
                                '--pip-index-url', 'http://mirror/simple',
                                CYBORG_VERSION='2.0.0')
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith('mmdebstrap --variant=minbase ')
    assert 'EXTERNALLY-MANAGED' in lines[0]
    assert lines[-2] == 'buildah commit --rm CONTAINER ' \
        'localhost/cyborg-base:bookworm '
    build = lines[-1]
    for arg in ('--build-arg CYBORG_VERSION=2.0.0',
                '--build-arg BASE_IMAGE=localhost/cyborg-base:bookworm',
                '-v %s:/run/cyborg-build/pip-cert.pem:ro' % cert,
                '--build-arg PIP_CERT=/run/cyborg-build/pip-cert.pem',
                '--build-arg PIP_INDEX_URL=http://mirror/simple'):
        assert arg in build


@pytest.mark.parametrize('args,message', [
    (('--builder', 'docker', '--pip-cert', '/etc/hostname'), 'docker build'),
    (('--builder', 'kaniko'), 'docker, podman or buildah'),
    (('--pip-cert', '/nonexistent/ca.pem', '--builder', 'podman'),
     'not a readable file'),
    (('--tag',), 'needs a value'),
    (('--bogus',), 'unknown option')])
def test_build_script_refuses_bad_options(args, message):
    rc, out, err = _build_image('--version', '1', *args)
    assert rc == 2 and message in err and out == ''
