"""Deployable attributes as the API's attribute resource: read by the API,
written by cyborg.conductor.attributes.  A report writes its host's
attributes in bulk (``inventory``)."""

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer


@reader
def get(context, uuid):
    """One attribute (a Row of its columns), or None."""
    return _sql.one(context, models.Attribute, uuid=uuid)


@reader
def get_all(context, deployable_id=None, key=None, limit=None, marker=None):
    """Attributes by id, optionally of one deployable and/or with one key:
    at most ``limit`` after the one whose uuid is ``marker``; None when
    no attribute has that uuid."""
    return _sql.every(context, models.Attribute, limit, marker,
                      deployable_id=deployable_id, key=key)


@writer
def insert(context, values):
    """Insert an attribute row; the unique keys reject duplicates."""
    row = models.Attribute(**values)
    context.session.add(row)
    context.session.flush()
    return row


@writer
def delete(context, uuid):
    """Delete one attribute; returns how many went (0 or 1)."""
    a = models.Attribute
    return context.session.execute(
        sa.delete(a).where(a.uuid == uuid)
        .execution_options(synchronize_session=False)).rowcount
