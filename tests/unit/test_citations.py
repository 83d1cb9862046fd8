"""No file cites design documents that are not in the repository.

The design lives in ``doc/source/`` (the wire contract, the architecture,
the decisions); code and tests cite those pages, e.g.
``(doc/source/contract.rst, "Placement")``.  Earlier files cited documents
kept outside the repository, which nobody with a clone can read; this test
keeps them from coming back.
"""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# Spelled in pieces so that this file does not match itself.
_NAMES = ('CONTR' + 'ACT', 'DES' + 'IGN.md', 'sha' + 'red/')
FORBIDDEN = re.compile('|'.join(re.escape(n) for n in _NAMES))



# Not part of the repository when git cannot say (a source tarball).
_SKIPPED_DIRS = {'.git', '.venv', '.tox', '.eggs', 'build', 'dist', 'cover',
                 '__pycache__', '.pytest_cache', '.ruff_cache'}


def _repository_files():
    """Tracked files and new ones git does not ignore; without git, every
    file outside build and tool directories."""
    try:
        listed = subprocess.run(
            ['git', 'ls-files', '--cached', '--others', '--exclude-standard',
             '-z'], cwd=ROOT, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.CalledProcessError):
        return list(_walk())
    return [p for p in listed.stdout.decode().split('\0')
            if p and os.path.isfile(os.path.join(ROOT, p))]


def _walk():
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS and
                   not d.endswith('.egg-info')]
        for name in files:
            yield os.path.relpath(os.path.join(top, name), ROOT)


def _citing(path):
    try:
        with open(os.path.join(ROOT, path), encoding='utf-8') as f:
            text = f.read()
    except (UnicodeDecodeError, OSError):
        return []
    return ['%s:%d: %s' % (path, number, line.strip())
            for number, line in enumerate(text.splitlines(), 1)
            if FORBIDDEN.search(line)]


def test_no_file_cites_documents_outside_the_repository():
    files = _repository_files()
    assert 'README.rst' in files
    found = {}
    for path in files:
        lines = _citing(path)
        if lines:
            found[path] = lines
    new = [line for path, lines in sorted(found.items())
           for line in lines]
    assert not new, (
        'cite the pages under doc/source/ instead:\n' + '\n'.join(new))

