"""The sandboxes' temporary folders on the host: each named for the harness process that made it,
``lcb-<pid>-<start>-<random>`` in the system's temporary folder (``<start>``: the process's start time, field 22 of
``/proc/<pid>/stat``, in clock ticks since boot, so that a later process given the same pid does not pass for the
owner), and the sweep that removes the ones a dead harness left: a harness killed with ``kill -9`` never runs the
``finally`` that removes its folder (its sandboxes die with it, see :mod:`sandbox.process_mode`'s parent-death
signal).

The sweep (:func:`remove_stale`, run once per harness process before its first sandbox starts) removes a folder
only when its name has that form, it is a real directory (not a link) owned by this user, and the process its name
gives is not running (no such pid, or a pid started at another time). Folders of the older form ``lcb-<random>``
carry no owner and are left alone."""

from __future__ import annotations

import functools
import logging
import os
import re
import stat
import tempfile

from sandbox.cleanup import remove_tree

log = logging.getLogger(__name__)
PREFIX = "lcb-"
_NAME = re.compile(r"lcb-(\d+)-(\d+)-[A-Za-z0-9_]+")


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()  # after "pid (comm)": the name may hold spaces
        return int(fields[19])  # field 22 of the file; fields[0] is field 3 (the state)
    except (OSError, IndexError, ValueError):
        return None


def make_root(folder: str | None = None) -> str:
    """A new, private (0700) temporary folder named for this process (``lcb-<pid>-<start>-<random>``)."""
    pid = os.getpid()
    return tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-{start_time(pid) or 0}-", dir=folder)


def remove_stale(folder: str | None = None, uid: int | None = None) -> list[str]:
    """Remove the sandbox folders in ``folder`` (default: the system's temporary folder) that a harness which no
    longer runs left behind: a name of :func:`make_root`'s form, a real directory owned by ``uid`` (default: this
    process's effective uid), an owner (pid and start time) not running. Returns the paths removed."""
    folder = folder or tempfile.gettempdir()
    uid = os.geteuid() if uid is None else uid
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = _NAME.fullmatch(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            continue
        pid, started = int(match[1]), int(match[2])
        if start_time(pid) == started:
            continue  # its harness still runs
        remove_tree(entry.path)
        removed.append(entry.path)
    if removed:
        log.info("removed %d sandbox folder(s) that killed harnesses left in %s", len(removed), folder)
    return removed


@functools.lru_cache(maxsize=1)
def sweep_once() -> None:
    """:func:`remove_stale` on the system's temporary folder, once per harness process."""
    remove_stale()
