"""Small records the agent keeps on disk."""

import contextlib
import json
import os
import re
import stat
import tempfile

from oslo_log import log as logging

from cyborg.common import wording

LOG = logging.getLogger(__name__)

# What follows ``<record>.`` in the name of a temporary file of
# ``write_json``: ``TMP_MARK`` and ``tempfile.mkstemp``'s random part (8
# of these characters, Python's ``tempfile._RandomNameSequence``).  The
# mark keeps an operator's copy (``agent-h.json.original``: 8 such
# characters too) from ever being taken for one.
TMP_MARK = 'tmp-'
_MKSTEMP_PART = re.escape(TMP_MARK) + r'[a-z0-9_]{8}'
# ... and in that of the agent cache's own, before ``write_json``:
# ``<record>.tmp.<pid>``.
_OLD_TMP_PART = r'tmp\.[0-9]+'


def write_json(path, data, sync_directory=False):
    """Write ``data`` as JSON to ``path`` atomically: into a temporary
    file of its own next to it (``<record name>.tmp-<random>``), synced,
    then renamed into place, so that a reader sees the old record or the
    new one, never half of one, and two writers never mix their writes.
    The directory is made if it is not there (a fresh host's state
    directory).  ``sync_directory``: sync the directory too, so that the
    rename itself survives a crash.  Raises what failed (OSError),
    leaving no temporary file behind."""
    directory = os.path.dirname(path) or '.'
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f'{os.path.basename(path)}.{TMP_MARK}', dir=directory)
    try:
        with os.fdopen(fd, 'w') as f:
            json.dump(data, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_directory:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def remove_leftovers(path):
    """Remove the temporary files of the record at ``path`` that a
    process killed in the middle of a write left next to it (each
    would stay there for ever): those of ``write_json``
    (``<record name>.tmp-<8 random characters>``) and the agent cache's
    of before it (``<record name>.tmp.<pid>``), plain files only, never
    the record itself nor another file.  For the process that writes
    the record, when it starts, before it writes: a write of its own in
    flight would lose its temporary file.  Returns the names removed
    (said in the log); one that cannot be removed is said and left."""
    directory = os.path.dirname(path) or '.'
    leftover = re.compile(r'%s\.(?:%s|%s)' % (
        re.escape(os.path.basename(path)), _MKSTEMP_PART, _OLD_TMP_PART))
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []           # no directory yet (or none to read): none
    removed = []
    for name in names:
        if not leftover.fullmatch(name):
            continue
        found = os.path.join(directory, name)
        try:
            if not stat.S_ISREG(os.lstat(found).st_mode):
                continue
            os.unlink(found)
        except FileNotFoundError:
            continue
        except OSError as exc:
            LOG.warning('Cannot remove %s, a temporary file of %s left by '
                        'a write that did not finish (%s).', found, path,
                        exc)
            continue
        removed.append(name)
    if removed:
        LOG.info('Removed the temporary files of %s left by writes that '
                 'did not finish (a process stopped mid-write): %s.', path,
                 wording.some(removed))
    return removed
