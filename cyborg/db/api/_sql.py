"""Query helpers the noun modules share (not an API of their own)."""

import functools

import sqlalchemy as sa


def built_once(build):
    """Decorate ``build(*shape)``, which makes a statement with bind
    parameters for one shape of a query (the columns it sets or checks,
    which of them must be NULL): each shape is built once per process and
    the statement reused.  SQLAlchemy works a statement's cache key out
    once per statement object, and building one anew on every call cost
    more CPU than running it.  Shapes come from code, never from input,
    so there are few of them."""
    return functools.cache(build)


def equal_or_null(table, column, null, param):
    """``column IS NULL`` when ``null``, else ``column = :param``."""
    if null:
        return table.c[column].is_(None)
    return table.c[column] == sa.bindparam(param)


def connection(context):
    """The transaction's connection, for Core statements on plain columns:
    it skips the ORM session's work per statement (a report's handful of
    statements are most of its database cost)."""
    return context.session.connection()


def rows(result):
    """A result's rows as plain dicts of columns."""
    return [dict(row) for row in result.mappings()]


def matchable(*values):
    """False when a value searched for holds a NUL character: no column
    stores one (PostgreSQL refuses it even in a query), so it matches
    nothing and the read answers "none" without asking."""
    for value in values:
        if isinstance(value, (list, tuple, set)):
            if not matchable(*value):
                return False
        elif isinstance(value, str) and '\x00' in value:
            return False
    return True


def where_equal(model, filters, order=True):
    """SELECT model WHERE column = value for each non-None filter."""
    query = sa.select(model)
    for column, value in filters.items():
        if value is not None:
            query = query.where(getattr(model, column) == value)
    return query.order_by(model.id) if order else query


def one(context, model, **filters):
    """The first ``model`` row whose columns equal ``filters``, or None
    (also when every filter is None)."""
    if all(value is None for value in filters.values()):
        return None
    if not matchable(*filters.values()):
        return None
    return context.session.scalars(
        where_equal(model, filters, order=False)).first()


def every(context, model, limit=None, marker=None, **filters):
    """The ``model`` rows whose columns equal the non-None ``filters``, by
    id: at most ``limit`` of them after the row whose uuid is ``marker``;
    None when no row has that uuid."""
    query = where_equal(model, filters)
    if marker is not None:
        after = marker_id(context, model.id, model.uuid, marker)
        if after is None:
            return None
        query = query.where(model.id > after)
    if not matchable(*filters.values()):
        return []
    if limit is not None:
        query = query.limit(limit)
    return context.session.scalars(query).all()


def marker_id(context, id_column, uuid_column, marker, *scope):
    """The id of the row whose uuid is ``marker`` among those the
    ``scope`` conditions allow (the rows the caller may list), or None:
    where a paged list resumes (rows with a greater id follow it)."""
    if not matchable(marker):
        return None
    return context.session.execute(
        sa.select(id_column).where(uuid_column == marker, *scope)).scalar()

