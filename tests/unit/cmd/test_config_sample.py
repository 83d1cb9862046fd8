"""The committed etc/cyborg/cyborg.conf.sample lists every option."""

import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                    os.pardir)
GENERATOR_CONF = os.path.join(ROOT, 'etc', 'cyborg',
                              'cyborg-config-generator.conf')
SAMPLE = os.path.join(ROOT, 'etc', 'cyborg', 'cyborg.conf.sample')


def test_sample_config_is_current(tmp_path):
    fresh = tmp_path / 'cyborg.conf.sample'
    # A process of its own: libraries' option defaults are module state
    # that other tests in this process may have changed.
    subprocess.run([sys.executable, '-m', 'oslo_config.generator',
                    '--config-file', GENERATOR_CONF,
                    '--output-file', str(fresh)],
                   check=True, capture_output=True, timeout=120)
    with open(SAMPLE) as f:
        committed = f.read()
    assert fresh.read_text() == committed, (
        'etc/cyborg/cyborg.conf.sample is out of date: regenerate it with '
        '"tools/gen-samples.sh" (or "tox -e genconfig") and commit it.')


def test_sample_has_the_groups_operators_set():
    with open(SAMPLE) as f:
        sample = f.read()
    for group in ('DEFAULT', 'api', 'database', 'agent', 'placement', 'nova',
                  'glance', 'service_user', 'keystone_authtoken',
                  'oslo_messaging_rabbit', 'oslo_policy'):
        assert '\n[%s]\n' % group in '\n' + sample, group
    for option in ('#transport_url =', '#periodic_interval =', '#host =',
                   '#api_workers =', '#public_endpoint =', '#auth_strategy',
                   '#enabled_drivers =', '#resource_provider_name =',
                   '#sysfs_root =', '#graceful_shutdown_timeout ='):
        assert option in sample, option


def _sample_sections():
    with open(SAMPLE) as f:
        return [line.strip()[1:-1] for line in f
                if line.startswith('[') and line.strip().endswith(']')]


def test_sample_documents_the_section_the_agent_reads_for_privsep():
    from cyborg.agent import privileged
    sections = _sample_sections()
    assert privileged.default.cfg_section in sections
    # oslo.privsep's own default section name is read by nobody here.
    assert 'privsep' not in sections


def test_sample_shows_the_real_database_default():
    from oslo_config import cfg

    import cyborg.conf
    with open(SAMPLE) as f:
        documented = [line.split('=', 1)[1].strip() for line in f
                      if line.startswith('#connection =')]
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[],
         default_config_dirs=[])
    assert documented[0] == 'sqlite:///$state_path/cyborg.sqlite'
    assert conf.database.connection == 'sqlite:////var/lib/cyborg/cyborg.sqlite'
    conf.set_override('state_path', '/srv/cyborg')
    assert conf.database.connection == 'sqlite:////srv/cyborg/cyborg.sqlite'
