"""One accounting unit per sandbox: its own cgroup, and the entry command that puts the sandbox in it.

Each sandbox runs in a fresh cgroup below the harness's own (cgroup v2 where the memory and pids controllers can be
enabled there, else v1's ``cpuacct``, ``memory`` and ``pids`` hierarchies). Every task the program starts is in it,
reaped or not, whatever its session, uid or PID namespace, so the sandbox's CPU time, memory and task count are read
and bounded there: a child reaped by the kernel (``SIGCHLD`` ignored) still charges its CPU time, and ``memory_mb``
bounds the whole sandbox (every process, its tmpfs pages and page tables), not each process. At the end every task in
it is killed and the cgroup removed.

Where no cgroup can be made (not root and nothing delegated, no such controllers), one warning says so and the
sandbox keeps the per-process limits (rlimits) and the CPU clock summed over its process tree.

:func:`entry_prefix` is the command every sandbox starts with: it joins the cgroup (before anything of the sandbox
runs, so no task escapes it), joins a fresh anonymous session keyring (nothing of the harness's keys is even
possessed by the program), then execs the sandbox's launcher. perl where present (a few ms), else the interpreter.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass

from sandbox import seccomp

log = logging.getLogger(__name__)

V1_CONTROLLERS = ("cpuacct", "memory", "pids")
PIDS_OVERHEAD = 16  # tasks of the sandbox itself (entry, bwrap or unshare, the launcher, the driver and its threads)
_counter = itertools.count()


@dataclass(frozen=True)
class Base:
    """Where sandbox cgroups are made: v2 (one folder) or v1 (one folder per controller of :data:`V1_CONTROLLERS`)."""

    version: int
    dirs: tuple[tuple[str, str], ...]  # (controller, folder); v2: (("", folder),)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, super options) of every cgroup mount, from ``/proc/self/mountinfo``."""
    out = []
    try:
        text = open("/proc/self/mountinfo", encoding="utf-8").read()
    except OSError:
        return out
    for line in text.splitlines():
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            out.append((fields[4].replace("\\040", " "), rest[0], set(rest[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under ``""`` its v2 path (``/proc/self/cgroup``)."""
    out: dict[str, str] = {}
    try:
        lines = open("/proc/self/cgroup", encoding="utf-8").read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                out[name] = parts[2]
    return out


def _writable(folder: str) -> bool:
    probe = os.path.join(folder, f"lcb-probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return True


def _v2_base(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> tuple[Base | None, str]:
    point = next((m for m, kind, _ in mounts if kind == "cgroup2"), None)
    if point is None or "" not in own:
        return None, "no cgroup v2 mount"
    folder = os.path.normpath(point + own[""])
    try:
        available = open(os.path.join(folder, "cgroup.controllers"), encoding="utf-8").read().split()
        enabled = open(os.path.join(folder, "cgroup.subtree_control"), encoding="utf-8").read().split()
    except OSError as exc:
        return None, f"cgroup v2 at {folder}: {exc.strerror}"
    missing = [c for c in ("memory", "pids") if c not in enabled]
    if [c for c in missing if c not in available]:
        return None, f"cgroup v2 at {folder} lacks the memory or pids controller"
    if missing:
        try:
            with open(os.path.join(folder, "cgroup.subtree_control"), "w", encoding="utf-8") as fh:
                fh.write(" ".join(f"+{c}" for c in missing))
        except OSError as exc:
            return None, f"cgroup v2 at {folder}: cannot enable {', '.join(missing)} ({exc.strerror})"
    if not _writable(folder):
        return None, f"cgroup v2 at {folder} is not writable"
    return Base(2, (("", folder),)), ""


def _v1_base(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> tuple[Base | None, str]:
    dirs = []
    for controller in V1_CONTROLLERS:
        point = next((m for m, kind, opts in mounts if kind == "cgroup" and controller in opts), None)
        if point is None or controller not in own:
            return None, f"no cgroup v1 {controller} hierarchy"
        folder = os.path.normpath(point + own[controller])
        if not _writable(folder):
            return None, f"cgroup v1 {controller} at {folder} is not writable"
        dirs.append((controller, folder))
    return Base(1, tuple(dirs)), ""


@functools.lru_cache(maxsize=1)
def base() -> Base | None:
    """Where this process makes sandbox cgroups, or None (logged once, with the reason)."""
    mounts, own = _mounts(), _own_paths()
    found, why2 = _v2_base(mounts, own)
    if found is None:
        found, why1 = _v1_base(mounts, own)
    if found is None:
        log.warning("LiveCodeBench sandboxes run without a cgroup of their own (%s; %s): CPU time is summed over "
                    "each sandbox's live processes and memory is bounded per process only", why2, why1)
    else:
        _remove_stale(found)
    return found


def _remove_stale(found: Base) -> None:
    """Remove the sandbox cgroups a killed harness left (``lcb-<pid>-<n>`` of a pid no longer running: its
    sandboxes died with it, so they are empty)."""
    for _, folder in found.dirs:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            parts = name.split("-")
            if len(parts) == 3 and parts[0] == "lcb" and parts[1].isdigit() and not os.path.exists(
                    f"/proc/{parts[1]}"):
                try:
                    os.rmdir(os.path.join(folder, name))
                except OSError:
                    pass


@dataclass(frozen=True)
class Unit:
    """One sandbox's cgroup (see the module docstring)."""

    version: int
    dirs: tuple[tuple[str, str], ...]  # (controller, folder)

    def _dir(self, controller: str) -> str:
        return next(d for c, d in self.dirs if c in (controller, ""))

    @property
    def procs_files(self) -> list[str]:
        """The files the entry command writes its pid to."""
        return [os.path.join(d, "cgroup.procs") for _, d in self.dirs]

    def cpu_s(self) -> float:
        """CPU seconds used by every task that ever ran in the unit (user + system)."""
        try:
            if self.version == 2:
                with open(os.path.join(self._dir(""), "cpu.stat"), encoding="utf-8") as fh:
                    for line in fh:
                        if line.startswith("usage_usec "):
                            return int(line.split()[1]) / 1e6
                return 0.0
            with open(os.path.join(self._dir("cpuacct"), "cpuacct.usage"), encoding="utf-8") as fh:
                return int(fh.read()) / 1e9
        except (OSError, ValueError):
            return 0.0

    def memory_peak(self) -> int:
        """Highest memory charged to the unit so far, in bytes (0 where the kernel does not say)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            with open(os.path.join(self._dir("memory"), name), encoding="utf-8") as fh:
                return int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self._dir("pids"), "cgroup.procs"), encoding="utf-8") as fh:
                return [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            return []

    def kill(self, timeout_s: float = 10.0) -> None:
        """SIGKILL every task in the unit until none is left (a fork loop is bounded by ``pids.max``)."""
        deadline = time.monotonic() + timeout_s
        if self.version == 2:
            try:
                with open(os.path.join(self._dir(""), "cgroup.kill"), "w", encoding="utf-8") as fh:
                    fh.write("1")
            except OSError:
                pass
        while time.monotonic() < deadline:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.002)
        log.warning("tasks of sandbox cgroup %s survived %.0f s of kills", self._dir(""), timeout_s)

    def remove(self) -> None:
        """Kill what is left and remove the cgroup folders (a dying task holds one for a moment)."""
        self.kill()
        for _, folder in self.dirs:
            for _ in range(500):
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.002)
            else:
                log.warning("could not remove the sandbox cgroup %s", folder)


def _write(folder: str, name: str, value: str) -> bool:
    try:
        with open(os.path.join(folder, name), "w", encoding="utf-8") as fh:
            fh.write(value)
        return True
    except OSError:
        return False


def make_unit(memory_bytes: int, max_tasks: int) -> Unit | None:
    """A fresh cgroup bounded to ``memory_bytes`` (no swap) and ``max_tasks`` tasks, or None where
    :func:`base` is None or the folder cannot be made."""
    found = base()
    if found is None:
        return None
    name = f"lcb-{os.getpid()}-{next(_counter)}"
    made: list[tuple[str, str]] = []
    try:
        for controller, parent in found.dirs:
            folder = os.path.join(parent, name)
            os.mkdir(folder)
            made.append((controller, folder))
    except OSError as exc:
        log.warning("could not make a sandbox cgroup under %s: %s", found.dirs[0][1], exc)
        Unit(found.version, tuple(made)).remove()
        return None
    unit = Unit(found.version, tuple(made))
    ok = True
    if found.version == 2:
        folder = made[0][1]
        ok &= _write(folder, "memory.max", str(memory_bytes))
        _write(folder, "memory.swap.max", "0")  # absent without swap accounting
        ok &= _write(folder, "pids.max", str(max_tasks))
    else:
        memory, pids = unit._dir("memory"), unit._dir("pids")
        ok &= _write(memory, "memory.limit_in_bytes", str(memory_bytes))
        _write(memory, "memory.memsw.limit_in_bytes", str(memory_bytes))  # absent without swap accounting
        ok &= _write(pids, "pids.max", str(max_tasks))
    if not ok:
        log.warning("could not set the limits of the sandbox cgroup %s", made[0][1])
        unit.remove()
        return None
    return unit


# argv: number of cgroup files, keyctl syscall number (0: none), the files, then the command to exec
_ENTRY_PERL = ('my $n = shift; my $k = shift; syscall($k, 1, 0) if $k;'  # KEYCTL_JOIN_SESSION_KEYRING, anonymous
               ' for (1 .. $n) { my $p = shift; open(my $f, ">", $p) or die "cgroup $p: $!\\n";'
               ' print $f "$$\\n"; close($f) or die "cgroup $p: $!\\n" }'
               ' exec { $ARGV[0] } @ARGV or die "exec $ARGV[0]: $!\\n";')
_ENTRY_PY = ("import ctypes, os, sys\nn, k = int(sys.argv[1]), int(sys.argv[2])\n"
             "if k:\n    ctypes.CDLL(None).syscall(k, 1, None)\n"
             "for p in sys.argv[3:3 + n]:\n    with open(p, 'w') as f:\n        f.write(str(os.getpid()))\n"
             "os.execv(sys.argv[3 + n], sys.argv[3 + n:])")


def entry_prefix(unit: Unit | None) -> list[str]:
    """The command prefix that joins ``unit`` and a fresh anonymous session keyring, then execs what follows."""
    files = unit.procs_files if unit is not None else []
    keyctl = seccomp.syscall_number("keyctl") or 0
    perl = shutil.which("perl")
    if perl:
        return [perl, "-e", _ENTRY_PERL, str(len(files)), str(keyctl), *files]
    return [sys.executable, "-S", "-I", "-c", _ENTRY_PY, str(len(files)), str(keyctl), *files]
