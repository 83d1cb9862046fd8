"""The benchmarks are not tests, but the parts of them that measure must
keep working: ``arq_lifecycle.py``'s CPU accounting from /proc and a
short run of ``floors.py`` against the local RabbitMQ."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'tools', 'bench')


def _load(name):
    # A benchmark imports its neighbours (procstat), as when it runs.
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    spec = importlib.util.spec_from_file_location(
        'bench_' + name, os.path.join(BENCH, name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_of_a_process_and_its_children(tmp_path):
    lifecycle = _load('arq_lifecycle')
    busy = ('import time\nend = time.process_time() + 0.3\n'
            'while time.process_time() < end: pass\ntime.sleep(30)\n')
    parent = subprocess.Popen(
        ['sh', '-c', f'"{sys.executable}" -c "$0" & wait', busy])
    try:
        deadline = time.monotonic() + 10
        while not lifecycle.procstat.children(parent.pid):
            assert time.monotonic() < deadline, 'no child started'
            time.sleep(0.05)
        pids = tmp_path / 'pids'
        pids.write_text(f'group {parent.pid}\n')
        targets = lifecycle.cpu_targets(str(pids), [f'alone={parent.pid}'])
        assert targets['group'][0] == parent.pid
        assert len(targets['group']) == 2
        # The child's busy loop counts for the group, once it has run
        # (on a loaded machine its 0.3 s of CPU take longer than that).
        deadline = time.monotonic() + 30
        while True:
            spent = lifecycle.cpu_now(targets)
            if spent['group'] >= 0.25 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert spent['group'] >= 0.25
        assert lifecycle._cpu_seconds(999999999) == 0.0
    finally:
        for child in lifecycle.procstat.children(parent.pid):
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_floors_runs_and_prints_its_medians():
    result = subprocess.run(
        [sys.executable, os.path.join(BENCH, 'floors.py'), '--count', '5',
         '--rounds', '1'],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    medians = report['median']
    assert set(medians) == {'http', 'rpc', 'amqp', 'database'}
    for part in medians.values():
        assert all(value > 0 for value in part.values())
    get, post = medians['http']['get_ms'], medians['http']['post_ms']
    rpc = medians['rpc']['bare_ms']
    commit, read = (medians['database']['commit_ms'],
                    medians['database']['read_ms'])
    assert report['lifecycle_floor_ms'] == round(
        4 * get + 3 * rpc + 3 * commit + read, 2)
    # No Placement timed: the bind's lookup counts as nothing.
    assert report['target_floors_ms'] == {
        'create': round(post + rpc + commit, 2),
        'delete': round(get + rpc + commit, 2),
        'bound': round(post + rpc + commit + get + read, 2),
        'get': round(get + read, 2)}


def test_floors_without_a_database():
    floors = _load('floors')
    medians = {'http': {'get_ms': 1.0, 'post_ms': 1.25},
               'rpc': {'bare_ms': 2.0, 'cyborg_ms': 2.5},
               'amqp': {'round_trip_ms': 0.5},
               'placement': {'allocations_get_ms': 3.0}}
    assert floors.lifecycle_floor(medians) == 4 * 1.0 + 3 * 2.0 + 3.0
    assert floors.target_floors(medians) == {
        'create': 3.25, 'delete': 3.0, 'bound': 7.25, 'get': 1.0}


def test_side_by_side_ratios_and_targets():
    """Ratios above 1 mean ours is faster, for times and for rates alike;
    a target is judged on the median of the rounds."""
    side = _load('side_by_side')
    rounds = [
        {'ours': {'lifecycles_per_s c=1': 30.0, 'create p50 c=1': 5.0},
         'reference': {'lifecycles_per_s c=1': 6.0,
                       'create p50 c=1': 15.0}},
        {'ours': {'lifecycles_per_s c=1': 20.0, 'create p50 c=1': 3.0},
         'reference': {'lifecycles_per_s c=1': 5.0,
                       'create p50 c=1': 15.0}},
        {'ours': {'lifecycles_per_s c=1': 36.0, 'create p50 c=1': 3.5},
         'reference': {'lifecycles_per_s c=1': 6.0,
                       'create p50 c=1': 14.0}},
    ]
    summary = side.summarize(rounds)
    assert summary['lifecycles_per_s c=1'] == {
        'ours': 30.0, 'reference': 6.0, 'ratio': 5.0,
        'ratio_range': [4.0, 6.0]}
    assert summary['create p50 c=1']['ratio'] == 4.0
    assert summary['create p50 c=1']['ratio_range'] == [3.0, 5.0]
    verdicts = {v['figure']: v for v in side.judge(summary)}
    assert set(verdicts) == {'lifecycles_per_s c=1', 'create p50 c=1'}
    assert verdicts['lifecycles_per_s c=1']['met'] is True
    assert verdicts['create p50 c=1'] == {
        'figure': 'create p50 c=1', 'kind': 'ms', 'target': 4.0,
        'value': 3.5, 'met': True}
    rounds[2]['ours']['create p50 c=1'] = 4.5
    assert not side.judge(side.summarize(rounds))[1]['met']


def test_side_by_side_pools_earlier_runs(tmp_path, capsys):
    side = _load('side_by_side')
    runs = []
    for number, (ours, theirs) in enumerate([(30.0, 6.0), (20.0, 5.0),
                                             (36.0, 6.0)]):
        path = tmp_path / f'run{number}.json'
        path.write_text(json.dumps({'rounds': [
            {'ours': {'lifecycles_per_s c=1': ours},
             'reference': {'lifecycles_per_s c=1': theirs}}]}))
        runs.append(str(path))
    assert side.main(['--pool'] + runs) == 0
    pooled = json.loads(capsys.readouterr().out)
    assert pooled['rounds'] == 3
    assert pooled['summary']['lifecycles_per_s c=1']['ratio'] == 5.0
    assert pooled['targets'][0]['met'] is True


def _metrics_server(pages):
    """A local HTTP server answering each GET with the next of ``pages``
    (Prometheus text); yields its URL."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages.pop(0).encode()
            self.send_response(200)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _conductor_page(calls, seconds, commit):
    return (f'cyborg_conductor_rpc_seconds_count{{method="arq_create"}} '
            f'{calls}\n'
            f'cyborg_conductor_rpc_seconds_sum{{method="arq_create"}} '
            f'{seconds}\n'
            f'cyborg_conductor_rpc_phase_seconds_sum{{method="arq_create",'
            f'phase="commit"}} {commit}\n')


def test_a_run_with_breakdown_reads_the_metrics_before_and_after():
    lifecycle = _load('arq_lifecycle')
    assert lifecycle.with_breakdown(lambda: {'n': 1}, None, None) == {
        'n': 1}
    pages = [_conductor_page(10, 1.0, 0.2), _conductor_page(30, 1.1, 0.24)]
    server = _metrics_server(pages)
    try:
        url = f'http://127.0.0.1:{server.server_port}/metrics'
        result = lifecycle.with_breakdown(lambda: {'n': 2}, None, url)
    finally:
        server.shutdown()
    assert pages == []
    assert result['n'] == 2
    assert result['breakdown']['api'] == {}
    create = result['breakdown']['conductor']['arq_create']
    # 20 calls between the reads: 100 ms and 40 ms of commit in all.
    assert create['calls'] == 20
    assert create['ms'] == {'commit': 2.0, 'total': 5.0}


def _call(calls, statements, **ms):
    return {'calls': calls, 'statements': statements, 'ms': ms}


def test_side_by_side_pools_the_breakdown_of_its_rounds():
    """Each phase of each call is the median over the rounds that have
    it; rounds without a breakdown (a side without metrics) are left
    out, and none at all gives None."""
    side = _load('side_by_side')
    rounds = [
        {'breakdown': {'c=1': {
            'api': {'POST /v2/accelerator_requests': _call(
                100, 0.0, total=6.0, rpc=5.0, messaging=3.0)},
            'conductor': {'arq_create': _call(100, 2.0, total=2.0,
                                              commit=0.6)}}}},
        {'breakdown': {'c=1': {
            'api': {'POST /v2/accelerator_requests': _call(
                100, 0.0, total=8.0, rpc=7.0, messaging=4.0)},
            'conductor': {'arq_create': _call(100, 2.0, total=3.0,
                                              commit=0.8, db=1.0)}}}},
        {'breakdown': {'c=1': {
            'api': {'POST /v2/accelerator_requests': _call(
                100, 0.0, total=7.0, rpc=6.0, messaging=3.5)},
            'conductor': {'arq_create': _call(100, 2.0, total=2.5,
                                              commit=0.7)}},
            'c=8': {'api': {}, 'conductor': {
                'arq_delete': _call(100, 4.0, total=9.0)}}}},
        {},
    ]
    pooled = side.breakdown_of(rounds)
    assert set(pooled) == {'c=1', 'c=8'}
    post = pooled['c=1']['api']['POST /v2/accelerator_requests']
    assert post == {'calls': 100, 'statements': 0.0, 'rounds': 3,
                    'ms': {'total': 7.0, 'rpc': 6.0, 'messaging': 3.5}}
    create = pooled['c=1']['conductor']['arq_create']
    assert create['ms'] == {'total': 2.5, 'commit': 0.7, 'db': 1.0}
    assert pooled['c=8']['conductor']['arq_delete']['rounds'] == 1
    assert side.breakdown_of([{}, {'breakdown': {}}]) is None


def test_a_round_records_each_sides_breakdown_under_its_own_key():
    side = _load('side_by_side')
    ours, theirs = {'c=1': {'api': {}, 'conductor': {'a': 1}}}, {
        'c=1': {'api': {'b': 2}, 'conductor': {}}}
    record = side.round_of(['reference', 'ours'], {
        'reference': ({'x': 2.0}, theirs), 'ours': ({'x': 1.0}, ours)})
    assert record['order'] == ['reference', 'ours']
    assert (record['ours'], record['reference']) == ({'x': 1.0}, {'x': 2.0})
    assert record['breakdown'] == ours
    assert record['reference_breakdown'] == theirs
    # A side without metrics (OpenStack Cyborg) records none.
    plain = side.round_of(['ours', 'reference'], {
        'ours': ({'x': 1.0}, ours), 'reference': ({'x': 2.0}, {})})
    assert 'reference_breakdown' not in plain
    assert plain['breakdown'] == ours


def test_side_by_side_keeps_the_reference_breakdown_apart(tmp_path,
                                                          capsys):
    """A reference that is a cyborg too (an A/B run) has its breakdown
    pooled on its own, never mixed into ours."""
    side = _load('side_by_side')
    figures = {'lifecycles_per_s c=1': 10.0}

    def breakdown(total):
        return {'c=1': {'api': {'POST /v2/accelerator_requests': _call(
            100, 0.0, total=total)}, 'conductor': {}}}
    path = tmp_path / 'ab.json'
    path.write_text(json.dumps({'rounds': [
        {'ours': figures, 'reference': figures,
         'breakdown': breakdown(5.0), 'reference_breakdown': breakdown(9.0)},
        {'ours': figures, 'reference': figures,
         'breakdown': breakdown(7.0), 'reference_breakdown': breakdown(11.0)},
    ]}))
    assert side.main(['--pool', str(path)]) == 0
    pooled = json.loads(capsys.readouterr().out)
    route = 'POST /v2/accelerator_requests'
    assert pooled['breakdown']['c=1']['api'][route]['ms'] == {'total': 6.0}
    assert pooled['reference_breakdown']['c=1']['api'][route]['ms'] == {
        'total': 10.0}


def test_side_by_side_pools_runs_of_different_levels(tmp_path, capsys):
    side = _load('side_by_side')
    paths = []
    for number, levels in enumerate([(1, 8), (1, 2)]):
        figures = {f'lifecycles_per_s c={level}': 10.0 * level
                   for level in levels}
        path = tmp_path / f'run{number}.json'
        path.write_text(json.dumps({'rounds': [
            {'ours': figures, 'reference': figures}]}))
        paths.append(str(path))
    assert side.main(['--pool'] + paths) == 0
    pooled = json.loads(capsys.readouterr().out)
    assert list(pooled['summary']) == ['lifecycles_per_s c=1']
    assert pooled['breakdown'] is None
    assert pooled['reference_breakdown'] is None


def _floors(get_ms, bare_ms):
    return {'http': {'get_ms': get_ms, 'post_ms': get_ms + 0.1},
            'rpc': {'bare_ms': bare_ms, 'cyborg_ms': bare_ms + 0.2},
            'amqp': {'round_trip_ms': 0.5},
            'database': {'commit_ms': 0.5, 'read_ms': 0.25}}


def test_side_by_side_pools_the_floors_of_its_rounds(tmp_path, capsys):
    """Rounds timed with --floors carry the machine's floors: their
    medians and the lifecycle floor they make come with the summary,
    pooled too; runs some of whose rounds lack them give none."""
    side = _load('side_by_side')
    rounds = [{'ours': {'lifecycles_per_s c=1': ours},
               'reference': {'lifecycles_per_s c=1': 5.0},
               'floors': _floors(get_ms, bare_ms)}
              for ours, get_ms, bare_ms in [(25.0, 1.2, 2.0),
                                            (30.0, 1.8, 3.0),
                                            (20.0, 1.4, 2.6)]]
    found = side.floors_of(rounds)
    assert found['median']['http'] == {'get_ms': 1.4, 'post_ms': 1.5}
    assert found['median']['rpc']['bare_ms'] == 2.6
    assert found['lifecycle_floor_ms'] == round(
        4 * 1.4 + 3 * 2.6 + 3 * 0.5 + 0.25, 2)
    assert found['target_floors_ms'] == {
        'create': round(1.5 + 2.6 + 0.5, 2), 'delete': 4.5,
        'bound': round(1.5 + 2.6 + 0.5 + 1.4 + 0.25, 2), 'get': 1.65}
    path = tmp_path / 'run.json'
    path.write_text(json.dumps({'rounds': rounds}))
    assert side.main(['--pool', str(path)]) == 0
    assert json.loads(capsys.readouterr().out)['floors'] == found
    # A round of an older run, without the database: the medians are
    # of what every round timed.
    del rounds[2]['floors']['database']
    assert 'database' not in side.floors_of(rounds)['median']
    assert side.floors_of(rounds)['lifecycle_floor_ms'] == round(
        4 * 1.4 + 3 * 2.6, 2)
    del rounds[1]['floors']
    assert side.floors_of(rounds) is None


def test_side_by_side_sets_each_absolute_target_beside_its_floor():
    """With floors timed, an absolute target's verdict carries the floor
    of its step, and says when the target lies below it; ratio targets
    have no floor."""
    side = _load('side_by_side')
    summary = {
        'lifecycles_per_s c=1': {'ours': 30.0, 'reference': 6.0,
                                 'ratio': 5.0, 'ratio_range': [5.0, 5.0]},
        'create p50 c=1': {'ours': 5.0, 'reference': 15.0, 'ratio': 3.0,
                           'ratio_range': [3.0, 3.0]},
        'GET /v2/device_profiles p50': {'ours': 1.4, 'reference': 4.0,
                                        'ratio': 2.9,
                                        'ratio_range': [2.9, 2.9]}}
    found = {'target_floors_ms': {'create': 4.6, 'delete': 4.5,
                                  'bound': 6.0, 'get': 1.2}}
    verdicts = {v['figure']: v for v in side.judge(summary, found)}
    assert verdicts['create p50 c=1'] == {
        'figure': 'create p50 c=1', 'kind': 'ms', 'target': 4.0,
        'value': 5.0, 'met': False, 'floor_ms': 4.6, 'below_floor': True}
    assert verdicts['GET /v2/device_profiles p50']['met'] is True
    assert verdicts['GET /v2/device_profiles p50']['floor_ms'] == 1.2
    assert verdicts['GET /v2/device_profiles p50']['below_floor'] is False
    assert 'floor_ms' not in verdicts['lifecycles_per_s c=1']
    # Without floors, the verdicts are as before.
    assert 'floor_ms' not in side.judge(summary)[1]


def test_api_instructions_counts_a_route_under_callgrind():
    """A short run on SQLite: two dumps, the second of twice the requests
    of the first, and what one request costs between them."""
    result = subprocess.run(
        [sys.executable, os.path.join(BENCH, 'api_instructions.py'),
         '--db', 'sqlite', '--route', 'device', '--requests', '3'],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    [(tree, routes)] = report['trees'].items()
    assert os.path.samefile(tree, os.path.dirname(os.path.dirname(BENCH)))
    first, second = routes['device']['dumps']
    # A GET of one device runs millions of instructions; three more of
    # them make the second dump larger by about three times that.
    assert routes['device']['per_request'] > 1_000_000
    assert second - first == pytest.approx(
        3 * routes['device']['per_request'], abs=3)
    # Each dump counts only its own requests (callgrind zeroes after a
    # dump): six cost more than three, and less than twice three plus
    # what dumping costs (cumulative dumps would be three times).
    assert first < second < 2 * first
    # Every request ran to its access line: two to set up, the warm-up,
    # three and six.
    warmup = _load('api_instructions').WARMUP
    assert routes['device']['log_lines'] == 2 + warmup + 3 + 6
    # For a GET the conductor is stopped once warmed up: no thread but
    # the main one ran while counting.
    assert routes['device']['dumps_all_threads'] == routes['device'][
        'dumps']


def test_api_instructions_reads_callgrind_dumps(tmp_path):
    instructions = _load('api_instructions')
    # Dump N of thread T (--separate-threads) is callgrind.out.N-T; the
    # files at exit (callgrind.out-T) are no dump of the tool's.
    for number, thread, total in ((2, 1, 5_000), (1, 1, 3_000),
                                  (2, 2, 700), (1, 2, 400),
                                  (1, 3, 20)):
        (tmp_path / f'callgrind.out.{number}-0{thread}').write_text(
            f'version: 1\nevents: Ir\npart: {number}\nthread: {thread}\n'
            f'summary: {total}\ntotals: {total}\n')
    (tmp_path / 'callgrind.out-01').write_text('totals: 7\n')
    prefix = str(tmp_path / 'callgrind.out')
    main = instructions._dump_totals(prefix, main_only=True)
    assert main == [3_000, 5_000]
    assert instructions.per_request(main, 10) == 200
    assert instructions._dump_totals(prefix) == [3_420, 5_700]


def test_api_instructions_names_a_tree_given_twice_twice():
    instructions = _load('api_instructions')
    assert instructions._names(['/a', '/b', '/a', '/b', '/a']) == [
        '/a', '/b', '/a (2)', '/b (2)', '/a (3)']
