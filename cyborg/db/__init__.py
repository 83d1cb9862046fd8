"""The database layer (models, readers/writers, migrations).

Importing it turns ``RequestContext`` into an enginefacade transaction
context provider (``context.connection`` in readers, ``context.session``
in writers); it is done here rather than in ``cyborg.common.context`` so
that processes that never touch the database (the agent) do not load
SQLAlchemy.
"""

from oslo_db.sqlalchemy import enginefacade

from cyborg.common import context as _context

enginefacade.transaction_context_provider(_context.RequestContext)
