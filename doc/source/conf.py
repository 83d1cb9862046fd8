"""Sphinx configuration for the cyborg documentation.

Built by ``tox -e docs`` and by ``tests/unit/test_docs.py`` (both with
warnings as errors).  The configuration, policy and API references are
generated from the code: oslo.config's and oslo.policy's Sphinx extensions
read cyborg's entry points, and ``doc/ext/cyborg_api.py`` renders
``doc/api/openapi.json`` with the examples in ``doc/api/samples/``.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, 'ext'))

project = 'cyborg'
copyright = 'The cyborg developers'
extensions = [
    'oslo_config.sphinxext',
    'oslo_policy.sphinxext',
    'reno.sphinxext',
    'cyborg_api',
]
source_suffix = {'.rst': 'restructuredtext'}
root_doc = 'index'
exclude_patterns = ['build']
pygments_style = 'sphinx'
html_theme = 'alabaster'
html_theme_options = {
    'description': 'Accelerator management, wire-compatible with '
                   'OpenStack Cyborg',
    'page_width': '1100px',
}
html_static_path = []

# Where the API reference finds the document and its examples, relative to
# this directory.
cyborg_api_document = '../api/openapi.json'
cyborg_api_samples = '../api/samples'
