"""WSGI entry point for uWSGI, mod_wsgi or gunicorn.

``application`` is built on first use from the usual config files, or from
the files named in ``OS_CYBORG_CONFIG`` (comma separated).
"""

import os
import threading

from oslo_log import log

import cyborg.conf
from cyborg.api import app as api_app
from cyborg.db import api as db_api

_LOCK = threading.Lock()
_APPLICATION = None


def init_application(argv=None):
    """Parse config, set up logging and the database; return the app."""
    conf = cyborg.conf.CONF
    files = [f for f in os.environ.get('OS_CYBORG_CONFIG', '').split(',')
             if f]
    log.register_options(conf)
    conf(argv if argv is not None else [], project='cyborg',
         default_config_files=files or None)
    log.setup(conf, 'cyborg')
    db_api.configure(conf, wait_for_database=False)
    return api_app.build_app(conf)


def _get():
    global _APPLICATION
    with _LOCK:
        if _APPLICATION is None:
            _APPLICATION = init_application()
        return _APPLICATION


def application(environ, start_response):
    """The WSGI callable; builds the real app on its first request."""
    return _get()(environ, start_response)
