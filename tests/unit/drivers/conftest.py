import pytest

from cyborg.drivers import loader
from tests.fixtures import privsep as fake_privsep
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
def in_process_privsep(conf):
    """Run cyborg.agent.privileged functions in this process (fake trees
    need no root), reading ``conf`` as the daemon reads its own."""
    with fake_privsep.in_process(conf) as privileged:
        yield privileged


@pytest.fixture
def fake_tools(conf, tmp_path):
    """Fake vendor FPGA tools that log their arguments (the tools drive
    hardware this machine does not have), in the one directory the
    privileged helper looks in; returns the log's path."""
    log = tmp_path / 'tool.log'
    fake_privsep.fake_fpga_tools(conf, tmp_path / 'bin', log)
    return log
