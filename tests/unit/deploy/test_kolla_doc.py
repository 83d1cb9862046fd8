"""doc/source/deployment/kolla.rst and the Containerfile agree on logs: a
[DEFAULT]log_dir the doc's configurations set exists in the image and each
container the doc runs mounts a volume on it (oslo.log does not create the
directory: a service whose log_dir is missing stops at start)."""

import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir, os.pardir))


def _read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read().replace('\\\n', ' ')


def test_every_log_dir_of_the_doc_is_in_the_image_and_mounted():
    doc = _read('doc', 'source', 'deployment', 'kolla.rst')
    log_dirs = set(re.findall(r'^\s*log_dir = (\S+)$', doc, re.M))
    assert log_dirs == {'/var/log/kolla/cyborg'}
    runs = [line for line in doc.splitlines()
            if line.strip().startswith('$ podman run -d')]
    assert len(runs) == 3
    [made] = [line for line in _read('Containerfile').splitlines()
              if 'useradd' in line]
    for log_dir in log_dirs:
        # Owned by the service's user, created with the state directory.
        assert re.search(r'install -d -o cyborg -g cyborg [^&]*%s'
                         % re.escape(log_dir), made), made
        for run in runs:
            assert re.search(r' -v \S+:%s ' % re.escape(log_dir), run), run
