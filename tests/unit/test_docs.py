"""The documentation and the release notes build without a warning.

The same builds as ``tox -e docs`` and ``tox -e releasenotes``, run inside
the test suite so that CI (which runs only ``tools/run-tests.sh``) checks
them: Sphinx with warnings as errors, into a temporary directory, and
``reno lint``.  Each runs in a process of its own, from the repository
root (reno finds the repository there).
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _run(*argv, timeout=300):
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _sphinx(source, out):
    result = _run(sys.executable, '-m', 'sphinx', '-W', '--keep-going',
                  '-q', '-b', 'html', '-d', str(out / 'doctrees'), source,
                  str(out / 'html'))
    assert result.returncode == 0, (
        'sphinx-build of %s failed (warnings are errors):\n%s%s'
        % (source, result.stdout, result.stderr))
    return out / 'html'


def test_documentation_builds_without_warnings(tmp_path):
    html = _sphinx('doc/source', tmp_path)
    # The generated references came out with content in them.
    configuration = (html / 'reference' / 'configuration.html').read_text()
    assert 'enabled_drivers' in configuration
    policy = (html / 'reference' / 'policy.html').read_text()
    assert 'cyborg:arq:create' in policy
    api = (html / 'reference' / 'api.html').read_text()
    assert 'PATCH /v2/accelerator_requests' in api
    notes = (html / 'releasenotes.html').read_text()
    assert 'New Features' in notes


def test_release_notes_lint_and_build(tmp_path):
    lint = _run(os.path.join(sys.prefix, 'bin', 'reno'), 'lint')
    assert lint.returncode == 0, lint.stdout + lint.stderr
    html = _sphinx('releasenotes/source', tmp_path)
    assert 'New Features' in (html / 'index.html').read_text()
