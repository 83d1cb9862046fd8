"""The version of the installed cyborg, as pbr wrote it into the package
metadata (``git describe`` style for a development checkout)."""

import functools
import importlib.metadata


@functools.cache
def version_string():
    try:
        return importlib.metadata.version('cyborg')
    except importlib.metadata.PackageNotFoundError:
        # A source tree imported without being installed.
        return 'unknown'
