"""etc/prometheus/cyborg-alerts.yaml: each rule's PromQL parses, and every
metric it reads is one cyborg serves, with labels the metric has and
label values the code can give it (so a renamed metric or state breaks
this test, not an operator's alerting)."""

import pathlib

import prometheus_client as prom
import promql_parser
import pytest
import yaml

from cyborg.common import metrics, states
from cyborg.conductor import metrics_collector
from cyborg.drivers import nvml_health

RULES = (pathlib.Path(__file__).resolve().parents[2] / 'etc' /
         'prometheus' / 'cyborg-alerts.yaml')
# The label values the code can give, where it names them in one place.
KNOWN_VALUES = {'health': states.HEALTH_STATES,
                'severity': states.SEVERITIES,
                'reason': tuple(nvml_health.CLOCK_EVENTS)}
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


@pytest.mark.parametrize('rule', _rules(), ids=lambda rule: rule['alert'])
def test_every_rule_reads_what_cyborg_serves(db, rule):
    served = _served(db)
    selectors = list(_selectors(promql_parser.parse(rule['expr'])))
    assert selectors, rule['expr']
    for selector in selectors:
        assert selector.name in served, (
            f'{rule["alert"]}: {selector.name} is not a metric cyborg '
            f'serves')
        for matcher in selector.matchers.matchers:
            assert matcher.name in served[selector.name], (
                f'{rule["alert"]}: {selector.name} has no label '
                f'{matcher.name}')
            known = KNOWN_VALUES.get(matcher.name)
            if known is not None:
                for value in matcher.value.split('|'):
                    assert value in known, (
                        f'{rule["alert"]}: {matcher.name}={value!r} is '
                        f'never given')


def test_the_collector_and_the_registry_are_both_read(db):
    served = _served(db)
    assert served['cyborg_conductor_devices'] == {'health'}
    assert served['cyborg_conductor_maintained_devices'] == {'health'}
    assert served['cyborg_conductor_programmings_total'] == {'outcome'}
    assert 'cyborg_conductor_devices_total' not in served
