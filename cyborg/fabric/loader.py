"""Fabric drivers by name, from the ``cyborg.fabric.driver`` entry points
(the same way the agent finds its drivers), one instance per name and
configuration."""

import threading

from stevedore import driver as stevedore_driver
from stevedore import exception as stevedore_exc
from stevedore import extension

from cyborg.common import exception

NAMESPACE = 'cyborg.fabric.driver'

_LOADED = {}
_LOCK = threading.Lock()


def names():
    """The fabric drivers installed, sorted."""
    return sorted(extension.ExtensionManager(NAMESPACE).entry_points_names())


def get(conf, name):
    """The driver named ``name`` for ``conf``; 400 (Invalid) when no such
    driver is installed."""
    key = (id(conf), name)
    with _LOCK:
        loaded = _LOADED.get(key)
        if loaded is not None and loaded.conf is conf:
            return loaded
        try:
            loaded = stevedore_driver.DriverManager(
                NAMESPACE, name, invoke_on_load=True,
                invoke_args=(conf,)).driver
        except stevedore_exc.NoMatches:
            raise exception.Invalid(
                reason='fabric_driver: no fabric driver named %r is '
                       'installed (installed: %s)' % (
                           name, ', '.join(names()) or 'none'))
        _LOADED[key] = loaded
        return loaded
