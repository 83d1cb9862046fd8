"""API metrics: requests counted by route template, /metrics served only
when enabled, and summed over worker processes in multiprocess mode."""

import os
import signal
import subprocess
import sys
import uuid

from prometheus_client import parser
import pytest
import webob

from cyborg.api import app as api_app
from cyborg.api import metrics as api_metrics
from cyborg.api import metrics_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


@pytest.fixture
def app(conf, db):
    conf.set_override('auth_strategy', 'noauth', group='api')
    conf.set_override('enabled', True, group='metrics')
    return api_app.build_app(conf)


def _get(app, path, method='GET'):
    return webob.Request.blank(path, method=method).get_response(app)


def _requests(app, route, status, method='GET'):
    """cyborg_api_requests_total for these labels, as /metrics shows it."""
    resp = _get(app, '/metrics')
    assert resp.status_int == 200
    for family in parser.text_string_to_metric_families(resp.text):
        for sample in family.samples:
            if (sample.name == 'cyborg_api_requests_total'
                    and sample.labels == {'method': method, 'route': route,
                                          'status': status}):
                return sample.value
    return 0


def test_a_request_is_counted_under_its_route_template(app):
    route = '/v2/devices/{uuid}'
    before = _requests(app, route, '404')
    device = str(uuid.uuid4())
    assert _get(app, '/v2/devices/' + device).status_int == 404
    assert _get(app, '/accelerator/v2/devices/' + device).status_int == 404
    assert _requests(app, route, '404') == before + 2
    # The raw path is never a label value (unbounded).
    assert device not in _get(app, '/metrics').text


def test_unknown_paths_are_unmatched(app):
    before = _requests(app, api_metrics.UNMATCHED, '404')
    assert _get(app, '/v2/no/such/thing').status_int == 404
    assert _get(app, '/v2/' + 'x' * 50).status_int == 404
    assert _requests(app, api_metrics.UNMATCHED, '404') == before + 2


def test_wrong_method_counts_under_the_route(app):
    before = _requests(app, '/v2/devices', '405', method='DELETE')
    assert _get(app, '/v2/devices', 'DELETE').status_int == 405
    assert _requests(app, '/v2/devices', '405', method='DELETE') == (
        before + 1)


def test_latency_is_recorded(app):
    _get(app, '/v2/device_profiles')
    text = _get(app, '/metrics').text
    assert ('cyborg_api_request_seconds_count{method="GET",'
            'route="/v2/device_profiles"}') in text


def test_served_under_the_mount_prefix_without_auth(conf, db):
    conf.set_override('enabled', True, group='metrics')
    conf.set_override('auth_strategy', 'keystone', group='api')
    app = api_app.build_app(conf)
    for path in ('/metrics', '/accelerator/metrics'):
        resp = _get(app, path)
        assert resp.status_int == 200, path
        assert resp.content_type == 'text/plain'
        assert 'cyborg_api_requests_total' in resp.text
        # The API's families only, not the conductor's or the agent's.
        names = {f.name for f in parser.text_string_to_metric_families(
            resp.text)}
        assert not {n for n in names if not n.startswith('cyborg_api_')}


def test_scrapes_are_not_counted(app):
    text = _get(app, '/metrics').text
    assert 'route="/metrics"' not in text
    assert 'route="unmatched",status="200"' not in text


def test_not_served_when_disabled(conf, db):
    conf.set_override('auth_strategy', 'noauth', group='api')
    app = api_app.build_app(conf)
    resp = _get(app, '/metrics')
    assert resp.status_int == 404
    assert 'error_message' in resp.json
    assert _get(app, '/accelerator/metrics').status_int == 404


CHILD = '''
import sys, webob
from oslo_config import cfg
import cyborg.conf
from cyborg.api import app as api_app
conf = cfg.ConfigOpts()
cyborg.conf.register_opts(conf)
conf([], project='cyborg', default_config_files=[], default_config_dirs=[])
conf.set_override('auth_strategy', 'noauth', group='api')
conf.set_override('enabled', True, group='metrics')
app = api_app.build_app(conf)
assert webob.Request.blank('/').get_response(app).status_int == 200
if sys.argv[1] == 'scrape':
    print(webob.Request.blank('/metrics').get_response(app).text)
'''


def _child(env, what):
    done = subprocess.run([sys.executable, '-c', CHILD, what], env=env,
                          capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_multiprocess_dir_sums_every_worker(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR, /metrics of one worker reports the
    requests of all of them (here: two processes, one request each)."""
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    _child(env, 'request')
    text = _child(env, 'scrape')
    values = [s.value for f in parser.text_string_to_metric_families(text)
              for s in f.samples
              if s.name == 'cyborg_api_requests_total'
              and s.labels == {'method': 'GET', 'route': '/',
                               'status': '200'}]
    assert values == [2.0]
    assert not {f.name for f in parser.text_string_to_metric_families(text)
                if not f.name.startswith('cyborg_api_')}


def _sample(app, name, **labels):
    resp = _get(app, '/metrics')
    for family in parser.text_string_to_metric_families(resp.text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0


def test_a_request_records_where_its_time_went(app):
    """The per-hop breakdown the ARQ benchmark reads: each phase of a
    request (policy, validation, handler, rendering, database) is a
    summary under the route, and its statements are counted."""
    labels = {'method': 'GET', 'route': '/v2/devices'}
    phases = 'cyborg_api_request_phase_seconds'
    statements = 'cyborg_api_request_db_statements_total'
    before = {phase: _sample(app, phases + '_count', phase=phase, **labels)
              for phase in ('policy', 'handler', 'render', 'db')}
    ran = _sample(app, statements, **labels)
    resp = webob.Request.blank('/v2/devices', headers={
        'X-Roles': 'admin', 'X-Project-Id': 'p'}).get_response(app)
    assert resp.status_int == 200
    for phase, count in before.items():
        assert _sample(app, phases + '_count', phase=phase,
                       **labels) == count + 1, phase
    assert _sample(app, phases + '_sum', phase='handler', **labels) > 0
    assert _sample(app, statements, **labels) >= ran + 1


def test_a_dispatched_request_is_labelled_by_its_operation(app,
                                                           monkeypatch):
    # The dispatcher's match labels the request: its path is not matched
    # again for the label (routes.template is only for the requests the
    # dispatcher found no operation for).
    from cyborg.api import routes

    def unmatched_again(path):
        raise AssertionError('matched again: %s' % path)
    route = '/v2/device_profiles/{name_or_uuid}'
    before = _requests(app, route, '404')
    monkeypatch.setattr(routes, 'template', unmatched_again)
    assert _get(app, '/accelerator/v2/device_profiles/'
                + str(uuid.uuid4())).status_int == 404
    monkeypatch.undo()
    assert _requests(app, route, '404') == before + 1


# What prometheus_client's multiprocess mode writes, and what it does not.
_PROM_FILES = ('counter_4242.db', 'histogram_4242.db', 'summary_17.db',
               'gauge_all_4242.db', 'gauge_livesum_17.db')
_OTHER_FILES = ('cyborg.db', 'counter_old.db', 'counter_4242.db.bak',
                'notes.txt')


def _leftovers(path):
    for name in _PROM_FILES + _OTHER_FILES:
        (path / name).write_bytes(b'x')
    (path / 'sub').mkdir()
    (path / 'sub' / 'counter_1.db').write_bytes(b'x')


def test_emptying_the_multiprocess_dir_takes_only_its_files(tmp_path,
                                                            monkeypatch):
    """The files of a previous run go; nothing else in the directory (an
    operator's SQLite database, a subdirectory) is touched."""
    _leftovers(tmp_path)
    monkeypatch.setenv(metrics_files.MULTIPROC_ENV, str(tmp_path))
    assert metrics_files.empty_multiproc_dir() == len(_PROM_FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        _OTHER_FILES + ('sub',))
    assert (tmp_path / 'sub' / 'counter_1.db').exists()
    monkeypatch.delenv(metrics_files.MULTIPROC_ENV)
    (tmp_path / 'counter_1.db').write_bytes(b'x')
    assert metrics_files.empty_multiproc_dir() == 0
    assert (tmp_path / 'counter_1.db').exists()


def test_cyborg_api_with_workers_empties_the_multiprocess_dir(
        conf, tmp_path, monkeypatch):
    """A previous run's worker files were summed into /metrics (and a
    worker given a previous worker's pid went on from its counts): the
    parent that forks the workers removes them before it forks any."""
    from cyborg.cmd import api as api_cmd
    stale = tmp_path / 'counter_4242.db'
    stale.write_bytes(b'x')
    seen = tmp_path / 'seen'
    seen.mkdir()

    def serve(conf, sock, parent):
        # In the forked worker: what it finds, then the parent stopped.
        (seen / str(os.getpid())).write_text(str(stale.exists()))
        os.kill(parent, signal.SIGTERM)
        return 0

    monkeypatch.setattr(api_cmd, '_serve_worker', serve)
    monkeypatch.setenv(metrics_files.MULTIPROC_ENV, str(tmp_path))
    handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {signum: signal.getsignal(signum) for signum in handled}
    try:
        assert api_cmd.WorkerPool(conf, None, 1).run() == 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    found = {p.read_text() for p in seen.iterdir()}
    assert found == {'False'}
