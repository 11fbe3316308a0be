"""What each isolation mode is and guarantees, and what both modes share: a fresh uid per program (as root), the
scrubbed environment, the interpreter's folders, and the project's own root (a leaf: the command lines are
:mod:`sandbox.bwrap` and :mod:`sandbox.process_mode`, the choice of mode, which needs a probe run,
:mod:`sandbox.modes`).

Two modes (``task.sandbox``):

* ``bwrap`` — bubblewrap (the sandbox Flatpak uses): an empty root holding, read-only, only the system library
  folders, the interpreter and its packages (:func:`sandbox.bwrap.view_plan`: not the project, ``results/``, home
  or anyone's sockets), a fresh ``/proc`` and ``/dev``, a size-capped private ``/tmp`` and ``/dev/shm``, an empty
  ``/run``, no network (own network namespace), own PID and IPC namespaces (nothing outside is visible or killable,
  and everything inside dies with it, or with the harness: ``--die-with-parent``), the task's data files covered.
  When the harness runs as root, bwrap runs without a user namespace and the program runs under a fresh
  unprivileged uid with an empty capability bounding set (a root process ignores RLIMIT_NPROC).
* ``process`` — the fallback when bwrap is missing or not permitted: a fresh interpreter in its own PID, mount and
  IPC namespaces (``/proc`` of its own; its folder, ``/tmp``, ``/var/tmp`` and ``/dev/shm`` on one size-capped
  tmpfs that vanishes with it; an empty ``/run``; the rest of the host read-only, so nothing it writes lands in a
  host folder), the project, home and the download caches covered by empty folders and the task's data files by an
  empty file (the interpreter's folders inside them bound back), ``no_new_privs``, no capability in any set,
  rlimits, a scrubbed environment, the seccomp filter of :mod:`sandbox.seccomp`, and a parent-death signal so that
  a killed harness takes it along (see :mod:`sandbox.process_mode`). As root, the program always runs under a
  fresh uid (:meth:`Isolation.new_uid`: no account's, no running process's): a folder closed to other users on the
  way to the interpreter (a 0700 home) is covered too; where that cannot work, process mode refuses rather than run
  a program as root. It has the network.

Both modes: each sandbox is one cgroup (:mod:`sandbox.cgroup`: CPU time, memory and tasks of every process in it,
reaped or not; where none can be made, per-process limits and one warning), each phase of a program is timed on
that CPU clock (:mod:`sandbox.clock`), the program starts on a fresh session keyring, its fd 2 is a pipe, and the
seccomp filter is default-deny (:mod:`sandbox.seccomp`): only the calls of its allow-list reach the kernel, every
other one fails with ``ENOSYS`` (memory outside the limits: ``memfd_create``, ``memfd_secret``, ``shmget``;
keyrings; io_uring, AIO, landlock and every call added after the list) or, for the administrator's calls Docker
refuses, ``EPERM``; new namespaces and rare socket families are refused too. On machines other than x86-64 and
aarch64 no filter is built (``memory_counts_memfd_and_shm`` is then missing from the guarantees). The sandbox's
folder on the host is named for the harness process, so that the next harness removes the folders a killed one
left (:mod:`sandbox.scratch`).

``auto`` picks ``bwrap`` when a probe run succeeds and otherwise ``process``, with one loud warning.
"""

from __future__ import annotations

import functools
import grp
import json
import os
import pwd
import random
import stat
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from sandbox import cgroup, seccomp

MODES = ("auto", "bwrap", "process")
_UID_RANGE = (0x40000000, 0x7FFF0000)  # fresh uids for programs: no account and no process uses them
PROJECT_ROOT = str(Path(__file__).resolve().parents[1])  # a checkout: results/, data and configs live under it


@dataclass(frozen=True)
class Isolation:
    """The resolved isolation: ``mode`` (``bwrap``/``process``), the interpreter, whether programs get a fresh uid."""

    mode: str
    python: str
    fresh_uid: bool
    reason: str = ""  # why this mode (for logs and the fallback warning)

    @property
    def guarantees(self) -> dict[str, bool]:
        """What holds for a graded program in this mode (documented in the README table)."""
        bwrap = self.mode == "bwrap"
        root = os.geteuid() == 0
        return {
            "fresh_interpreter_and_group_kill": True,
            "no_capabilities": True,  # checked by the probe run (modes.py): a mode that keeps any is refused
            "own_ipc_namespace": True,
            "dies_with_harness": True,  # parent-death signal on bwrap / unshare
            "memory_counts_memfd_and_shm": bool(seccomp.filter_bytes()),
            "no_keyrings_or_user_namespaces": bool(seccomp.filter_bytes()),
            "limits_hold_for_the_whole_sandbox": cgroup.base() is not None,  # CPU, memory, tasks: one cgroup
            "scrubbed_environment": True,
            "rlimits_cpu_memory_files": True,
            "bounded_process_count": bwrap or self.fresh_uid or not root,
            "no_network": bwrap,
            "read_only_filesystem": bwrap or root,  # process mode: the host tree remounted read-only
            "data_files_hidden": True,
            "cannot_signal_harness": True,  # own PID namespace in both modes
            "cannot_read_harness_environ": True,  # own /proc
            "no_process_survives": True,
            "nothing_left_in_tmp": True,
            "cannot_write_harness_files": bwrap or self.fresh_uid,
        }

    def new_uid(self) -> int | None:
        """A uid no account, group, subordinate range, running process or other sandbox of this harness uses (None
        without ``fresh_uid``); give it back with :func:`release_uid`."""
        if not self.fresh_uid:
            return None
        rng = random.SystemRandom()
        for _ in range(100):
            uid = rng.randrange(*_UID_RANGE)
            with _uid_lock:
                if uid in _uids_in_use or not _unused(uid):
                    continue
                _uids_in_use.add(uid)
                return uid
        raise RuntimeError("no unused uid found for a sandbox in 100 draws")


_uids_in_use: set[int] = set()
_uid_lock = threading.Lock()


def release_uid(uid: int | None) -> None:
    """The sandbox of ``uid`` is gone: the uid may be drawn again."""
    with _uid_lock:
        _uids_in_use.discard(uid)


@functools.lru_cache(maxsize=1)
def _subordinate_ranges() -> tuple[tuple[int, int], ...]:
    """The uid/gid ranges of ``/etc/subuid`` and ``/etc/subgid`` (the users of containers)."""
    ranges = []
    for name in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(name).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.strip().split(":")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                ranges.append((int(parts[1]), int(parts[1]) + int(parts[2])))
    return tuple(ranges)


def _unused(uid: int) -> bool:
    """Whether ``uid`` is no account's, no group's (the sandbox uses it as gid too), in no subordinate range and
    owns no running process."""
    try:
        pwd.getpwuid(uid)
        return False
    except KeyError:
        pass
    try:
        grp.getgrgid(uid)
        return False
    except KeyError:
        pass
    if any(low <= uid < high for low, high in _subordinate_ranges()):
        return False
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    return False
            except OSError:
                continue
    return True


def sandbox_env(home: str, tmp: str) -> dict[str, str]:
    """The whole environment a graded program sees: nothing of the harness's (no tokens, no paths)."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": home,
            "TMPDIR": tmp, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUTF8": "1",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@functools.lru_cache(maxsize=8)
def _layout(python: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    code = ("import sys, json; print(json.dumps([[sys.prefix, sys.base_prefix, sys.exec_prefix, "
            "sys.base_exec_prefix, sys.executable], sys.path]))")
    out = subprocess.run([python, "-s", "-B", "-c", code], capture_output=True, text=True, timeout=120,
                         env=sandbox_env("/", "/tmp"), check=True)
    prefixes, path = json.loads(out.stdout)
    sys_path = tuple(p for p in path if p and os.path.isabs(p) and os.path.exists(p))
    dirs: set[str] = set()
    for entry in [*prefixes, *sys_path]:
        if entry and os.path.isabs(entry) and os.path.exists(entry):
            for p in {entry, os.path.realpath(entry)}:
                dirs.add(p if os.path.isdir(p) else os.path.dirname(p))
    return tuple(sorted(dirs)), sys_path


def interpreter_paths(python: str) -> tuple[str, ...]:
    """Every directory the interpreter needs (prefixes, its own folder, ``sys.path``), as a ``-s`` run sees them."""
    return _layout(python)[0]


def interpreter_sys_path(python: str) -> list[str]:
    """``sys.path`` of a normal (``-s``) run, ``.pth`` additions included: what graded programs import from."""
    return list(_layout(python)[1])


def under(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies below it."""
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def closed_ancestor(path: str) -> str | None:
    """The first directory on the way to ``path`` that other users cannot traverse, if any."""
    current = "/"
    for part in Path(path).parts[1:]:
        current = os.path.join(current, part)
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return current
    return None


def readable_by_others(python: str) -> bool:
    """Whether a process under a fresh uid could start ``python`` and import from its paths."""
    return all(closed_ancestor(p) is None for p in interpreter_paths(python))
