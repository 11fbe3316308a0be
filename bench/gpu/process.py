"""Stage processes that die with their parent.

Each stage runs in its own session (its own process group), which the parent kills whole when the stage ends, when
its limit passes, and on the parent's own exit paths (normal return, an exception, Ctrl-C, SIGTERM or SIGHUP from
``timeout`` or SLURM, and ``atexit``). A parent killed outright (SIGKILL) runs none of these: for that the stage
asks Linux to kill it when its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, :func:`die_with_parent`), and exits
at once if its parent died before it asked."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

log = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
LIVE: set[int] = set()  # process groups of the stages running now


def die_with_parent(parent_pid: int) -> None:
    """In a stage's process, first thing: be killed when the parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != parent_pid:
        os._exit(3)


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (a stage and whatever it started), if any of it is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    LIVE.discard(pgid)


def kill_all() -> None:
    for pgid in list(LIVE):
        kill_group(pgid)


def _exit_on(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through run_stage's finally, which kills the stage's group


@contextlib.contextmanager
def stage_groups_die_with_us() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP end this process through its ``finally`` clauses (SIGINT already does, as
    KeyboardInterrupt), and every live stage group is killed on the way out (and by ``atexit``)."""
    old = {s: signal.signal(s, _exit_on) for s in (signal.SIGTERM, signal.SIGHUP)}
    atexit.register(kill_all)
    try:
        yield
    finally:
        kill_all()
        for s, handler in old.items():
            signal.signal(s, handler)
        atexit.unregister(kill_all)


def run_process(cmd: Sequence[str], limit_s: float, cwd: Path) -> tuple[int | None, float]:
    """Run ``cmd`` in its own session, killed with its group at ``limit_s`` seconds or when this process leaves:
    (exit code, None when stopped at the limit; wall seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), cwd=cwd, start_new_session=True)
    LIVE.add(proc.pid)
    try:
        code = proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        kill_group(proc.pid)  # also what the stage left behind (e.g. compile workers) once it exited
        proc.wait()
    return code, time.perf_counter() - start
