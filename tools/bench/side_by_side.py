#!/usr/bin/env python3
"""Two Cyborg-compatible APIs side by side: the ARQ path's targets, as
ratios measured alternately in one run.

    python tools/bench/side_by_side.py OURS_URL REFERENCE_URL \
        [--rounds 3] [--count 100] [--concurrency 1,8] [--gets 500]

``OURS_URL`` is cyborg's API, ``REFERENCE_URL`` another deployed the same
way (OpenStack Cyborg: gunicorn with 2 sync workers, one conductor, one
agent with the fake driver, MariaDB, RabbitMQ, Placement), both in noauth
(``--token``/``--service-token`` otherwise, as ``arq_lifecycle.py``
takes them).  Each round measures, against each API in turn (the order
alternating between rounds, so that neither always runs on a warmer or
quieter machine):

- ``--gets`` sequential GETs of ``/v2/device_profiles`` and of
  ``/v2/accelerator_requests`` (p50 ms);
- ``--count`` ARQ lifecycles at each ``--concurrency`` level
  (``arq_lifecycle.py`` with ``--wait-bound``: create, bind, poll until
  resolved, delete): lifecycles a second and the p50 of each call, of the
  bind until it is seen resolved (``bound``) and of the lifecycle.

``--floors`` adds, after both in each round, what ``floors.py`` times
(an empty gunicorn GET and POST, a bare and a cyborg oslo.messaging call,
a raw AMQP round trip, a commit and a read on ``--floor-database``,
with ``--floor-placement URL`` the allocation lookup a bind makes;
``--floor-count`` of each): the floors of the machine the round ran on,
against which the absolute targets read (a slow machine's floors are
most of a create or a GET).  Each absolute target's verdict then carries
its step's floor and whether the target lies below it.  Needs the local
RabbitMQ and database server, as ``floors.py`` does.

Where our API serves ``/metrics`` (``[metrics]enabled``), each round
also carries the per-hop breakdown of our lifecycles at each level
(``arq_lifecycle.py``'s: every API route's and, with
``--conductor-metrics URL``, every conductor method's phases), and the
output their medians over the rounds (``breakdown``).  Where the
reference is a cyborg too (two trees compared, A against B) and serves
``/metrics``, its breakdown comes the same way, with
``--reference-conductor-metrics URL`` for its conductor's
(``reference_breakdown``); OpenStack Cyborg serves none.

``--pool A.json B.json ...`` measures nothing: it pools the rounds of
earlier runs' output and prints their summary and targets (a noisy
machine gives runs minutes apart ratios a fifth apart; several runs'
rounds together say more than any one).

Prints JSON: every round's figures, the medians of each API, the ratios
(the reference's time over ours, our rate over the reference's: above 1
is ours faster) as the median of the rounds' ratios with their range, and
each target of ``TARGETS`` with the figure it is judged on and whether
it is met.  Machines are noisy: read the ranges, and the load average
printed before and after.  A benchmark, not a test.
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time

# This folder, where the benchmark runs from.
import arq_lifecycle

# (figure, kind, bound, step): "ratio" figures are judged on the median
# ratio (at least ``bound``), "ms" figures on our median p50 (at most
# ``bound``), and, with floors timed, set beside the floor of their
# ``step`` (floors.TARGET_FLOORS).  The ARQ targets of
# doc/source/scaling.rst.
TARGETS = (
    ('lifecycles_per_s c=1', 'ratio', 5.0, None),
    ('lifecycles_per_s c=8', 'ratio', 5.0, None),
    ('create p50 c=1', 'ms', 4.0, 'create'),
    ('bound p50 c=1', 'ms', 8.0, 'bound'),
    ('delete p50 c=1', 'ms', 4.0, 'delete'),
    ('GET /v2/device_profiles p50', 'ms', 1.5, 'get'),
    ('GET /v2/accelerator_requests p50', 'ms', 1.5, 'get'),
)
LIST_PATHS = ('/device_profiles', '/accelerator_requests')
SPANS = ('create', 'bind', 'bound', 'delete', 'lifecycle')
# Where a round (and the output) keeps each side's per-hop breakdown.
BREAKDOWNS = {'ours': 'breakdown', 'reference': 'reference_breakdown'}


class Side:
    """One API under test: its client, and what a lifecycle uses."""

    def __init__(self, name, url, args, conductor_metrics=None):
        self.name = name
        self.client = arq_lifecycle.Client(url, args.token,
                                           args.service_token)
        self.profile = arq_lifecycle.find_profile(self.client, None)
        self.host, self.rp_uuid = arq_lifecycle.find_target(self.client)
        # The per-hop breakdown, where the API serves /metrics
        # ([metrics]enabled) and the conductor's endpoint is given.
        self.api_metrics = arq_lifecycle.api_metrics_url(url)
        self.conductor_metrics = conductor_metrics

    def lifecycles(self, count, concurrency):
        """``arq_lifecycle.run``'s result, with its ``breakdown`` when the
        side has metrics."""
        return arq_lifecycle.with_breakdown(
            lambda: arq_lifecycle.run(self.client, self.profile, self.host,
                                      self.rp_uuid, count, concurrency,
                                      wait_bound=True),
            self.api_metrics, self.conductor_metrics)

    def gets(self, path, count):
        """p50 ms of ``count`` sequential GETs of ``path``."""
        times = []
        for _ in range(count):
            started = time.perf_counter()
            self.client.call('GET', path)
            times.append((time.perf_counter() - started) * 1000)
        return round(statistics.median(times), 3)


def measure(side, args):
    """({figure: value}, {'c=N': per-hop breakdown}) of one round against
    ``side`` (no breakdown for a side without metrics)."""
    figures, breakdowns = {}, {}
    for path in LIST_PATHS:
        figures[f'GET /v2{path} p50'] = side.gets(path, args.gets)
    for level in args.levels:
        result = side.lifecycles(args.count, level)
        if result['errors']:
            raise RuntimeError(f'{side.name}, concurrency {level}: '
                               f'{result["errors"]} lifecycles failed: '
                               f'{result["first_error"]}')
        figures[f'lifecycles_per_s c={level}'] = result['lifecycles_per_s']
        for span in SPANS:
            figures[f'{span} p50 c={level}'] = \
                result['latency_ms'][span]['p50']
        if 'breakdown' in result:
            breakdowns[f'c={level}'] = result['breakdown']
    return figures, breakdowns


def _higher_is_better(figure):
    return figure.startswith('lifecycles_per_s')


def round_of(order, measured):
    """One round's record from ``measure``'s (figures, breakdowns) of
    each side: each side's figures, and each side's breakdown, where it
    has one, under its ``BREAKDOWNS`` key."""
    record = {'order': order, 'load_average': os.getloadavg()[0]}
    for name, (figures, breakdowns) in measured.items():
        record[name] = figures
        if breakdowns:
            record[BREAKDOWNS[name]] = breakdowns
    return record


def summarize(rounds):
    """Medians of each side and the ratios (above 1: ours faster)."""
    summary = {}
    # Runs pooled may have measured different levels: the figures every
    # round has.
    for figure in [f for f in rounds[0]['ours']
                   if all(f in r['ours'] and f in r['reference']
                          for r in rounds)]:
        ours = [r['ours'][figure] for r in rounds]
        theirs = [r['reference'][figure] for r in rounds]
        if _higher_is_better(figure):
            ratios = [o / t for o, t in zip(ours, theirs)]
        else:
            ratios = [t / o for o, t in zip(ours, theirs)]
        summary[figure] = {
            'ours': round(statistics.median(ours), 3),
            'reference': round(statistics.median(theirs), 3),
            'ratio': round(statistics.median(ratios), 2),
            'ratio_range': [round(min(ratios), 2), round(max(ratios), 2)]}
    return summary


def floors_of(rounds):
    """The medians of the floors the rounds timed (``--floors``) and the
    lifecycle floor they make, or None when not every round has them."""
    if not rounds or not all('floors' in r for r in rounds):
        return None
    import floors
    medians = floors.median_of([r['floors'] for r in rounds])
    return {'median': medians,
            'lifecycle_floor_ms': floors.lifecycle_floor(medians),
            'target_floors_ms': floors.target_floors(medians)}


def breakdown_of(rounds, key='breakdown'):
    """The per-hop breakdown of one side (``key``: ``breakdown`` ours,
    ``reference_breakdown`` the reference's) over the rounds that have
    one: for each concurrency level, API route and conductor method, the
    median over the rounds of its calls, statements and each phase's
    mean ms; None when no round has one."""
    found = [r[key] for r in rounds if r.get(key)]
    if not found:
        return None
    pooled = {}
    for level in sorted({level for b in found for level in b}):
        pooled[level] = {}
        for side in ('api', 'conductor'):
            calls = [b[level][side] for b in found if level in b]
            pooled[level][side] = {
                call: _median_call([c[call] for c in calls if call in c])
                for call in sorted({call for c in calls for call in c})}
    return pooled


def breakdowns_of(rounds):
    """Both sides' pooled breakdowns, under the keys the rounds use."""
    return {key: breakdown_of(rounds, key) for key in BREAKDOWNS.values()}


def _median_call(calls):
    phases = sorted({phase for call in calls for phase in call['ms']})
    return {'calls': statistics.median_low(c['calls'] for c in calls),
            'statements': statistics.median(c['statements'] for c in calls),
            'ms': {phase: round(statistics.median(
                c['ms'][phase] for c in calls if phase in c['ms']), 3)
                for phase in phases},
            'rounds': len(calls)}


def judge(summary, found_floors=None):
    """Each target with the figure it is judged on and whether it is
    met; with ``found_floors`` (``floors_of``), an absolute target also
    carries the machine's floor for its step (``floor_ms``) and whether
    the target lies below it (``below_floor``: no code meets it there)."""
    verdicts = []
    for figure, kind, bound, step in TARGETS:
        if figure not in summary:
            continue
        if kind == 'ratio':
            value = summary[figure]['ratio']
            met = value >= bound
        else:
            value = summary[figure]['ours']
            met = value <= bound
        verdict = {'figure': figure, 'kind': kind, 'target': bound,
                   'value': value, 'met': met}
        if step is not None and found_floors is not None:
            floor = found_floors['target_floors_ms'][step]
            verdict.update(floor_ms=floor, below_floor=bound < floor)
        verdicts.append(verdict)
    return verdicts


def pool(paths):
    """Print the summary and targets of the rounds of earlier runs."""
    if not paths:
        sys.exit('--pool needs the JSON output of one run or more')
    rounds = []
    for path in paths:
        with open(path) as f:
            rounds += json.load(f)['rounds']
    summary = summarize(rounds)
    found_floors = floors_of(rounds)
    print(json.dumps({'pooled': paths, 'rounds': len(rounds),
                      'summary': summary,
                      'targets': judge(summary, found_floors),
                      'floors': found_floors,
                      **breakdowns_of(rounds)}, indent=2))
    return 0


@contextlib.contextmanager
def _floor_timer(args):
    """A callable timing one round of floors (None without ``--floors``):
    a scratch folder and a RabbitMQ vhost for the whole run."""
    if not args.floors:
        yield None
        return
    import floors
    from tests.fixtures import rabbit
    settings = argparse.Namespace(count=args.floor_count,
                                  placement=args.floor_placement)
    with tempfile.TemporaryDirectory() as workdir, \
            rabbit.throwaway_vhost() as url, \
            floors.scratch_database(args.floor_database) as database_url:
        yield lambda: floors.one_round(settings, workdir, url, database_url)


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ['--pool']:
        return pool(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('ours', help="cyborg's API URL")
    parser.add_argument('reference', help="the other API's URL")
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--count', type=int, default=100,
                        help='lifecycles per concurrency level and round')
    parser.add_argument('--concurrency', default='1,8',
                        help='comma-separated concurrency levels')
    parser.add_argument('--gets', type=int, default=500,
                        help='sequential GETs of each list per round')
    parser.add_argument('--warmup', type=int, default=10,
                        help='lifecycles run first against each, not '
                             'measured')
    parser.add_argument('--token', help='Keystone token (else noauth)')
    parser.add_argument('--service-token', help='Keystone service token')
    parser.add_argument('--floors', action='store_true',
                        help="time the machine's floors in every round "
                             '(floors.py)')
    parser.add_argument('--floor-count', type=int, default=200,
                        help='calls of each floor per round')
    parser.add_argument('--conductor-metrics', default=None,
                        help="our conductor's metrics URL: its phases join "
                             "the API's in each round's per-hop breakdown")
    parser.add_argument('--reference-conductor-metrics', default=None,
                        help="the reference's conductor's metrics URL, "
                             'where the reference is a cyborg too')
    parser.add_argument('--floor-placement', default=None,
                        help="with --floors, our Placement's URL (noauth2): "
                             "its allocation lookup, which a bind waits "
                             "for, counts in the bind's floor")
    parser.add_argument('--floor-database', default='mysql',
                        help='with --floors, the local server whose commit '
                             'and read to time: mysql (MariaDB, the '
                             'default), postgresql or none')
    args = parser.parse_args(argv)
    args.levels = [int(level) for level in args.concurrency.split(',')]

    sides = {'ours': Side('ours', args.ours, args,
                          conductor_metrics=args.conductor_metrics),
             'reference': Side(
                 'reference', args.reference, args,
                 conductor_metrics=args.reference_conductor_metrics)}
    for side in sides.values():
        side.lifecycles(args.warmup, 1)
    load_before = os.getloadavg()
    rounds = []
    with _floor_timer(args) as time_floors:
        for number in range(args.rounds):
            order = ['ours', 'reference']
            if number % 2:
                order.reverse()
            rounds.append(round_of(order, {
                name: measure(sides[name], args) for name in order}))
            if time_floors is not None:
                rounds[-1]['floors'] = time_floors()
            print(f'round {number + 1} of {args.rounds} done',
                  file=sys.stderr)
    summary = summarize(rounds)
    found_floors = floors_of(rounds)
    print(json.dumps({
        'ours': args.ours, 'reference': args.reference,
        'count': args.count, 'gets': args.gets,
        'load_average': {'before': load_before, 'after': os.getloadavg()},
        'rounds': rounds, 'summary': summary,
        'targets': judge(summary, found_floors), 'floors': found_floors,
        **breakdowns_of(rounds)}, indent=2))
    if args.floors:
        # oslo.messaging's threads would keep the process alive.
        sys.stdout.flush()
        os._exit(0)
    return 0


if __name__ == '__main__':
    sys.exit(main())
