"""``cyborg-dbsync upgrade --revision`` names its target as alembic
reads it: a unique start of an id (``2967``) or an id relative to
another (``head-1``, ``-1``, ``d4b8+1``) naming an older revision than
the database's is a downgrade, refused as one; such a target was taken
for an unknown name, nothing was done and the command said the schema
was at its revision, as if it had done what was asked."""

import pytest

from cyborg.db import migration

HEAD = migration.head()
# Oldest first.
ORDER = [script.revision
         for script in migration._scripts().walk_revisions()][::-1]
FIRST, PREVIOUS = ORDER[0], ORDER[-2]


@pytest.mark.parametrize('target', [
    FIRST[:4], PREVIOUS, PREVIOUS[:6], 'head-1', '-1', f'{HEAD[:6]}-2',
    'base+1', 'base', f'{FIRST}-1'])
def test_an_older_revision_however_named_is_refused(target):
    with pytest.raises(migration.UpgradeRefused,
                       match='downgrades are not supported'):
        migration.check_upgrade(HEAD, target)


@pytest.mark.parametrize('target', [
    'head', 'heads', HEAD, HEAD[:6], f'{PREVIOUS}+1', '+1', 'no-such'])
def test_the_database_s_own_revision_or_a_newer_one_passes(target):
    # A target alembic cannot resolve ('+1' past head, an unknown name)
    # is left to alembic, which says why it cannot go there.
    migration.check_upgrade(HEAD, target)


def test_relative_targets_count_from_the_database_s_revision():
    assert migration._named('-1', HEAD) == PREVIOUS
    assert migration._named('+1', PREVIOUS) == HEAD
    migration.check_upgrade(PREVIOUS, '+1')
    migration.check_upgrade(PREVIOUS, HEAD[:5])
    with pytest.raises(migration.UpgradeRefused):
        migration.check_upgrade(PREVIOUS, '-1')
