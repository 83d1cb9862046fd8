"""CPU seconds of processes, from ``/proc`` (Linux): what the benchmarks
measure a service's cost with."""

import os


def _fields(pid):
    """The fields of ``/proc/<pid>/stat`` after the command name (which
    may hold spaces and parentheses): the state is the first."""
    with open(f'/proc/{pid}/stat') as f:
        return f.read().rsplit(')', 1)[1].split()


def cpu_seconds(pid):
    """User + system CPU seconds ``pid`` has used; OSError once it is
    gone."""
    fields = _fields(pid)
    # utime and stime: the 14th and 15th fields of the whole line.
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def children(pid):
    """The pids whose parent is ``pid``."""
    found = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                parent = _fields(entry)[1]
            except OSError:
                continue
            if parent == str(pid):
                found.append(int(entry))
    return found
