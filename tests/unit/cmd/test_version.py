"""Every console script answers --version with cyborg's version, the API
root document carries it, and so do the start-up log lines."""

import configparser
import os
import subprocess
import sys

import webob

from cyborg import version
from cyborg.api import app as api_app
from tests.fixtures import api as api_fixture

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                    os.pardir)


def _console_scripts():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, 'setup.cfg'))
    lines = parser['entry_points']['console_scripts'].strip().splitlines()
    return [line.split('=')[0].strip() for line in lines]


def test_the_version_is_the_installed_one():
    assert version.version_string() not in ('', 'unknown')


def test_every_console_script_prints_the_version():
    scripts = _console_scripts()
    assert 'cyborg-wsgi-api' in scripts and 'cyborg-api' in scripts
    for script in scripts:
        done = subprocess.run([os.path.join(sys.prefix, 'bin', script),
                               '--version'], capture_output=True,
                              text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (script, done.stderr)
        printed = (done.stdout + done.stderr).strip().splitlines()
        assert printed[-1] == version.version_string(), (script, printed)


def test_the_root_document_carries_the_version():
    app = api_app.build_app(api_fixture.make_conf())
    doc = webob.Request.blank('/').get_response(app).json
    assert doc['service_version'] == version.version_string()
    # Cyborg's own keys are all still there, unchanged.
    assert doc['name'] == 'OpenStack Cyborg API'
    assert doc['versions'][0]['id'] == 'v2'
    assert doc['default_version'] == doc['versions'][0]
