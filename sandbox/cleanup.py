"""The end of a sandbox: why its driver ended, killing every process it left (whatever their session or uid) and
removing its temporary directory."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable

from sandbox import cgroup
from sandbox.isolation import Isolation
from sandbox.proctree import children, tree, zombie

log = logging.getLogger(__name__)


def exit_reason(proc: subprocess.Popen) -> str:
    """How the sandbox ended when its result channel closed before the run was over (one line)."""
    try:
        code = proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        return "the program closed the result channel"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code > 128:  # process mode: its PID 1 passes on a signal that killed the driver as 128 + the signal
        try:
            return f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    return f"exited with status {code} before reporting"


def terminate(proc: subprocess.Popen, iso: Isolation, uid: int | None, unit: cgroup.Unit | None = None) -> None:
    """Kill whatever the run left. With a cgroup: every task in it. bwrap: killing its PID-namespace init takes
    every process inside with it, and bwrap exits only once they are gone. process: the process group (its PID 1
    with it: the kernel then kills the rest of the namespace), then every process of the fresh uid. Returns once
    every process of the tree is gone."""
    found = tree(proc.pid) if proc.poll() is None else []
    if unit is not None:
        unit.kill()
    if iso.mode == "bwrap" and proc.poll() is None:
        for child in children(proc.pid):
            _kill(child, lambda p: os.kill(p, signal.SIGKILL))
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("bwrap did not exit after its sandbox was killed; killing its process group")
    _kill(proc.pid, lambda p: os.killpg(p, signal.SIGKILL))
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    if iso.mode == "process" and uid is not None and unit is None:  # a cgroup holds every process of the uid
        reap_uid(uid)
    deadline = time.monotonic() + 10
    for pid in found[1:]:  # a process with much memory takes a moment to die
        while not zombie(str(pid)) and time.monotonic() < deadline:
            time.sleep(0.005)


def _kill(pid: int, how: Callable[[int], None]) -> None:
    try:
        how(pid)
    except (ProcessLookupError, PermissionError):
        pass


def reap_uid(uid: int, rounds: int = 200) -> None:
    """SIGKILL every live process owned by ``uid`` until none is left (a fork loop is bounded by RLIMIT_NPROC;
    zombies are skipped: they are dead and wait for their parent)."""
    for _ in range(rounds):
        pids = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.stat(f"/proc/{name}").st_uid == uid and not zombie(name):
                        pids.append(int(name))
                except OSError:
                    continue
        if not pids:
            return
        for pid in pids:
            _kill(pid, lambda p: os.kill(p, signal.SIGKILL))
        time.sleep(0.005)
    log.warning("processes of sandbox uid %d survived %d kill rounds", uid, rounds)


def remove_tree(path: str) -> None:
    """Remove the sandbox's temporary directory, opening folders a program closed (0000) on the way."""
    try:
        shutil.rmtree(path)
    except OSError:
        for dirpath, _dirs, _files in os.walk(path):
            try:
                os.chmod(dirpath, 0o700)
            except OSError:
                pass
        shutil.rmtree(path, ignore_errors=True)
