"""etc/prometheus/cyborg-alerts.yaml: each rule's PromQL parses, and every
metric it reads is one cyborg serves, with labels the metric has and
label values the code can give it (so a renamed metric or state breaks
this test, not an operator's alerting)."""

import operator
import pathlib
import re

import prometheus_client as prom
import promql_parser
import pytest
import sqlalchemy as sa
import yaml

from cyborg.common import metrics, states
from cyborg.conductor import metrics_collector
from cyborg.db import models
from cyborg.drivers import nvml_health
from tests.fixtures import arqs as seed

RULES = (pathlib.Path(__file__).resolve().parents[2] / 'etc' /
         'prometheus' / 'cyborg-alerts.yaml')
# The label values the code can give, where it names them in one place:
# by label, for a label that means the same on every metric...
KNOWN_VALUES = {'health': states.HEALTH_STATES,
                'severity': states.SEVERITIES,
                'from_state': states.HEALTH_STATES,
                'to_state': states.HEALTH_STATES}
# ...and by (metric, label) for the others (a histogram's or summary's
# family name stands for its samples).
METRIC_VALUES = {
    ('cyborg_agent_device_clock_event_active', 'reason'):
        tuple(nvml_health.CLOCK_EVENTS),
    ('cyborg_notifications_dropped_total', 'reason'):
        (metrics.NOTIFICATION_QUEUE_FULL, metrics.NOTIFICATION_NOT_PUBLISHED),
    ('cyborg_conductor_programmings_total', 'outcome'):
        metrics.PROGRAMMING_OUTCOMES,
    ('cyborg_conductor_programming_seconds', 'outcome'):
        metrics.PROGRAMMING_OUTCOMES,
}
# Labels whose values are no vocabulary of the code (device keys, XID
# numbers, RPC methods, route templates, HTTP statuses, event types): a
# rule may match them freely.  Any other label a rule matches needs its
# values above, so that a renamed value fails here.
FREE_FORM = frozenset(('device', 'xid', 'method', 'route', 'status',
                       'event_type'))
# The samples a metric of each type serves, by suffix.
SUFFIXES = {'counter': ('_total',), 'gauge': ('',),
            'histogram': ('_bucket', '_count', '_sum'),
            'summary': ('', '_count', '_sum')}


def _rules():
    with open(RULES) as f:
        groups = yaml.safe_load(f)['groups']
    return [rule for group in groups for rule in group['rules']]


def _served(db):
    """{sample name: label names} of every series cyborg's processes
    serve: the registry's metrics and the conductor's scrape-time
    collector (read from an empty database)."""
    served = {}
    for metric in vars(metrics).values():
        if isinstance(metric, prom.metrics.MetricWrapperBase):
            for suffix in SUFFIXES[metric._type]:
                served[metric._name + suffix] = set(metric._labelnames)
    for family in metrics_collector.ConductorCollector().collect():
        for sample in family.samples:
            served.setdefault(sample.name, set()).update(sample.labels)
    return served


def _selectors(node):
    """The vector selectors of a parsed PromQL expression."""
    if isinstance(node, promql_parser.VectorSelector):
        yield node
        return
    for attribute in ('lhs', 'rhs', 'expr', 'vector_selector', 'param'):
        child = getattr(node, attribute, None)
        if child is not None:
            yield from _selectors(child)
    for child in getattr(node, 'args', None) or ():
        yield from _selectors(child)


def test_the_rules_are_complete():
    rules = _rules()
    assert rules
    names = [rule['alert'] for rule in rules]
    assert len(set(names)) == len(names)
    for rule in rules:
        assert rule['alert'].startswith('Cyborg'), rule
        assert rule['labels']['severity'] in ('warning', 'critical'), rule
        assert rule['annotations']['summary'], rule
        assert rule['annotations']['description'], rule


def _family(sample):
    """The metric family a sample name belongs to."""
    for suffix in ('_bucket', '_count', '_sum'):
        if sample.endswith(suffix):
            return sample[:-len(suffix)]
    return sample


def _vocabulary(sample, label):
    """The values the code gives ``label`` of ``sample``, None when
    unknown here."""
    for name in (sample, _family(sample)):
        if (name, label) in METRIC_VALUES:
            return METRIC_VALUES[name, label]
    return KNOWN_VALUES.get(label)


def _problems(rule, served):
    """What in ``rule``'s PromQL is not what cyborg serves."""
    problems = []
    selectors = list(_selectors(promql_parser.parse(rule['expr'])))
    if not selectors:
        problems.append(f'{rule["alert"]}: reads no metric')
    for selector in selectors:
        if selector.name not in served:
            problems.append(f'{rule["alert"]}: {selector.name} is not a '
                            f'metric cyborg serves')
            continue
        for matcher in selector.matchers.matchers:
            where = f'{rule["alert"]}: {selector.name}{{{matcher.name}}}'
            if matcher.name not in served[selector.name]:
                problems.append(f'{where} is no label of it')
                continue
            if matcher.name in FREE_FORM:
                continue
            known = _vocabulary(selector.name, matcher.name)
            if known is None:
                problems.append(f'{where}: its values are unknown here (add '
                                f'them to METRIC_VALUES or KNOWN_VALUES)')
                continue
            # A regex matcher names its values as alternatives.
            for value in matcher.value.split('|'):
                if value not in known:
                    problems.append(f'{where}: {value!r} is never given')
    return problems


@pytest.mark.parametrize('rule', _rules(), ids=lambda rule: rule['alert'])
def test_every_rule_reads_what_cyborg_serves(db, rule):
    assert _problems(rule, _served(db)) == []


@pytest.mark.parametrize('expr, problem', [
    # A renamed programming outcome.
    ('increase(cyborg_conductor_programmings_total'
     '{outcome="never_given"}[1h]) > 0', "'never_given' is never given"),
    ('cyborg_conductor_programming_seconds_count{outcome=~"programmed|x"}',
     "'x' is never given"),
    # Another metric's reasons.
    ('cyborg_notifications_dropped_total{reason="hw_slowdown"}',
     "'hw_slowdown' is never given"),
    ('cyborg_conductor_devices{health=~"unhealthy|broken"}',
     "'broken' is never given"),
    # A label with no known vocabulary is refused, not let through.
    ('cyborg_conductor_report_seconds_count{kind="full"}',
     'its values are unknown here'),
    ('cyborg_conductor_devices{colour="red"}', 'is no label of it'),
    ('cyborg_conductor_no_such_metric > 0', 'is not a metric cyborg serves'),
])
def test_a_value_the_code_never_gives_fails_the_check(db, expr, problem):
    [found] = _problems({'alert': 'CyborgTest', 'expr': expr}, _served(db))
    assert problem in found, found


# -- what a rule says over time -----------------------------------------

# By the matcher's operator (str(): MatchOp is not hashable); PromQL
# anchors its regular expressions.
_MATCH = {
    'MatchOp.Equal': lambda value, want: value == want,
    'MatchOp.NotEqual': lambda value, want: value != want,
    'MatchOp.Re': lambda value, want: bool(re.fullmatch(want, value)),
    'MatchOp.NotRe': lambda value, want: not re.fullmatch(want, value),
}
_ARITHMETIC = {'+': operator.add, '-': operator.sub, '*': operator.mul}
_COMPARISON = {'>': operator.gt, '<': operator.lt, '>=': operator.ge,
               '<=': operator.le, '==': operator.eq, '!=': operator.ne}


_AGGREGATE = {'sum': operator.add, 'max': max}


def _kept(modifier, labels):
    """The labels an aggregation's ``by``/``without`` leaves of
    ``labels`` (label names, or (name, value) pairs)."""
    def name(label):
        return label if isinstance(label, str) else label[0]
    if modifier is None:
        return frozenset()
    if modifier.type == promql_parser.AggModifierType.Without:
        return frozenset(i for i in labels if name(i) not in modifier.labels)
    return frozenset(i for i in labels if name(i) in modifier.labels)


def _evaluate(node, samples):
    """The instant value of the PromQL ``node`` over ``samples``
    ({(name, frozenset(labels)): value}): {frozenset(labels): value} for
    a vector, a float for a scalar.  Only what the gauge rules use:
    selectors, sum and max by/without, arithmetic and comparisons
    (one-to-one on all labels); anything else is refused."""
    if isinstance(node, promql_parser.ParenExpr):
        return _evaluate(node.expr, samples)
    if isinstance(node, promql_parser.NumberLiteral):
        return node.val
    if isinstance(node, promql_parser.VectorSelector):
        return {labels: value for (name, labels), value in samples.items()
                if name == node.name and all(
                    _MATCH[str(m.op)](dict(labels).get(m.name, ''), m.value)
                    for m in node.matchers.matchers)}
    if isinstance(node, promql_parser.AggregateExpr):
        combine = _AGGREGATE[str(node.op)]
        result = {}
        for labels, value in _evaluate(node.expr, samples).items():
            labels = _kept(node.modifier, labels)
            result[labels] = (combine(result[labels], value)
                              if labels in result else value)
        return result
    if isinstance(node, promql_parser.BinaryExpr):
        assert node.modifier is None, node
        op = str(node.op)
        lhs = _evaluate(node.lhs, samples)
        rhs = _evaluate(node.rhs, samples)
        if isinstance(lhs, float) and isinstance(rhs, float):
            return _ARITHMETIC[op](lhs, rhs)
        pairs = ({k: (v, rhs) for k, v in lhs.items()}
                 if isinstance(rhs, float) else
                 {k: (v, rhs[k]) for k, v in lhs.items() if k in rhs})
        if op in _COMPARISON:
            return {k: a for k, (a, b) in pairs.items()
                    if _COMPARISON[op](a, b)}
        return {k: _ARITHMETIC[op](a, b) for k, (a, b) in pairs.items()}
    raise NotImplementedError(node)


def _scrape():
    """The conductor collector's samples now."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in metrics_collector.ConductorCollector().collect()
            for sample in family.samples}


def _rule(name):
    return next(rule for rule in _rules() if rule['alert'] == name)


def _set_health(db, table, row_id, health):
    with db.begin() as c:
        c.execute(sa.update(table).where(table.id == row_id).values(
            health=health))


@pytest.mark.parametrize('alert, table', [
    ('CyborgDevicesOutOfService', models.Device),
    ('CyborgPartitionsOutOfService', models.Deployable)])
def test_out_of_service_holds_while_a_device_is_re_probed(db, alert, table):
    """A device (or partition) that fails its re-probes goes unhealthy,
    probing, unhealthy again...: out of the schedule all along, so the
    alert's expression must give the same series at every scrape, or its
    ``for:`` starts again at each move and it never fires."""
    failing = seed.seed_device(db, handles=0)
    row_id = (failing.device_id if table is models.Device
              else failing.deployable_id)
    if table is models.Device:
        # A card an operator pulled for repair is no alert.
        pulled = seed.seed_device(db, handles=0, status='maintaining')
        _set_health(db, table, pulled.device_id, states.LOST)
    expr = promql_parser.parse(_rule(alert)['expr'])
    assert _evaluate(expr, _scrape()) == {}
    seen = []
    for health in (states.UNHEALTHY, states.PROBING, states.UNHEALTHY,
                   states.PROBING):
        _set_health(db, table, row_id, health)
        seen.append(_evaluate(expr, _scrape()))
    assert all(len(result) == 1 for result in seen), seen
    assert len({frozenset(result) for result in seen}) == 1, seen
    _set_health(db, table, row_id, states.HEALTHY)
    assert _evaluate(expr, _scrape()) == {}


def test_a_partition_lost_alone_is_out_of_service_once(db):
    """A partition that vanished on its own (a MIG instance gone under
    an allocation, its GPU still reported) is lost while its device stays
    healthy: counted by neither rule, it raised no alert however long the
    instance's accelerator was gone.  One lost with its device is the
    device's alert alone, not one more for the partition."""
    devices = promql_parser.parse(_rule('CyborgDevicesOutOfService')['expr'])
    partitions = promql_parser.parse(
        _rule('CyborgPartitionsOutOfService')['expr'])
    alone = seed.seed_device(db, handles=0)
    _set_health(db, models.Deployable, alone.deployable_id, states.LOST)
    assert _evaluate(devices, _scrape()) == {}
    assert list(_evaluate(partitions, _scrape()).values()) == [1]
    # Its device goes too (the card pulled): the device's alert, once.
    _set_health(db, models.Device, alone.device_id, states.LOST)
    pulled = seed.seed_device(db, handles=0)
    _set_health(db, models.Device, pulled.device_id, states.LOST)
    _set_health(db, models.Deployable, pulled.deployable_id, states.LOST)
    assert list(_evaluate(devices, _scrape()).values()) == [2]
    assert _evaluate(partitions, _scrape()) == {}


def test_the_collector_and_the_registry_are_both_read(db):
    served = _served(db)
    assert served['cyborg_conductor_devices'] == {'health'}
    assert served['cyborg_conductor_maintained_devices'] == {'health'}
    assert served['cyborg_conductor_programmings_total'] == {'outcome'}
    assert 'cyborg_conductor_devices_total' not in served


# What Prometheus adds to every series of a scrape target, and so tells
# two conductors' series apart.
_TARGET = {'job': 'cyborg-conductor'}
_CONDUCTORS = ('conductor-1:6000', 'conductor-2:6000')


def _conductor_rules():
    """The rules that read only what the conductors serve."""
    return [rule for rule in _rules()
            if all(selector.name.startswith('cyborg_conductor_')
                   for selector in _selectors(
                       promql_parser.parse(rule['expr'])))]


def _left_labels(node, labels):
    """Which of the target ``labels`` a series of ``node`` still carries:
    the outermost aggregation decides."""
    if isinstance(node, (promql_parser.ParenExpr,
                         promql_parser.BinaryExpr)):
        children = [getattr(node, a, None) for a in ('expr', 'lhs', 'rhs')]
        left = [_left_labels(child, labels) for child in children
                if child is not None and not isinstance(
                    child, promql_parser.NumberLiteral)]
        return frozenset().union(*left)
    if isinstance(node, promql_parser.AggregateExpr):
        return _kept(node.modifier, labels)
    return frozenset(labels)


@pytest.mark.parametrize('rule', _conductor_rules(),
                         ids=lambda rule: rule['alert'])
def test_two_conductors_give_one_alert(rule):
    """Every conductor serves the database's counts alike (and its own
    event counters): a rule over them that kept the target's instance
    (or a Kubernetes pod) fired once per conductor."""
    left = _left_labels(promql_parser.parse(rule['expr']),
                        ('instance', 'pod'))
    assert left == frozenset(), (rule['alert'], left)


def test_two_conductors_scraped_give_one_series(db):
    """The gauge rules run over two conductors' scrapes of one database,
    with every count high (and none in maintenance): one series each,
    with the value one conductor's scrape gives (not twice it)."""
    def scraped(instances):
        return {(name, labels | frozenset(
                    {**_TARGET, 'instance': instance}.items())):
                0 if 'maintained' in name else 1000
                for (name, labels) in _scrape()
                for instance in instances}
    evaluated = 0
    for rule in _conductor_rules():
        expr = promql_parser.parse(rule['expr'])
        try:
            one = _evaluate(expr, scraped(_CONDUCTORS[:1]))
        except (NotImplementedError, KeyError):
            continue            # a function (increase()): checked above
        evaluated += 1
        assert one and _evaluate(expr, scraped(_CONDUCTORS)) == one, \
            rule['alert']
        assert [dict(labels) for labels in one] == [_TARGET], rule['alert']
    assert evaluated >= 5
