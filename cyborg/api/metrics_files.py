"""The API's multiprocess metrics directory (``PROMETHEUS_MULTIPROC_DIR``):
the files of a previous run removed at start, and the files of each
worker that is gone folded into archives.

prometheus_client's multiprocess mode has each worker process record into
files of its own there, one per metric type and process id
(``counter_1234.db``), and ``/metrics`` sums every file
(``cyborg.api.metrics``).  A worker that dies leaves its files behind.
Their counts must still be summed (a counter that goes down reads as a
reset, and ``rate()`` jumps), but a set of files per worker ever started
(each worker replaced, each one gunicorn's ``max_requests`` recycles)
filled the directory, and every scrape read all of them, until the
service restarted.  So when a worker is gone, whoever reaped it
(``cyborg-api``'s parent; under gunicorn, its ``child_exit`` hook) calls
``worker_exited``:

- the files of its live gauges are removed (prometheus_client's
  ``mark_process_dead``), as prometheus_client documents;
- its counters, histograms and summaries are added into one archive
  file per type (``counter_archive.db``), which the collector sums as it
  does a worker's, and its files are removed.  The directory holds the
  files of the live workers plus three.

The archive holds what ``MultiProcessCollector.merge(files,
accumulate=False)`` makes of the files: each value added to the value of
the same key, the key as the workers wrote it (a counter; a summary's
count and sum; a histogram's count in each bucket, not accumulated, and
its sum).  Nothing else is in these files: multiprocess mode records no
``_created``.  A dead worker's gauges of the other modes (``all``,
``min``, ``max``, ``sum``, ``mostrecent``) are left as prometheus_client
leaves them, summed or shown by pid for ever: the API records none.

Folding a worker's files in and removing them are two steps that a scrape
must not fall between: it would count the worker twice, or not at all.
Scrapes read the files under a shared lock of ``LOCK_FILE``
(``reading``), which a fold takes exclusively; neither waits for it
longer than ``LOCK_WAIT``.  The new archive is written aside and renamed
over the old one, so that none is ever read half written.

This module imports nothing of the API, so that gunicorn's master can
load it for its hook without importing the application.
"""

import contextlib
import fcntl
import os
import re
import time

from oslo_log import log as logging
from prometheus_client import mmap_dict
from prometheus_client import multiprocess

LOG = logging.getLogger(__name__)

MULTIPROC_ENV = 'PROMETHEUS_MULTIPROC_DIR'
# Where the dead workers' counts go: a pseudo process id in the names the
# collector reads (``counter_archive.db``).
ARCHIVE = 'archive'
# The metric types whose counts outlive their worker in the archive.
ARCHIVED = ('counter', 'histogram', 'summary')
# Taken shared by scrapes, exclusively by a fold; not a ``*.db`` name.
LOCK_FILE = '.cyborg-metrics.lock'
# Seconds a fold or a scrape waits for the lock at most (each holds it
# for milliseconds): a process stopped while holding it must hold up
# neither the parent that replaces workers nor the scrapes.  A fold then
# leaves the worker's files (still summed); a scrape reads anyway.
LOCK_WAIT = 5.0
_LOCK_POLL = 0.01
# The names of the files prometheus_client's multiprocess mode writes: one
# per metric type (a gauge's with its multiprocess mode) and process id,
# ``counter_1234.db``; ours: the archives, and an archive being written
# (``.db.new``, which no scrape reads).  Nothing else in the directory is
# touched.
_MULTIPROC_FILE = re.compile(
    r'(?:counter|histogram|summary|gauge_[a-z]+)_(?:[0-9]+|%s)\.db'
    r'(?:\.new|\.folding)?\Z' % ARCHIVE)


def empty_multiproc_dir():
    """Remove from ``PROMETHEUS_MULTIPROC_DIR`` (when set) the files
    prometheus_client wrote there (``_MULTIPROC_FILE``): those of a
    previous run.  Only for the process that forks the workers, before it
    forks any, with the directory its own: a running worker's file
    removed would lose its counts from then on.  Returns how many went;
    a file that cannot be removed is logged, not raised."""
    path = os.environ.get(MULTIPROC_ENV)
    if not path:
        return 0
    try:
        entries = list(os.scandir(path))
    except OSError as exc:
        LOG.warning('%s=%s cannot be read (%s): the metrics files of a '
                    'previous run are left there', MULTIPROC_ENV, path, exc)
        return 0
    removed = 0
    for entry in entries:
        if not (_MULTIPROC_FILE.match(entry.name)
                and entry.is_file(follow_symlinks=False)):
            continue
        try:
            os.remove(entry.path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            LOG.warning('Metrics file %s of a previous run cannot be '
                        'removed (%s): its counts are added to this '
                        'run\'s', entry.path, exc)
            continue
        removed += 1
    if removed:
        LOG.info('Removed %d metrics file(s) of a previous run from %s',
                 removed, path)
    return removed


def worker_exited(pid, path=None):
    """A worker process ``pid`` is gone (reaped): remove its live gauges'
    files and fold its counts into the archives (see the module), in
    ``path`` (``PROMETHEUS_MULTIPROC_DIR`` when None; nothing when
    unset).  Returns how many of its files were folded in.  Never
    raises: files that cannot be folded in stay, summed as before."""
    path = path or os.environ.get(MULTIPROC_ENV)
    if not path:
        return 0
    try:
        multiprocess.mark_process_dead(pid, path)
        with _locked(path, fcntl.LOCK_EX) as locked:
            if not locked:
                LOG.warning('The metrics files of worker %d stay in %s: '
                            'a scrape held them for %s s', pid, path,
                            LOCK_WAIT)
                return 0
            return sum(_fold(path, kind, pid) for kind in ARCHIVED)
    except Exception:
        LOG.exception('The metrics files of worker %d in %s could not be '
                      'archived; they stay there, still summed', pid, path)
        return 0


def child_exit(server, worker):
    """gunicorn's ``child_exit`` hook: ``worker_exited`` for the worker
    its master reaped.  In gunicorn's configuration file:
    ``from cyborg.api.metrics_files import child_exit``."""
    worker_exited(worker.pid)


def reading(path):
    """A context in which the files of ``path`` are read as a whole: no
    fold happens meanwhile (unless one held the lock ``LOCK_WAIT``)."""
    return _locked(path, fcntl.LOCK_SH)


@contextlib.contextmanager
def _locked(path, how):
    """``LOCK_FILE`` of ``path`` locked ``how`` (shared, exclusive) while
    the block runs, waiting ``LOCK_WAIT`` for it at most; yields whether
    it holds it (not where it cannot be opened: a directory another user
    made read-only for this one)."""
    try:
        # Read-only is enough to lock it, for a worker that runs as
        # another user than the master that made it.
        fd = os.open(os.path.join(path, LOCK_FILE),
                     os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError as exc:
        LOG.debug('Metrics lock %s cannot be opened (%s)', path, exc)
        yield False
        return
    try:
        yield _lock(fd, how)
    finally:
        os.close(fd)        # unlocks


def _lock(fd, how):
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_LOCK_POLL)


def _fold(path, kind, pid):
    """Add the values of ``pid``'s file of ``kind`` to the archive of
    ``kind`` and remove the file; 1 when there was one, else 0.

    The file is first renamed out of what the collector sums (a name not
    ending in ``.db``), then the archive replaced: a step that fails
    leaves its counts summed once, in the file (the rename failed) or in
    the archive (the removal after it failed: a leftover ``.folding``
    file, which the next start removes), never in both."""
    dead = os.path.join(path, f'{kind}_{pid}.db')
    if not os.path.exists(dead):
        return 0
    archive = os.path.join(path, f'{kind}_{ARCHIVE}.db')
    folding = dead + '.folding'
    os.replace(dead, folding)
    try:
        _add_into(archive, folding)
    except BaseException:
        os.replace(folding, dead)       # summed as before
        raise
    with contextlib.suppress(OSError):
        os.remove(folding)
    return 1


def _add_into(archive, dead):
    """Write the archive again with ``dead``'s values added."""
    totals = {}
    for name in (archive, dead):
        if not os.path.exists(name):
            continue
        for key, value, _timestamp, _pos in (
                mmap_dict.MmapedDict.read_all_values_from_file(name)):
            totals[key] = totals.get(key, 0.0) + value
    written = archive + '.new'
    with contextlib.suppress(FileNotFoundError):
        os.remove(written)      # a fold cut short
    values = mmap_dict.MmapedDict(written)
    try:
        for key, value in totals.items():
            values.write_value(key, value, 0.0)
    finally:
        values.close()
    os.replace(written, archive)
