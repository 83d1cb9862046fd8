"""Loads the drivers named in ``[agent]enabled_drivers``: through stevedore,
namespace ``cyborg.accelerator.driver``, and no other way."""

from oslo_log import log as logging
from stevedore import driver as stevedore_driver

from cyborg.common import exception

NAMESPACE = 'cyborg.accelerator.driver'

LOG = logging.getLogger(__name__)


def load_driver(conf, host, name):
    """One driver instance by entry point name; a clear error if unknown."""
    try:
        manager = stevedore_driver.DriverManager(
            NAMESPACE, name, invoke_on_load=True,
            invoke_args=(conf, host))
    except Exception as exc:
        raise exception.InvalidParameterValue(
            err=f'Cannot load accelerator driver {name!r} from [agent]'
                f'enabled_drivers: {exc}') from exc
    driver = manager.driver
    driver.name = name
    return driver


def load_drivers(conf, host):
    """``{name: driver}`` for ``[agent]enabled_drivers``, in that order."""
    drivers = {}
    for name in conf.agent.enabled_drivers:
        name = name.strip()
        if name and name not in drivers:
            drivers[name] = load_driver(conf, host, name)
            LOG.info('Loaded accelerator driver %s', name)
    if not drivers:
        LOG.warning('No accelerator driver is enabled ([agent]'
                    'enabled_drivers): this host reports no devices.')
    return drivers
