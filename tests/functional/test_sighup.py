"""SIGHUP on cyborg-api re-reads the mutable options ([DEFAULT]debug) in
every worker, and in the parent: a worker it forks later (one replacing
a worker that died) starts with the new values, not those the parent
read at start."""

import os
import re
import signal

import requests

from tests.fixtures import databases
from tests.fixtures import processes

DEBUG_ACCESS = re.compile(r'^\S+ \S+ (\d+) DEBUG cyborg\.api\.access ',
                          re.MULTILINE)


def _config(path, port, db_url, debug):
    return processes.write_config(path, {
        'DEFAULT': {'transport_url': 'rabbit://guest:guest@127.0.0.1:1/',
                    'debug': debug},
        'api': {'host_ip': '127.0.0.1', 'port': port, 'api_workers': 2,
                'threads': 2, 'auth_strategy': 'noauth'},
        'database': {'connection': db_url},
    })


def _workers(api):
    return [int(pid) for pid in
            re.findall(r'Started cyborg-api worker (\d+)', api.log())]


def _debug_pids(api):
    return {int(pid) for pid in DEBUG_ACCESS.findall(api.log())}


def test_workers_forked_after_sighup_have_the_new_values(tmp_path):
    port = processes.free_port()
    url = 'http://127.0.0.1:%d/healthcheck' % port
    with databases.throwaway_database('sqlite') as db_url:
        databases.create_schema(db_url)
        config = _config(tmp_path / 'api.conf', port, db_url, False)
        api = processes.ServiceProcess('cyborg-api', config,
                                       tmp_path / 'api.log').start()
        try:
            api.wait_for_log('Started cyborg-api worker', count=2)
            api.wait_for_log('started', count=2)
            # /healthcheck is logged at DEBUG only: nothing yet.
            assert requests.get(url, timeout=10).status_code == 200
            assert not _debug_pids(api)

            _config(config, port, db_url, True)
            os.kill(api.pid, signal.SIGHUP)
            # Each worker (and the parent, which logs it too).
            api.wait_for_log('Option DEFAULT.debug changed', count=2)

            # Both workers replaced: only workers forked after the SIGHUP
            # serve now.
            first = _workers(api)
            for pid in first:
                os.kill(pid, signal.SIGKILL)
            processes.wait_for(lambda: len(_workers(api)) == 4,
                               timeout=30, what='two new workers')
            new = set(_workers(api)) - set(first)
            processes.wait_for(
                lambda: api.log().count('worker %d started' % max(new))
                and api.log().count('worker %d started' % min(new)),
                what='the new workers serving')

            def every_new_worker_logs_at_debug():
                requests.get(url, timeout=10)
                return new <= _debug_pids(api)

            processes.wait_for(every_new_worker_logs_at_debug, timeout=30,
                               interval=0.05,
                               what='DEBUG access lines of both new '
                                    'workers')
            api.stop()
        finally:
            api.kill()
