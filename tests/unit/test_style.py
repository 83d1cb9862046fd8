"""The tree passes the project's linter (ruff.toml), as `tox -e pep8` does."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_ruff_finds_nothing():
    ruff = os.path.join(sys.prefix, 'bin', 'ruff')
    result = subprocess.run([ruff, 'check', '--no-cache', '.'], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
