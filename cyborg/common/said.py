"""A lasting problem said once, not at every read.

The agent reads some things over and over (its report cache at every
report, a health record, NVML at every discovery): a problem with one
of them that lasts would otherwise fill the log with the same warning.
``Problems`` keeps what was last said of each thing (a record, a GPU)
and says a problem when it starts or changes, not while it stays the
same; the caller says, if it wishes, that it ended (``solved`` returns
what the problem was).
"""

import logging


class Problems:
    """What was last said to be wrong with each of a few things, for the
    log of one object (``log``: its module's logger, so that its lines
    keep their logger).  ``key`` names the thing; ``None`` (the default)
    for an object that watches one.  Not locked: two threads saying the
    same new problem at once may both say it, which costs a line."""

    def __init__(self, log):
        self._log = log
        self._said = {}         # key -> the problem last said

    def say(self, problem, message, *args, key=None,
            level=logging.WARNING):
        """Log ``message % args`` at ``level`` unless ``problem`` (a
        short text that tells one problem from another, never None) is
        what was last said of ``key``.  True when it was said."""
        if self._said.get(key) == problem:
            return False
        self._said[key] = problem
        self._log.log(level, message, *args)
        return True

    def solved(self, key=None):
        """Forget the problem of ``key`` (the next one is said again);
        returns it, None when there was none (for a line that says it
        ended)."""
        return self._said.pop(key, None)

    def __iter__(self):
        """The keys that have a problem (a copy: ``solved`` may be called
        while iterating)."""
        return iter(list(self._said))
