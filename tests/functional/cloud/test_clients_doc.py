"""doc/source/clients.rst lists every CLI command and SDK method with the
status the conformance tests check (test_cli.STATUS, test_sdk.STATUS)."""

import pathlib
import re

from tests.functional.cloud import test_cli
from tests.functional.cloud import test_sdk

DOC = pathlib.Path(__file__).resolve().parents[3] / 'doc' / 'source' / \
    'clients.rst'
TABLES = {'python-openstackclient': test_cli.STATUS['osc'],
          'python-cyborgclient': test_cli.STATUS['cyborgclient'],
          'openstacksdk': test_sdk.STATUS}


def tables(text):
    """{table title: {name: status}} of the page's list-tables."""
    found = {}
    for block in re.split(r'^\.\. list-table:: ', text, flags=re.M)[1:]:
        title, body = block.split('\n', 1)
        rows = {}
        for row in re.split(r'^   \* - ', body, flags=re.M)[2:]:
            name, status = row.split('\n     - ', 1)
            status = status.split('\n\n', 1)[0]
            rows[name.strip('`')] = ' '.join(status.split())
        found[title.strip()] = rows
    return found


def test_the_page_lists_every_command_and_method_as_tested():
    found = tables(DOC.read_text())
    for prefix, status in TABLES.items():
        titles = [t for t in found if t.startswith(prefix)]
        assert len(titles) == 1, (prefix, list(found))
        assert found[titles[0]] == status
