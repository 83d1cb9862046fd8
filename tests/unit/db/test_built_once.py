"""Statements built once per shape (``_sql.built_once``): the same shape
gets the same statement object (SQLAlchemy then works its cache key out
once), another shape its own, and the NULL checks render as such."""

from cyborg.db.api import _sql
from cyborg.db.api import arqs
from cyborg.db.api import deployables
from cyborg.db.api import device_profiles
from cyborg.db.api import hosts
from cyborg.db import models


def test_a_shape_is_built_once():
    shape = (('hostname', 'instance_uuid'), (('attach_handle_id', True),))
    first = arqs._transition_statement(*shape)
    assert arqs._transition_statement(*shape) is first
    other = arqs._transition_statement(('hostname',), ())
    assert other is not first
    shape = (('report_digest',), True, True, False)
    assert hosts._update_statement(*shape) is hosts._update_statement(*shape)
    # Marking a host unsynced counts one more change: sync_serial + 1.
    lagging = str(hosts._update_statement(('placement_synced',), False,
                                          False, True))
    assert 'sync_serial=(hosts.sync_serial + :sync_serial_1)' in lagging


def test_null_or_equal_checks():
    sql = str(arqs._delete_statement(True, False))
    assert 'attach_handle_id IS NULL' in sql
    assert 'remote_handle_id = :remote_handle_id' in sql
    table = models.ExtARQ.__table__
    assert str(_sql.equal_or_null(table, 'hostname', False, 'w_hostname')) \
        == 'extended_accelerator_requests.hostname = :w_hostname'


def test_a_profile_read_for_arqs_binds_whom_it_is_visible_to():
    statement = device_profiles._one_statement(False, False, True, True)
    assert device_profiles._one_statement(False, False, True,
                                          True) is statement
    sql = str(statement)
    assert 'device_profiles.name = :name' in sql
    # The project, in the owner check and in the shares subquery alike.
    assert sql.count(':visible_to') == 2
    assert ':uuid' not in sql
    # The whole row, for the API, is a shape of its own.
    whole = str(device_profiles._one_statement(True, True, False, False))
    assert 'device_profiles.profile_json' in whole
    assert 'device_profiles.visibility' in whole
    assert 'device_profiles.uuid = :uuid' in whole
    assert ':visible_to' not in whole


def test_a_profile_list_binds_its_names_page_and_visibility():
    statement = device_profiles._list_statement(True, True, True, True)
    assert device_profiles._list_statement(True, True, True,
                                           True) is statement
    sql = str(statement)
    assert 'device_profiles.name IN (__[POSTCOMPILE_names])' in sql
    assert sql.count(':visible_to') == 2
    assert 'device_profiles.id > :after_id' in sql
    assert sql.rstrip().endswith('LIMIT :limit')
    assert ':names' not in str(device_profiles._list_statement(
        False, False, False, False))


def test_a_read_by_columns_is_built_once_per_shape():
    table = models.Device.__table__
    statement = _sql._equal_statement(table, ('hostname', 'type'), True,
                                      True, True)
    assert _sql._equal_statement(table, ('hostname', 'type'), True, True,
                                 True) is statement
    sql = str(statement)
    assert 'devices.hostname = :hostname' in sql
    assert 'devices.type = :type' in sql
    assert 'devices.id > :cyborg_after_id' in sql
    assert sql.rstrip().endswith('LIMIT :cyborg_limit')
    one = str(_sql._equal_statement(table, ('uuid',), False))
    assert 'devices.uuid = :uuid' in one
    assert 'ORDER BY' not in one and 'LIMIT' not in one


def test_a_deployable_page_is_built_once_per_sort_and_shape():
    statement = deployables._page_statement('updated_at', True, True, True,
                                            True)
    assert deployables._page_statement('updated_at', True, True, True,
                                       True) is statement
    sql = str(statement)
    assert 'JOIN devices ON devices.id = deployables.device_id' in sql
    assert 'deployables.name = :name' in sql
    # Never updated sorts as the earliest time, on the page and its marker.
    assert 'coalesce(deployables.updated_at' in sql
    assert 'coalesce(deployables.updated_at' in str(
        deployables._marker_statement('updated_at'))
    assert '< (:cyborg_after_key, :cyborg_after_id)' in sql
    assert sql.rstrip().endswith('LIMIT :cyborg_limit')
    by_name = str(deployables._page_statement('name', False, False, False,
                                              False))
    assert 'ORDER BY deployables.name ASC, deployables.id ASC' in by_name
    assert 'coalesce' not in by_name and 'LIMIT' not in by_name
