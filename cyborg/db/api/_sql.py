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
    """The transaction's connection, for Core statements on plain columns.

    A reader's transaction is a connection alone (``reader`` is
    enginefacade's connection mode: no ORM session is made, begun and
    closed for a read); a writer's is an ORM session, and this is its
    connection, which skips the session's work per statement (a report's
    handful of statements are most of its database cost)."""
    transaction = context.transaction_ctx
    if transaction.connection is not None:
        return transaction.connection
    return transaction.session.connection()


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


# Bind parameter names of a page (no column has them): the id a page
# resumes after, and its size.
AFTER_ID = 'cyborg_after_id'
LIMIT = 'cyborg_limit'
_PAGE = (AFTER_ID, LIMIT)


def one(context, model, **filters):
    """The first ``model`` row whose columns equal ``filters`` (a Row of
    its columns), or None (also when every filter is None)."""
    given = not_none(filters)
    if not given or not matchable(*given.values()):
        return None
    statement = _equal_statement(model.__table__, tuple(given), False, False)
    row = connection(context).execute(statement, given).first()
    return row if row is None or _exactly(row, given) else None


def _exactly(row, given):
    """Whether ``row`` holds exactly the strings it was found by.
    MySQL's collations ignore trailing spaces, binary ones too
    ('p ' = 'p'), as MariaDB's do but for ``EXACT_NAME`` columns (NO
    PAD there), and both ignore case but for those: a row read by one
    name (a DELETE by name) is the one named, on every engine."""
    values = row._mapping
    return all(values[column] == value for column, value in given.items()
               if isinstance(value, str) and column in values)


def every(context, model, limit=None, marker=None, **filters):
    """The ``model`` rows (Rows of its columns) whose columns equal the
    non-None ``filters``, by id: at most ``limit`` of them after the row
    whose uuid is ``marker``; None when no row has that uuid."""
    given = not_none(filters)
    if marker is not None:
        after = marker_id(context, model.id, model.uuid, marker)
        if after is None:
            return None
        given[AFTER_ID] = after
    if not matchable(*given.values()):
        return []
    if limit is not None:
        given[LIMIT] = limit
    statement = _equal_statement(
        model.__table__, tuple(c for c in given if c not in _PAGE), True,
        marker is not None, limit is not None)
    return connection(context).execute(statement, given).all()


def not_none(filters):
    """The ``filters`` that are set: the columns a read compares."""
    return {column: value for column, value in filters.items()
            if value is not None}


def equal_to(table, columns):
    """``column = :column`` for each of ``columns``: the bind parameters
    are named after the columns, so ``not_none(filters)`` binds them."""
    return tuple(table.c[column] == sa.bindparam(column)
                 for column in columns)


@built_once
def _equal_statement(table, columns, ordered, after=False, limited=False):
    # The API's reads of one row or a filtered list (devices, deployables,
    # attributes, remote pools): a Core statement per shape (the columns
    # compared), not an ORM query built per request.
    query = sa.select(table).where(*equal_to(table, columns))
    if after:
        query = query.where(table.c.id > sa.bindparam(AFTER_ID))
    if ordered:
        query = query.order_by(table.c.id)
    if limited:
        query = query.limit(sa.bindparam(LIMIT))
    return query


def marker_id(context, id_column, uuid_column, marker, *scope):
    """The id of the row whose uuid is ``marker`` among those the
    ``scope`` conditions allow (the rows the caller may list), or None:
    where a paged list resumes (rows with a greater id follow it)."""
    if not matchable(marker):
        return None
    return connection(context).execute(
        sa.select(id_column).where(uuid_column == marker, *scope)).scalar()

