"""The ARQ reads bind only what the caller gives: the module's own
constants (health ranks, the fabric handle type) are written into the
statement, not built, escaped and sent on every execution."""

import pytest
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

from cyborg.db.api import arqs


@pytest.mark.parametrize('dialect', [mysql.dialect(), postgresql.dialect()],
                         ids=['mysql', 'postgresql'])
@pytest.mark.parametrize('given', [('instance_uuid',), ('uuid',),
                                   ('project_id', 'after_id')])
def test_a_view_read_binds_only_its_filters(dialect, given):
    statement = arqs._filtered_statement(arqs.VIEW, True, given, True)
    compiled = statement.compile(dialect=dialect)
    assert set(compiled.params) == set(given) | {'limit'}
    assert "'unhealthy'" in str(compiled)


def test_a_change_read_binds_only_its_filters():
    compiled = arqs._filtered_statement(
        arqs.CHANGE, False, ('uuids',), False).compile(
            dialect=mysql.dialect())
    assert set(compiled.params) == {'uuids'}
    assert "'FABRIC'" in str(compiled)


def test_the_bind_read_binds_only_the_arqs_and_instances():
    compiled = arqs._TO_BIND.compile(dialect=postgresql.dialect())
    assert set(compiled.params) == {'uuids', 'instances'}
    assert "'BindStarted'" in str(compiled)


@pytest.mark.parametrize('value', ["x'; DROP TABLE devices; --", 'a b', '',
                                   True, False])
def test_only_identifiers_and_integers_are_written_into_sql(value):
    with pytest.raises(ValueError):
        arqs._constant(value)
    assert str(arqs._constant(3)) == '3'
    assert str(arqs._constant('Bound')) == "'Bound'"
