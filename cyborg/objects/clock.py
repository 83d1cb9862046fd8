"""The database server's time, which the API and the conductor share
(``cyborg.common.clock``): ``reference.now()``, measured and kept by the
database layer (``cyborg.db.api.clock``), which stamps rows by it too."""

from cyborg.db.api import clock as clock_db

reference = clock_db.reference
