"""Counters that alerts read with increase() are served at 0 before their
first event: Prometheus sees no increase in a series that first appears
already at 1, so the alert on the first such event would never fire
(etc/prometheus/cyborg-alerts.yaml)."""

import os
import subprocess
import sys

from prometheus_client import parser

from cyborg.common import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
# What a conductor serves right after it starts, in a fresh process (this
# one's registry has counted what other tests did).
CHILD = ('from cyborg.common import metrics; '
         'print(metrics.render(metrics.CONDUCTOR)[1].decode())')


def test_programmings_of_every_outcome_are_served_at_zero_at_start():
    done = subprocess.run([sys.executable, '-c', CHILD], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    served = {sample.labels['outcome']: sample.value
              for family in parser.text_string_to_metric_families(
                  done.stdout)
              for sample in family.samples
              if sample.name == 'cyborg_conductor_programmings_total'}
    # The outcomes cyborg.conductor.programming counts.
    outcomes = ('programmed', 'failed', 'outcome_unknown', 'abandoned')
    assert served == dict.fromkeys(outcomes, 0)
    assert set(metrics.PROGRAMMING_OUTCOMES) == set(outcomes)
