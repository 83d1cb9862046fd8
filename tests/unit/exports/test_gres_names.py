"""Names holding line breaks or other control characters cannot add a
line to ``GET /v2/exports/gres.conf``.

A host name, or a deployable name, is written into the document's
comments (and, made one word, its ``NodeName=``).  The conductor refuses
such names in reports now (tests/unit/conductor/test_hostile_reports.py);
rows stored before it did, or written by other means, used to put a real
gres line (``NodeName=victim Name=gpu ... File=/dev/nvidia0 Count=8``)
into the file every Slurm node reads.  The rows here are written as a
report would leave them, on a real database, and read by the real API.
"""

import pytest
import sqlalchemy as sa
import webob
from sqlalchemy import orm

from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.unit.exports.test_exports import parse_gres_conf

INJECTED = 'NodeName=victim Name=gpu Type=a100 File=/dev/nvidia0 Count=8'
# Every kind of character that ends a line somewhere: C0 (the newline,
# the carriage return, the vertical tab, form feed and record separators
# Python's splitlines() breaks at), DEL, C1 (NEL), the Unicode line and
# paragraph separators; and a tab and an escape, which end no line but
# have no place in a configuration file.
BREAKS = ['\n', '\r', '\r\n', '\x0b', '\x0c', '\x1c', '\x1e', '\x7f',
          '\x85', '\u2028', '\u2029', '\t', '\x1b']

MANAGER = {'X-Project-Id': 'p1', 'X-User-Id': 'u', 'X-Roles': 'manager',
           'OpenStack-API-Version': 'accelerator 2.9'}


@pytest.fixture(scope='module')
def gres_conf():
    """The gres.conf of hosts and deployables named with each of
    ``BREAKS`` before a gres line: one offered, one out of the schedule,
    one with every unit held (the two deployables named in comments)."""
    with api_fixture.api_service() as service:
        for index, char in enumerate(BREAKS):
            host = 'c%d%s%s' % (index, char, INJECTED)
            api_fixture.seed_device(service.engine, host, 'gpu%d' % index,
                                    device_type='GPU', handles=1)
            spare = api_fixture.seed_device(
                service.engine, host, 'spare%d%s%s' % (index, char,
                                                       INJECTED),
                device_type='GPU', handles=1)
            held = api_fixture.seed_device(
                service.engine, host, 'held%d%s%s' % (index, char,
                                                      INJECTED),
                device_type='GPU', handles=1)
            with orm.Session(service.engine) as session, session.begin():
                session.execute(sa.update(models.Device).where(
                    models.Device.id == spare['device_id']).values(
                    status='maintaining'))
                session.execute(sa.update(models.AttachHandle).where(
                    models.AttachHandle.deployable_id ==
                    held['deployable_id']).values(in_use=True))
        response = webob.Request.blank(
            '/v2/exports/gres.conf', headers=MANAGER).get_response(
                service.app)
        assert response.status_int == 200, response.text
        yield response.text


def test_no_name_adds_a_line(gres_conf):
    records = parse_gres_conf(gres_conf)
    # One line per offered deployable, each of its own host.
    assert len(records) == len(BREAKS)
    assert all(r['name'] == 'gpu' and r['count'] == '1' and 'file' not in r
               for r in records), records
    assert not any(r['nodename'] == 'victim' for r in records)
    # Every other line is a comment: the hosts', the two deployables'
    # of each host, and the document's own.
    lines = gres_conf.split('\n')
    assert lines[-1] == ''
    comments = [line for line in lines[:-1] if line.startswith('#')]
    assert len(comments) == 1 + 3 * len(BREAKS), comments
    assert len(comments) + len(records) == len(lines) - 1


def test_the_document_holds_no_control_character(gres_conf):
    """Nothing but printable characters and the newlines ending its
    lines, whatever reads it (splitlines() breaks at more)."""
    assert gres_conf.splitlines() == gres_conf.split('\n')[:-1]
    assert all(c.isprintable() for c in gres_conf.replace('\n', ''))


def test_names_are_shown_escaped_in_comments(gres_conf):
    assert '# c0\\nNodeName=victim' in gres_conf
    assert '# spare0\\nNodeName=victim' in gres_conf
    assert '# held9\\u2028NodeName=victim' in gres_conf
    assert '# c12\\x1bNodeName=victim' in gres_conf
