"""Configuration: one module per option group, all registered on ``CONF``.

Code receives ``CONF`` (or a ConfigOpts) and reads options when it needs
them; no option is read at import time.

Where configuration comes from: the ``--config-file`` and ``--config-dir``
arguments; without them, the files named in ``OS_CYBORG_CONFIG`` (comma
separated); without that, ``cyborg.conf`` and the ``*.conf`` files of
``cyborg.conf.d`` in the configuration directory: ``OS_CYBORG_CONFIG_DIR``,
by default ``/etc/cyborg``.  Nothing else: unlike oslo.config's default
search, never the home directory or ``/etc/cyborg.conf``, so a container
that mounts ``/etc/cyborg`` sees exactly what it was given.  The policy
file (``[oslo_policy]policy_file``, ``policy.yaml``) is looked up beside
the config files read.
"""

import os

from oslo_config import cfg

from cyborg.conf import agent
from cyborg.conf import api
from cyborg.conf import conductor
from cyborg.conf import database
from cyborg.conf import default
from cyborg.conf import fabric
from cyborg.conf import glance
from cyborg.conf import health
from cyborg.conf import metrics
from cyborg.conf import nova
from cyborg.conf import placement
from cyborg.conf import privsep
from cyborg.conf import quota
from cyborg.conf import service_user
from cyborg.conf import upgrade_levels

CONF = cfg.CONF

CONFIG_DIR = '/etc/cyborg'
CONFIG_ENV = 'OS_CYBORG_CONFIG'
CONFIG_DIR_ENV = 'OS_CYBORG_CONFIG_DIR'

_MODULES = (default, api, conductor, database, agent, placement, nova,
            glance, service_user, health, metrics, privsep, fabric,
            quota, upgrade_levels)


def register_opts(conf):
    for module in _MODULES:
        module.register_opts(conf)


register_opts(CONF)


def default_config_files(environ=None):
    """The config files read when the command line names none."""
    environ = os.environ if environ is None else environ
    named = [f.strip() for f in environ.get(CONFIG_ENV, '').split(',')
             if f.strip()]
    if named:
        # A missing one is an error (oslo.config says which), not skipped.
        return named
    path = os.path.join(config_dir(environ), 'cyborg.conf')
    return [path] if os.path.isfile(path) else []


def default_config_dirs(environ=None):
    """The config directories read when the command line names none."""
    environ = os.environ if environ is None else environ
    if environ.get(CONFIG_ENV, '').strip():
        return []
    path = os.path.join(config_dir(environ), 'cyborg.conf.d')
    return [path] if os.path.isdir(path) else []


def config_dir(environ=None):
    """``OS_CYBORG_CONFIG_DIR``, else ``/etc/cyborg``."""
    environ = os.environ if environ is None else environ
    return environ.get(CONFIG_DIR_ENV, '').strip() or CONFIG_DIR


def parse_args(conf, argv, prog=None):
    """Parse ``argv`` and the config files into ``conf``; ``--version``
    prints cyborg's version.

    Every value of cyborg's options is checked here, so a bad one (a port
    out of range, an unknown choice) fails at start, not on first use;
    oslo.config's ``cfg.Error`` says which (see ``check_values``).
    """
    from cyborg import version
    conf(argv, project='cyborg', prog=prog,
         version=version.version_string(),
         default_config_files=default_config_files(),
         default_config_dirs=default_config_dirs())
    check_values(conf)
    return conf


def check_values(conf):
    """Read every cyborg option once: oslo.config checks a value (type,
    range, choices) only when it is read."""
    from cyborg.conf import opts as cyborg_opts
    for group, group_opts in cyborg_opts.list_opts():
        try:
            section = conf if group == 'DEFAULT' else conf[group]
        except cfg.NoSuchOptError:
            continue    # a library's group, registered where it is used
        for opt in group_opts:
            try:
                getattr(section, opt.dest)
            except cfg.NoSuchOptError:
                pass    # listed for the sample, registered where used
