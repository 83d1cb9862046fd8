"""cyborg-dbsync finds the alembic scripts an installed package carries,
wherever the install scheme put its data files: under ``/usr/local`` for a
root ``pip install`` on Debian's python3 (the container image built on a
Debian base), not ``sys.prefix``."""

from importlib import metadata
import os

import pytest

from cyborg.db import migration


def _install(tmp_path, record_lines):
    """An installed distribution as pip leaves it: site-packages with a
    dist-info whose RECORD lists files relative to site-packages."""
    site = tmp_path / 'local' / 'lib' / 'python3' / 'dist-packages'
    info = site / 'cyborg-1.0.0.dist-info'
    info.mkdir(parents=True)
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: cyborg\n'
                                   'Version: 1.0.0\n')
    (info / 'RECORD').write_text(''.join(line + ',,\n'
                                         for line in record_lines))
    return metadata.PathDistribution(info)


@pytest.fixture
def outside_source_tree(tmp_path, monkeypatch):
    # As in an image: no <repo>/alembic next to the package, and the
    # interpreter's prefix holds no share/cyborg.
    monkeypatch.setattr(migration, '_HERE', str(tmp_path / 'pkg' / 'db'))
    monkeypatch.setattr(migration.sys, 'prefix', str(tmp_path / 'usr'))


def test_installed_scripts_found_through_the_distribution_record(
        tmp_path, monkeypatch, outside_source_tree):
    scripts = tmp_path / 'local' / 'share' / 'cyborg' / 'alembic'
    (scripts / 'versions').mkdir(parents=True)
    (scripts / 'env.py').write_text('')
    dist = _install(tmp_path, ['cyborg/__init__.py',
                               '../../../share/cyborg/alembic/env.py'])
    monkeypatch.setattr(migration.metadata, 'distribution',
                        lambda name: dist)
    assert (os.path.realpath(migration.script_location())
            == os.path.realpath(str(scripts)))


def test_no_scripts_anywhere_names_every_place_looked(
        tmp_path, monkeypatch, outside_source_tree):
    dist = _install(tmp_path, ['cyborg/__init__.py'])
    monkeypatch.setattr(migration.metadata, 'distribution',
                        lambda name: dist)
    with pytest.raises(RuntimeError) as exc:
        migration.script_location()
    message = str(exc.value)
    assert os.path.join(str(tmp_path), 'usr', 'share', 'cyborg',
                        'alembic') in message
    assert os.path.join(str(tmp_path), 'alembic') in message
