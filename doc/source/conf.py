"""Sphinx configuration for the cyborg documentation (tox -e docs)."""

project = 'cyborg'
copyright = 'The cyborg developers'
extensions = []
source_suffix = '.rst'
master_doc = 'index'
exclude_patterns = ['build']
html_theme = 'alabaster'
