"""Small records the agent keeps on disk."""

import contextlib
import json
import os
import tempfile


def write_json(path, data, sync_directory=False):
    """Write ``data`` as JSON to ``path`` atomically: into a temporary
    file of its own next to it, synced, then renamed into place, so that
    a reader sees the old record or the new one, never half of one, and
    two writers never mix their writes.  ``sync_directory``: sync the
    directory too, so that the rename itself survives a crash.  Raises
    what failed (OSError), leaving no temporary file behind."""
    directory = os.path.dirname(path) or '.'
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + '.',
                               dir=directory)
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
