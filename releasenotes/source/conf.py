"""Sphinx configuration of the release notes (tox -e releasenotes)."""

project = 'cyborg release notes'
copyright = 'The cyborg developers'
extensions = ['reno.sphinxext']
source_suffix = {'.rst': 'restructuredtext'}
root_doc = 'index'
exclude_patterns = []
html_theme = 'alabaster'
html_static_path = []
