"""The metrics files of API workers that are gone: the directory kept a
set of files per worker ever started (each one replaced, each one
gunicorn's ``max_requests`` recycled) until the service restarted, and
every scrape read them all.  A dead worker's live gauges are removed and
its counts folded into one archive file per type: the sums a scrape
sees do not change, the files of the dead go (cyborg.api.metrics_files).
Workers here are real processes recording through prometheus_client's
multiprocess mode; under gunicorn, its ``child_exit`` hook does it."""

import os
import subprocess
import sys
import threading

from prometheus_client import multiprocess
from prometheus_client import parser
import pytest
import requests

from cyborg.api import metrics_files
from tests.fixtures import processes
from tests.unit.api.test_metrics import ROOT

# A worker: the real app serves ``argv[1:]`` (paths), its metrics in
# PROMETHEUS_MULTIPROC_DIR, plus gauges of two multiprocess modes; it
# prints its pid.
WORKER = '''
import os, sys, webob
import prometheus_client as prom
from oslo_config import cfg
import cyborg.conf
from cyborg.api import app as api_app
conf = cfg.ConfigOpts()
cyborg.conf.register_opts(conf)
conf([], project='cyborg', default_config_files=[], default_config_dirs=[])
conf.set_override('auth_strategy', 'noauth', group='api')
conf.set_override('enabled', True, group='metrics')
app = api_app.build_app(conf)
for path in sys.argv[1:]:
    webob.Request.blank(path).get_response(app)
prom.Gauge('test_live', 'a live gauge', multiprocess_mode='livesum',
           registry=None).set(5)
prom.Gauge('test_all', 'a gauge by pid', registry=None).set(7)
print(os.getpid())
'''


def _worker(path, *paths):
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(path))
    done = subprocess.run([sys.executable, '-c', WORKER, *paths], env=env,
                          capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def _scraped(path):
    """{(sample name, labels): value} as a scrape sums the files."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in multiprocess.MultiProcessCollector(
                None, str(path)).collect()
            for s in family.samples}


def _files(path):
    return sorted(p.name for p in path.iterdir() if p.name.endswith('.db'))


def test_a_dead_worker_s_counts_stay_and_its_files_go(tmp_path):
    pids = [_worker(tmp_path, '/', '/v2/nowhere'),
            _worker(tmp_path, '/', '/'),
            _worker(tmp_path, '/')]
    assert len(_files(tmp_path)) == 3 * 5
    before = _scraped(tmp_path)
    assert before[('cyborg_api_requests_total', (
        ('method', 'GET'), ('route', '/'), ('status', '200')))] == 4
    for pid in pids:
        assert metrics_files.worker_exited(pid, str(tmp_path)) == 3
    after = _scraped(tmp_path)
    # The live gauges of the dead went; the gauge by pid stays, as
    # prometheus_client leaves it.
    live = {key for key in before if key[0] == 'test_live'}
    assert {key[0] for key in live} == {'test_live'}
    assert {key: value for key, value in before.items()
            if key not in live} == after
    # Counters, histogram buckets (accumulated, _count), summaries.
    names = {key[0] for key in after}
    assert {'cyborg_api_requests_total', 'cyborg_api_request_seconds_bucket',
            'cyborg_api_request_seconds_count',
            'cyborg_api_request_seconds_sum',
            'cyborg_api_request_phase_seconds_count'} <= names
    assert not any(name.endswith('_created') for name in names)
    assert _files(tmp_path) == sorted(
        ['counter_archive.db', 'histogram_archive.db', 'summary_archive.db']
        + [f'gauge_all_{pid}.db' for pid in pids])
    # A new worker's counts add to the archives'.
    _worker(tmp_path, '/')
    assert _scraped(tmp_path)[('cyborg_api_requests_total', (
        ('method', 'GET'), ('route', '/'), ('status', '200')))] == 5


def test_a_scrape_and_a_fold_never_overlap(tmp_path):
    """A scrape between the archive's rename and the dead files' removal
    counted the worker twice (a counter that then goes down, a reset to
    Prometheus); one before the archive, then one after, not at all."""
    pid = _worker(tmp_path, '/')
    folded = threading.Thread(target=metrics_files.worker_exited,
                              args=(pid, str(tmp_path)))
    with metrics_files.reading(str(tmp_path)):
        folded.start()
        folded.join(1)
        assert folded.is_alive()            # waits for the scrape
        assert f'counter_{pid}.db' in _files(tmp_path)
    folded.join(30)
    assert f'counter_{pid}.db' not in _files(tmp_path)


def test_a_fold_waits_for_a_stuck_scrape_a_while_only(tmp_path,
                                                      monkeypatch, caplog):
    monkeypatch.setattr(metrics_files, 'LOCK_WAIT', 0.2)
    pid = _worker(tmp_path, '/')
    with metrics_files.reading(str(tmp_path)):
        assert metrics_files.worker_exited(pid, str(tmp_path)) == 0
    assert f'counter_{pid}.db' in _files(tmp_path)      # still summed
    assert 'a scrape held them' in caplog.text


def test_the_api_scrape_waits_for_a_fold(tmp_path, monkeypatch):
    from cyborg.api import metrics as api_metrics
    _worker(tmp_path, '/')
    monkeypatch.setenv(metrics_files.MULTIPROC_ENV, str(tmp_path))
    rendered = []
    scrape = threading.Thread(target=lambda: rendered.append(
        api_metrics.render()))
    with metrics_files._locked(str(tmp_path), metrics_files.fcntl.LOCK_EX):
        scrape.start()
        scrape.join(1)
        assert rendered == []
    scrape.join(30)
    assert b'cyborg_api_requests_total' in rendered[0][1]


def test_files_that_cannot_be_folded_stay(tmp_path, caplog):
    (tmp_path / 'counter_99.db').write_bytes(b'x')
    assert metrics_files.worker_exited(99, str(tmp_path)) == 0
    assert _files(tmp_path) == ['counter_99.db']
    assert 'could not be archived' in caplog.text


def test_a_fold_whose_last_removal_fails_counts_the_worker_once(
        tmp_path, monkeypatch):
    """The worker's file could not be removed after the archive took its
    counts (a fault of the filesystem): it was summed twice, the archive
    and the file.  Renamed out of the sum first, it is summed once."""
    _worker(tmp_path, '/')
    before = _scraped(tmp_path)
    removing = os.remove
    pid = int(next(p.name.split('_')[1][:-3] for p in tmp_path.iterdir()
                   if p.name.startswith('counter_')))

    def refused(name, *args, **kwargs):
        base = os.path.basename(name)
        if (base.startswith(metrics_files.ARCHIVED) and
                f'_{pid}.db' in base):
            raise PermissionError(13, 'Permission denied', name)
        return removing(name, *args, **kwargs)

    monkeypatch.setattr(os, 'remove', refused)
    folded = metrics_files.worker_exited(pid, str(tmp_path))
    counts = ('_total', '_count', '_sum', '_bucket')

    def counted(scraped):
        return {key: value for key, value in scraped.items()
                if key[0].endswith(counts)}
    assert counted(before)
    assert counted(_scraped(tmp_path)) == counted(before)
    assert folded == len(metrics_files.ARCHIVED)


def test_nothing_without_a_multiprocess_dir(monkeypatch):
    monkeypatch.delenv(metrics_files.MULTIPROC_ENV, raising=False)
    assert metrics_files.worker_exited(os.getpid()) == 0


def test_a_new_start_removes_the_archives(tmp_path, monkeypatch):
    names = ('counter_archive.db', 'histogram_archive.db.new',
             'summary_12.db.folding')
    for name in names + ('counter_old.db',):
        (tmp_path / name).write_bytes(b'x')
    monkeypatch.setenv(metrics_files.MULTIPROC_ENV, str(tmp_path))
    assert metrics_files.empty_multiproc_dir() == len(names)
    assert _files(tmp_path) == ['counter_old.db']


def _requests_total(text):
    return sum(s.value for family in parser.text_string_to_metric_families(
        text) for s in family.samples
        if s.name == 'cyborg_api_requests_total'
        and s.labels.get('route') == '/')


@pytest.mark.timeout(120)
def test_gunicorn_recycled_workers_leave_no_files(tmp_path):
    """Under gunicorn with ``max_requests``, each worker is replaced after
    one request here: the documented ``child_exit`` hook folds each
    one's files in."""
    metrics_dir = tmp_path / 'metrics'
    metrics_dir.mkdir()
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'api': {'auth_strategy': 'noauth'},
        'metrics': {'enabled': True},
        'database': {'connection': 'sqlite://'}})
    hooks = tmp_path / 'gunicorn.conf.py'
    hooks.write_text('from cyborg.api.metrics_files import child_exit\n')
    port = processes.free_port()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
               OS_CYBORG_CONFIG=str(config))
    with open(tmp_path / 'gunicorn.log', 'wb') as log:
        server = subprocess.Popen(
            [os.path.join(sys.prefix, 'bin', 'gunicorn'),
             '--no-control-socket', '-c', str(hooks), '--workers', '2',
             '--max-requests', '1', '--bind', f'127.0.0.1:{port}',
             'cyborg.wsgi.api:application'],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f'http://127.0.0.1:{port}'
        processes.wait_for(lambda: _answers(url), timeout=60,
                           what='gunicorn')
        served = 1
        for _ in range(4):
            assert requests.get(url + '/', timeout=60).status_code == 200
            served += 1
        # The workers replaced: their files folded in, one set each of
        # the two live workers' at most, and the master records nothing.
        processes.wait_for(lambda: 'counter_archive.db' in _files(
            metrics_dir), timeout=30, what='the archive')
        text = requests.get(url + '/metrics', timeout=30).text
        assert _requests_total(text) == served
        files = _files(metrics_dir)
        assert len(files) <= 3 + 2 * 3, files
        assert not any(name.endswith(f'_{server.pid}.db')
                       for name in files)
    finally:
        server.terminate()
        server.wait(30)
    assert b'could not be archived' not in (tmp_path /
                                            'gunicorn.log').read_bytes()


def _answers(url):
    """Whether gunicorn answers yet; a request that reached it counts:
    never one given up on while a worker serves it (a worker builds the
    app on its first request)."""
    try:
        return requests.get(url + '/', timeout=60).status_code == 200
    except requests.ConnectionError:
        return False
