"""Database access: small reader/writer functions on one enginefacade.

Every function takes a RequestContext first; functions decorated as
``reader``/``writer`` nest into the caller's transaction, so a conductor
step made of several of them commits once.  Rows come back as model
instances or plain dicts; this module knows nothing of ``cyborg.objects``.

Sections: engine set-up; inventory (conductor reports); device profiles and
ARQs; Nova events.  Keep each function short and its query indexed.
"""

from oslo_db.sqlalchemy import enginefacade

from cyborg.db import models  # noqa: F401  (used by the sections below)

context_manager = enginefacade.transaction_context()
reader = context_manager.reader
writer = context_manager.writer


def configure(conf):
    """Point the enginefacade at ``conf.database`` (call once per process)."""
    context_manager.configure(**dict(conf.database.items()))


def get_engine():
    return context_manager.writer.get_engine()


def patch_engine(engine):
    """Use ``engine`` (tests); returns a callable that undoes it."""
    if not context_manager._factory._started:
        # patch_engine starts the factory; make sure it never opens the
        # configured (production) database while doing so.
        context_manager.configure(connection='sqlite://')
    return context_manager.patch_engine(engine)
