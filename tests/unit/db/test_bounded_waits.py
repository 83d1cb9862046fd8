"""A service never waits forever for a database that stops answering: a
statement fails after ``DATABASE_WAIT`` seconds as a lost connection
(the request answers 503, the next one connects afresh)."""

import time
import urllib.parse

import pytest
import sqlalchemy as sa
from oslo_config import cfg
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import engines

import cyborg.conf
from cyborg.db import api as db_api
from tests.fixtures import databases
from tests.fixtures import tcp_proxy

MYSQL = 'mysql+pymysql://cyborg:pw@db.example.com/cyborg'
POSTGRESQL = 'postgresql+psycopg2://cyborg:pw@db.example.com/cyborg'


def _parsed(parameters):
    return dict(urllib.parse.parse_qsl(parameters))


def test_the_parameters_each_driver_takes():
    wait, lock_wait = db_api.DATABASE_WAIT, db_api.LOCK_WAIT
    mysql = {'read_timeout': str(wait), 'write_timeout': str(wait),
             'init_command': (
                 f'SET SESSION innodb_lock_wait_timeout = {lock_wait}'
                 f'/*M!100300 , idle_transaction_timeout = {wait} */')}
    assert _parsed(db_api.bounded_wait_parameters(MYSQL)) == mysql
    assert _parsed(db_api.bounded_wait_parameters(
        MYSQL.replace('pymysql', 'mysqldb'))) == mysql
    assert _parsed(db_api.bounded_wait_parameters(POSTGRESQL)) == {
        'tcp_user_timeout': str(wait * 1000),
        'options': f'-c lock_timeout={lock_wait}s '
                   f'-c idle_in_transaction_session_timeout={wait}s'}
    assert db_api.bounded_wait_parameters('sqlite:////var/lib/c.db') == ''


def test_what_the_operator_set_is_kept():
    # In the URL, or in [database]connection_parameters.
    assert _parsed(db_api.bounded_wait_parameters(
        MYSQL + '?read_timeout=300&init_command=SET+x%3D1')) == {
        'write_timeout': str(db_api.DATABASE_WAIT)}
    assert db_api.bounded_wait_parameters(
        MYSQL, 'charset=utf8&write_timeout=5&read_timeout=5'
        '&init_command=SELECT+1') == ''
    for options in ('options=-c+work_mem%3D8MB', 'options='):
        assert set(_parsed(db_api.bounded_wait_parameters(
            POSTGRESQL, options))) == {'tcp_user_timeout'}


def _conf(connection, parameters=None):
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[],
         default_config_dirs=[])
    conf.set_override('connection', connection, 'database')
    if parameters:
        conf.set_override('connection_parameters', parameters, 'database')
    return conf


def test_services_get_them():
    options = db_api.engine_options(_conf(MYSQL, 'charset=utf8'))
    assert options['connection_parameters'].startswith('charset=utf8&')
    assert _parsed(options['connection_parameters']) == {
        'charset': 'utf8',
        **_parsed(db_api.bounded_wait_parameters(MYSQL))}
    # SQLite has no such parameters: none are added.
    assert db_api.engine_options(_conf('sqlite://')).get(
        'connection_parameters') == ''  # oslo.db's default


@pytest.mark.parametrize('driver', databases.MYSQL_DRIVERS)
def test_a_hung_mariadb_fails_the_statement_in_bounded_time(driver):
    with databases.throwaway_database('mysql', driver) as url, \
            tcp_proxy.tcp_proxy(3306) as proxy:
        via_proxy = sa.engine.make_url(url).set(
            host='127.0.0.1', port=proxy.port)
        via_proxy = via_proxy.render_as_string(hide_password=False)
        engine = engines.create_engine(
            via_proxy, max_retries=0,
            connection_parameters=db_api.bounded_wait_parameters(
                via_proxy, wait=1))
        try:
            with engine.connect() as conn:
                assert conn.scalar(sa.text('SELECT 1')) == 1
                proxy.hold()
                started = time.monotonic()
                with pytest.raises(db_exc.DBConnectionError):
                    conn.scalar(sa.text('SELECT 2'))
                took = time.monotonic() - started
        finally:
            proxy.release()
            engine.dispose()
    assert took < 5, took


def test_postgresql_connects_with_them():
    """libpq takes tcp_user_timeout (what bounds a partition's wait: a
    hung server whose host still acknowledges is not bounded by it)."""
    with databases.throwaway_database('postgresql') as url:
        engine = engines.create_engine(
            url, max_retries=0,
            connection_parameters=db_api.bounded_wait_parameters(url))
        try:
            with engine.connect() as conn:
                assert conn.scalar(sa.text('SELECT 1')) == 1
                dsn = conn.connection.dbapi_connection.get_dsn_parameters()
            assert dsn['tcp_user_timeout'] == str(
                db_api.DATABASE_WAIT * 1000)
        finally:
            engine.dispose()
