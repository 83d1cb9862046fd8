"""The ARQ transition table of doc/source/contract.rst ("To / Only from")
is the conductor's: the states each guarded UPDATE may start from
(cyborg.conductor.arq_binding).  A guard changed without the table, or
the other way round, fails here."""

import pathlib
import re

from cyborg.common import states
from cyborg.conductor import arq_binding

TABLE_PAGE = (pathlib.Path(__file__).resolve().parents[3] / 'doc'
              / 'source' / 'contract.rst')
GUARDS = {
    states.BIND_STARTED: arq_binding.BIND_FROM,
    states.BOUND: arq_binding.BOUND_FROM,
    states.BIND_FAILED: arq_binding.BIND_FAILED_FROM,
    states.UNBOUND: arq_binding.UNBIND_FROM,
    states.UNBIND_FAILED: arq_binding.UNBIND_FAILED_FROM,
    states.DELETING: arq_binding.ANY_STATE,
}


def _table():
    """{to state: [from states]} of the contract's transition table."""
    lines = TABLE_PAGE.read_text().splitlines()
    start = lines.index('To                  Only from')
    rows, to = {}, None
    for line in lines[start + 2:]:
        if line.startswith('='):
            break
        named = re.findall(r'``(\w+)``', line)
        if not line.startswith(' '):
            to, named = named[0], named[1:]
            rows[to] = []
        rows[to] += named
        if 'any state' in line:
            rows[to] = list(states.ARQ_STATES)
    return rows


def test_every_transition_starts_only_where_the_contract_says():
    table = _table()
    assert set(table) == set(GUARDS)
    for to, guard in GUARDS.items():
        assert sorted(table[to]) == sorted(guard), to
