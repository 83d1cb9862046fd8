import os

import pytest

from cyborg.drivers import loader
from tests.fixtures import sysfs as fake_sysfs


@pytest.fixture
def scenario(conf, tmp_path):
    """``scenario(name)`` builds the fake host and points ``conf`` at it;
    returns the FakeSysfs tree."""

    def build(name):
        root = tmp_path / 'sys'
        tree, options = fake_sysfs.build(name, root)
        fake_sysfs.apply_options(conf, options, root, tmp_path / 'state')
        return tree

    return build


@pytest.fixture
def discovered(conf, scenario):
    """``discovered(host, driver name, prepare=None)``: the fake host
    (``prepare(tree)`` run on it first), the driver loaded as the agent
    loads it, and what it discovers: ``(tree, driver, devices)``."""

    def build(host, name, prepare=None):
        tree = scenario(host)
        if prepare is not None:
            prepare(tree)
        driver = loader.load_driver(conf, 'h', name)
        return tree, driver, driver.discover()

    return build


def one_check(driver, devices, key):
    """``([(severity, code)], counters)`` of one health check of the
    device ``key`` among ``devices`` (code '' when none)."""
    found = [r for r in driver.check_health(devices) if r.device == key]
    return sorted((r.severity, r.code or '') for r in found), \
        found[0].counters


@pytest.fixture
def in_process_privsep():
    """Run cyborg.agent.privileged functions in this process (fake trees
    need no root), as oslo.privsep allows with client mode off."""
    from cyborg.agent import privileged
    privileged.default.set_client_mode(False)
    yield privileged
    privileged.default.set_client_mode(True)


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """Fake vendor FPGA tools on PATH that log their arguments (the tools
    drive hardware this machine does not have)."""
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    log = tmp_path / 'tool.log'
    for tool in ('fpgaconf', 'xbutil'):
        script = bindir / tool
        script.write_text(f'#!/bin/sh\necho "$(basename $0) $*" >> {log}\n'
                          '[ -f "$(eval echo \\${$#})" ] || exit 3\n')
        script.chmod(0o755)
    monkeypatch.setenv('PATH', '{}:{}'.format(bindir, os.environ['PATH']))
    return log
