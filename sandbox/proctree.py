"""A sandbox's processes as ``/proc`` shows them: the tree below its root, the CPU time that tree has used, and
whether a process is already dead (a zombie waiting for its parent)."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree(root: int) -> list[int]:
    """``root`` and every process below it (children of each of their threads), from ``/proc``."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by ``root`` and every process below it (user + system, with the children each has
    reaped): the sandbox's own clock. Everything a program starts stays below its sandbox's root (a PID namespace
    whose init reaps), so ``setsid`` and double forks are counted; another sample's processes never are."""
    total = 0
    for pid in tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except (OSError, ValueError, IndexError):
            continue
    return total / CLK_TCK


def children(pid: int) -> list[int]:
    """The direct children of ``pid``'s main thread (empty when it is gone)."""
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def zombie(pid: str) -> bool:
    """A process that has exited and waits to be reaped by its parent (nothing left to kill)."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True
