"""State words are spelled once, in cyborg.common.states: no other module
of the service writes an ARQ state or a device status as a string.
('enabled' is left out of the search: option names and driver readings
use the word in its plain sense.)"""

import ast
import os

import cyborg
from cyborg.common import states

PACKAGE = os.path.dirname(cyborg.__file__)
WORDS = frozenset(states.ARQ_STATES + (states.MAINTAINING,))
HOME = os.path.join(PACKAGE, 'common', 'states.py')


def _spelled(tree):
    """Line numbers of string constants that are one of the words, outside
    docstrings and config option help (prose, not values)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(
                    first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in WORDS
            and id(node) not in docstrings]


def test_state_words_are_spelled_only_in_states():
    found = []
    for root, _dirs, files in os.walk(PACKAGE):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith('.py') or path == HOME:
                continue
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            found += [f'{path}:{line}' for line in _spelled(tree)]
    assert not found


def test_the_vocabulary_has_the_wire_words():
    # What Nova and the clients read: a typo here would pass every other
    # test that imports the constants.
    assert states.ARQ_STATES == ('Initial', 'BindStarted', 'Bound',
                                 'Unbound', 'BindFailed', 'UnbindFailed',
                                 'Deleting')
    assert states.DEVICE_STATUSES == ('enabled', 'maintaining')
    assert set(states.ARQ_HOLDING) | set(states.ARQ_RESOLVED) <= set(
        states.ARQ_STATES)
