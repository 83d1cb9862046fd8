"""cyborg-api with several workers, as a real process: each worker that
died left its metrics files in PROMETHEUS_MULTIPROC_DIR until the service
restarted, and every scrape read them all.  The parent folds a reaped
worker's files into the archives (cyborg.api.metrics_files): the counts
stay, the files of the dead go."""

import os
import re
import signal

from prometheus_client import parser
import requests

from tests.fixtures import databases
from tests.fixtures import processes


def _requests_total(url):
    text = requests.get(url + '/metrics', timeout=30).text
    return sum(s.value for family in parser.text_string_to_metric_families(
        text) for s in family.samples
        if s.name == 'cyborg_api_requests_total'
        and s.labels.get('route') == '/')


def _workers(api):
    return [int(pid) for pid in re.findall(
        r'Started cyborg-api worker (\d+)', api.log())]


def _files(path):
    return sorted(p.name for p in path.iterdir() if p.name.endswith('.db'))


def test_replaced_workers_leave_their_counts_not_their_files(tmp_path):
    metrics_dir = tmp_path / 'metrics'
    metrics_dir.mkdir()
    port = processes.free_port()
    url = f'http://127.0.0.1:{port}'
    with databases.throwaway_database('sqlite') as db_url:
        databases.create_schema(db_url)
        config = processes.write_config(tmp_path / 'api.conf', {
            'DEFAULT': {'transport_url': 'rabbit://guest:guest@127.0.0.1:1/'},
            'api': {'host_ip': '127.0.0.1', 'port': port, 'api_workers': 2,
                    'threads': 4, 'auth_strategy': 'noauth'},
            'metrics': {'enabled': True},
            'database': {'connection': db_url},
        })
        api = processes.ServiceProcess(
            'cyborg-api', config, tmp_path / 'api.log',
            env={'PROMETHEUS_MULTIPROC_DIR': str(metrics_dir)})
        api.start()
        try:
            api.wait_for_log(f'listening on {url}')
            served = 0
            for round_ in range(3):
                # Requests on both workers (new connections), then one
                # worker killed and replaced.
                for _ in range(4):
                    assert requests.get(url + '/',
                                        timeout=30).status_code == 200
                    served += 1
                os.kill(_workers(api)[round_], signal.SIGKILL)
                api.wait_for_log('starting another', count=round_ + 1)
                processes.wait_for(
                    lambda: len(_workers(api)) == round_ + 3, timeout=15,
                    what='a new worker')
            assert _requests_total(url) == served
            alive = set(_workers(api)[3:])
            files = _files(metrics_dir)
            assert {'counter_archive.db', 'histogram_archive.db',
                    'summary_archive.db'} <= set(files)
            pids = {int(m) for m in re.findall(r'_(\d+)\.db', ' '.join(
                files))}
            # The parent's own files went at start, as before.
            assert pids <= alive, (pids, alive, files)
            api.stop()
            assert 'could not be archived' not in api.log()
            assert 'Traceback' not in api.log()
        finally:
            api.kill()
