"""The list of deployables, paged by every sort key in both directions, on
every database: walking the pages from marker to marker gives the whole
list in order, each row once.  The page's statement compares (sort key,
id) with the marker's as a row value; created_at ties (rows written in
the same second) are broken by id, and updated_at's NULL (never updated)
sorts as the earliest time on every database."""

import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy import orm

from cyborg.common import context as cyborg_context
from cyborg.db import models
from cyborg.objects.deployables import SORT_KEYS, Deployable
from tests.fixtures import api as api_fixture

NAMES = ['delta', 'alpha', 'echo', 'bravo', 'charlie']
T0 = datetime.datetime(2026, 11, 28, 12, 0, 0)


def _seed(engine):
    for index, name in enumerate(NAMES):
        seeded = api_fixture.seed_device(engine, 'host%d' % index, name,
                                         handles=1 + index % 2)
        # The last three share a creation time: id must break the tie.
        created = T0 + datetime.timedelta(seconds=min(index, 2))
        with orm.Session(engine) as session, session.begin():
            session.execute(
                sa.update(models.Deployable)
                .where(models.Deployable.id == seeded['deployable_id'])
                .values(created_at=created,
                        updated_at=created if index % 2 else None))


def _key(deployable, sort_key):
    # NULL first when ascending; a time never compared with None.
    value = getattr(deployable, sort_key)
    return (value is not None, value if value is not None else 0,
            deployable.id)


def _walk(context, sort_key, sort_dir, limit):
    seen, marker = [], None
    while True:
        page = Deployable.list(context, limit=limit, marker=marker,
                               sort_key=sort_key, sort_dir=sort_dir)
        seen.extend(page)
        if len(page) < limit:
            return seen
        marker = page[-1].uuid


@pytest.mark.parametrize('db_kind', ['sqlite', 'mysql', 'postgresql'])
def test_pages_walk_the_whole_list_in_order_by_every_key(db_kind):
    with api_fixture.database_in_use(db_kind) as engine:
        _seed(engine)
        context = cyborg_context.get_admin_context()
        everything = Deployable.list(context)
        assert sorted(d.name for d in everything) == sorted(NAMES)
        for sort_key in SORT_KEYS:
            for sort_dir in ('asc', 'desc'):
                whole = Deployable.list(context, sort_key=sort_key,
                                        sort_dir=sort_dir)
                keys = [_key(d, sort_key) for d in whole]
                assert keys == sorted(keys, reverse=sort_dir == 'desc'), (
                    sort_key, sort_dir)
                for limit in (1, 2):
                    walked = _walk(context, sort_key, sort_dir, limit)
                    assert [d.uuid for d in walked] == \
                        [d.uuid for d in whole], (sort_key, sort_dir, limit)
        # Attributes and health come with each row of a page.
        [first] = Deployable.list(context, limit=1, sort_key='name')
        assert first.name == 'alpha'
        assert dict(first.attributes) == {'rc': 'FPGA',
                                          'trait0': 'CUSTOM_FAKE_DEVICE'}
        assert Deployable.get(context, first.uuid) == first
        assert Deployable.get_by_id(context, first.id) == first
        # A marker that names no deployable: None (the API's 400).
        assert Deployable.list(context, marker=first.uuid.replace(
            first.uuid[:8], '00000000'), limit=1) is None
