"""The API reads through cyborg.objects and writes only through the
conductor RPC API (doc/source/architecture.rst, "Who may import
whom")."""

import ast
import os

import cyborg

PACKAGE = os.path.dirname(cyborg.__file__)
FORBIDDEN_MODULES = ('cyborg.db', 'cyborg.placement', 'cyborg.drivers',
                     'cyborg.agent', 'cyborg.conductor.manager')


def _modules(folder, skip=()):
    for root, _dirs, files in os.walk(os.path.join(PACKAGE, folder)):
        for name in files:
            if name.endswith('.py') and name not in skip:
                path = os.path.join(root, name)
                with open(path) as f:
                    yield path, ast.parse(f.read(), path)


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield '%s.%s' % (node.module, alias.name)


def _db_functions(decorator):
    """{module of cyborg.db.api: its functions decorated ``decorator``}."""
    folder = os.path.join(PACKAGE, 'db', 'api')
    found = {}
    for name in os.listdir(folder):
        if not name.endswith('.py'):
            continue
        with open(os.path.join(folder, name)) as f:
            tree = ast.parse(f.read())
        module = 'cyborg.db.api' + ('' if name == '__init__.py'
                                    else '.' + name[:-3])
        found[module] = {
            node.name for node in tree.body
            if isinstance(node, ast.FunctionDef)
            and any(isinstance(d, ast.Name) and d.id == decorator
                    for d in node.decorator_list)}
    return found


def _db_modules(tree):
    """{name bound in the module: the cyborg.db.api module it is}."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in (
                'cyborg.db', 'cyborg.db.api'):
            for alias in node.names:
                module = f'{node.module}.{alias.name}'
                if module.startswith('cyborg.db.api'):
                    bound[alias.asname or alias.name] = module
    return bound


def test_api_imports_no_database_placement_or_driver_module():
    for path, tree in _modules('api'):
        for name in _imports(tree):
            if name.startswith('cyborg.db.models'):
                continue    # constants (device types) only
            assert not name.startswith(FORBIDDEN_MODULES), (path, name)


# Values of cyborg.db.api the objects may read besides reader functions:
# the shared clock, whose measurement is a reader (clock.skew).
READ_ONLY_VALUES = {'cyborg.db.api.clock': {'reference'}}


def test_objects_call_database_readers_only():
    writers = _db_functions('writer')
    readers = _db_functions('reader')
    for module, names in READ_ONLY_VALUES.items():
        readers[module] |= names
    assert any(writers.values()) and any(readers.values())
    calls = 0
    for path, tree in _modules('objects', skip=('inventory.py',)):
        modules = _db_modules(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in modules):
                module = modules[node.value.id]
                assert node.attr not in writers[module], (path, node.attr)
                assert node.attr in readers[module], (path, node.attr)
                calls += 1
    assert calls


def test_objects_make_no_rpc_or_http_calls():
    for path, tree in _modules('objects'):
        for name in _imports(tree):
            assert not name.startswith(('oslo_messaging', 'requests',
                                        'keystoneauth1', 'cyborg.common.rpc',
                                        'cyborg.conductor')), (path, name)
