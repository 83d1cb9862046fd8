"""Golden inventories: what the agent must report for each fake host.

Regenerate after a deliberate change with::

    .venv/bin/python -m tests.unit.drivers.golden_reports

and review the diff of ``tests/unit/drivers/golden/*.json`` line by line
against the scenario's docstring in ``tests/fixtures/sysfs.py``: a golden
file is a statement of truth about that hardware, not a snapshot to accept.
"""

import json
import os
import sys
import tempfile

from oslo_config import cfg

import cyborg.conf
from cyborg.agent import reporter
from cyborg.drivers import loader
from tests.fixtures import sysfs as fake_sysfs

GOLDEN_DIR = os.path.join(os.path.dirname(__file__), 'golden')


def golden_path(name):
    return os.path.join(GOLDEN_DIR, name + '.json')


def load_golden(name):
    with open(golden_path(name)) as f:
        return json.load(f)


def inventory_json(devices):
    """The canonical form compared with golden files."""
    return [d.to_dict() for d in sorted(devices, key=lambda d: d.key())]


def discover(conf, host=fake_sysfs.HOST):
    drivers = loader.load_drivers(conf, host)
    return reporter.Reporter(conf, host, drivers,
                             conductor_api=object()).discover()


def scenario_inventory(name, workdir):
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[],
         default_config_dirs=[])
    _tree, options = fake_sysfs.build(name, os.path.join(workdir, 'sys'))
    fake_sysfs.apply_options(conf, options, os.path.join(workdir, 'sys'),
                             os.path.join(workdir, 'state'))
    return inventory_json(discover(conf))


def main():
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    for name in sorted(fake_sysfs.SCENARIOS):
        with tempfile.TemporaryDirectory() as workdir:
            report = scenario_inventory(name, workdir)
        with open(golden_path(name), 'w') as f:
            json.dump(report, f, indent=1, sort_keys=True)
            f.write('\n')
        print('%s: %d device(s)' % (name, len(report)), file=sys.stderr)


if __name__ == '__main__':
    main()
