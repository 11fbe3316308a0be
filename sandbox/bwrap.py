"""The bubblewrap mode's command line: the program's whole view of the file system built on an empty root
(:func:`view_plan`), and the namespaces, limits and filter bwrap applies (:func:`bwrap_argv`). What the mode
guarantees is written in :mod:`sandbox.isolation`."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from sandbox.isolation import PROJECT_ROOT, Isolation, interpreter_paths, under

JOB_DIR = "/tmp/job"  # where the job folder appears inside bwrap
WORK_DIR = "/tmp/work"  # the program's current directory inside bwrap
PYTHON_FLAGS = ("-S", "-B")  # no site import (its .pth scan costs ~25 ms a run): the driver sets sys.path itself
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache",
                "/etc/localtime")  # the shared libraries and tools an interpreter links against; nothing else of /


def view_plan(needed: tuple[str, ...], hidden: tuple[str, ...], blank: str, tmp_opts: list[str],
              private: tuple[str, ...] = ()) -> list[str]:
    """bwrap arguments that build the program's whole view of the file system on an empty root: a private
    ``/tmp`` (``tmp_opts``), the system library folders of :data:`SYSTEM_PATHS` (symlinks kept as symlinks) and the
    folders of ``needed`` (the interpreter, its standard library and packages), read-only. Nothing else of ``/``
    exists inside: not the project, not ``results/``, not home, not ``/run`` or other users' sockets. A folder of
    ``private`` (the project, home) that lies inside what is shown is covered by an empty tmpfs, with the ``needed``
    folders below it shown again (a virtualenv inside the checkout); each file of ``hidden`` still visible is
    covered by the empty file ``blank``."""
    args = [*tmp_opts, "--tmpfs", "/tmp"]
    shown: list[str] = []
    made: set[str] = {"/", "/tmp"}

    def bind(path: str) -> None:
        for parent in reversed(Path(path).parents):  # bwrap would create them 0700: unreadable for a fresh uid
            d = str(parent)
            if d not in made and not any(under(d, s) for s in shown):
                args.extend(["--perms", "0755", "--dir", d])
                made.add(d)
        args.extend(["--ro-bind", path, path])
        made.add(path)

    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args.extend(["--symlink", os.readlink(path), path])
        elif os.path.exists(path):
            bind(path)
            shown.append(path)
    for path in sorted(set(needed)):
        if not any(under(path, s) for s in shown):
            bind(path)
            shown.append(path)
    exposed: list[str] = []
    for mask in sorted(set(private)):
        inside = [p for p in needed if under(p, mask)]
        if mask == "/" or mask in inside or not any(under(mask, s) for s in shown):
            continue  # needed whole (an installed package), or not visible anyway
        args.extend(["--perms", "0755", "--tmpfs", mask])
        for p in sorted(inside):
            if not any(q != p and under(p, q) for q in inside):
                args.extend(["--ro-bind", p, p])
                exposed.append(p)
    for path in hidden:
        masked = any(under(path, m) for m in private if m != "/")
        if any(under(path, s) for s in shown) and (not masked or any(under(path, e) for e in exposed)):
            args.extend(["--ro-bind", blank, path])
    return args


@functools.lru_cache(maxsize=1)
def bwrap_version() -> tuple[int, ...]:
    exe = shutil.which("bwrap")
    if exe is None:
        return ()
    try:
        text = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
        return tuple(int(x) for x in text.split()[-1].split("."))
    except (OSError, ValueError, subprocess.SubprocessError):
        return ()


def bwrap_argv(iso: Isolation, job_dir: str, tmp_bytes: int, hidden: tuple[str, ...],
               seccomp_fd: int | None = None) -> tuple[list[str], list[str]]:
    """The bubblewrap command that runs the driver of ``job_dir`` (see the module docstring and :func:`view_plan`
    for the view); ``job_dir/blank`` must be an empty, world-readable file (it covers the ``hidden`` files).
    ``seccomp_fd``: an open file holding :func:`seccomp.filter_bytes` (bwrap ``--seccomp``). Returned as (the
    options, the command: bwrap, ``--`` and the driver): the caller passes the options through ``--args FD``, so
    that no host path of the view shows in the sandbox's ``/proc/1/cmdline``."""
    home = os.path.realpath(os.path.expanduser("~"))
    sized = bwrap_version() >= (0, 8)
    tmp_opts = ["--perms", "1777"] + (["--size", str(tmp_bytes)] if sized else [])
    hidden = tuple(os.path.realpath(h) for h in hidden if os.path.isfile(h))
    argv = view_plan(interpreter_paths(iso.python), hidden, os.path.join(job_dir, "blank"), tmp_opts,
                      (PROJECT_ROOT, home))
    argv += ["--dev", "/dev", "--proc", "/proc", "--remount-ro", "/dev", "--ro-bind", job_dir, JOB_DIR,
             "--perms", "1777", "--dir", WORK_DIR,
             # a fresh, size-capped /dev/shm (shm_open) and an empty /run, private to this program
             *tmp_opts, "--tmpfs", "/dev/shm", "--perms", "0755", *(["--size", str(1 << 16)] if sized else []),
             "--tmpfs", "/run", "--remount-ro", "/", "--chdir", WORK_DIR]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if os.geteuid() == 0:  # no user namespace: then the driver can drop to a real unprivileged uid
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                 "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:
        argv += ["--unshare-all"]
    argv += ["--die-with-parent", "--new-session"]
    return argv, [shutil.which("bwrap") or "bwrap", "--", iso.python, *PYTHON_FLAGS, f"{JOB_DIR}/driver.py",
                  f"{JOB_DIR}/job.json"]
