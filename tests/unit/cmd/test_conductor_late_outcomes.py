"""cyborg-conductor warns at start when Nova, waiting its default
``[compute]arq_binding_timeout`` (300 s), may fail a build before it
hears the outcome of a bind whose conductor died.

The help of ``[DEFAULT]bind_timeout`` said to keep it below 300 s, and
nothing checked it: Nova hears of such a bind only when the stuck-bind
check fails it, up to ``[conductor]stuck_arq_check_interval`` after its
``bind_timeout`` ran out, or, for an outcome recorded and not yet
delivered, when the re-send periodic finds it due,
``nova_event_retry_interval`` after the bind's deadline and up to one
more interval later."""

import os

from cyborg.cmd import conductor as conductor_cmd
from tests.fixtures import databases, processes, rabbit


def _set(conf, bind_timeout, stuck, retry):
    conf.set_override('bind_timeout', bind_timeout)
    conf.set_override('stuck_arq_check_interval', stuck, group='conductor')
    conf.set_override('nova_event_retry_interval', retry, group='conductor')


def test_the_defaults_are_in_time(conf):
    # 240 + max(30, 2 x 10) = 270 s.
    assert conductor_cmd.late_outcome_warning(conf) is None
    _set(conf, 269, 30, 10)
    assert conductor_cmd.late_outcome_warning(conf) is None


def test_a_stuck_check_too_late_is_said(conf):
    _set(conf, 270, 30, 10)
    warning = conductor_cmd.late_outcome_warning(conf)
    assert warning.startswith('Nova may fail the build of a bind whose '
                              'conductor died before it hears the outcome: '
                              'it hears it up to 300 s after the bind '
                              'started ([DEFAULT]bind_timeout 270 s')
    assert warning.endswith("raise Nova's arq_binding_timeout above 300 s")


def test_an_undelivered_outcome_too_late_is_said(conf):
    # Due 40 s after the deadline, found up to 40 s later: 220 + 80.
    _set(conf, 220, 30, 40)
    assert 'up to 300 s' in conductor_cmd.late_outcome_warning(conf)
    _set(conf, 219, 30, 40)
    assert conductor_cmd.late_outcome_warning(conf) is None


def test_no_stuck_check_is_said(conf):
    _set(conf, 240, 0, 10)
    assert conductor_cmd.late_outcome_warning(conf).startswith(
        '[conductor]stuck_arq_check_interval is 0: the binds of a conductor '
        'that dies are failed, and Nova told, only when that conductor '
        'starts again')


def test_the_conductor_logs_it_at_start(tmp_path):
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database('sqlite') as db_url:
        databases.create_schema(db_url)
        config = processes.write_config(tmp_path / 'cyborg.conf', {
            'DEFAULT': {'transport_url': transport_url,
                        'state_path': str(tmp_path / 'state'),
                        'bind_timeout': 290},
            'database': {'connection': db_url},
            'conductor': {'reconcile_interval': 0}})
        conductor = processes.ServiceProcess(
            'cyborg-conductor', config, tmp_path / 'conductor.log',
            env={'OS_CYBORG_CONFIG_DIR': os.fspath(tmp_path / 'none')})
        conductor.start()
        try:
            conductor.wait_for_log('cyborg-conductor started', timeout=60)
        finally:
            conductor.kill()
        lines = [line for line in conductor.log().splitlines()
                 if 'Nova may fail the build' in line]
        assert len(lines) == 1, conductor.tail()
        assert 'WARNING' in lines[0] and 'up to 320 s' in lines[0]
