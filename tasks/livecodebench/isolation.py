"""What each isolation mode is and guarantees, and the command line that launches it (a leaf: the choice of mode,
which needs a probe run, is :mod:`tasks.livecodebench.modes`).

Two modes (``task.sandbox``):

* ``bwrap`` — bubblewrap (the sandbox Flatpak uses): an empty root holding, read-only, only the system library
  folders, the interpreter and its packages (:func:`view_plan`: not the project, ``results/``, home or anyone's
  sockets), a fresh ``/proc`` and ``/dev``, a size-capped private ``/tmp`` and ``/dev/shm``, an empty ``/run``, no
  network (own network namespace), own PID and IPC namespaces (nothing outside is visible or killable, and
  everything inside dies with it, or with the harness: ``--die-with-parent``), the task's data files covered. When
  the harness runs as root, bwrap runs without a user namespace and the program runs under a fresh unprivileged uid
  with an empty capability bounding set (a root process ignores RLIMIT_NPROC).
* ``process`` — the fallback when bwrap is missing or not permitted: a fresh interpreter in its own PID, mount and
  IPC namespaces (``/proc`` of its own; its folder, ``/tmp``, ``/var/tmp`` and ``/dev/shm`` on one size-capped
  tmpfs that vanishes with it; an empty ``/run``; the rest of the host read-only, so nothing it writes lands in a
  host folder), the project, home and the download caches covered by empty folders and the task's data files by an
  empty file (the interpreter's folders inside them bound back), ``no_new_privs``, no capability in any set,
  rlimits, a scrubbed environment, the seccomp filter of :mod:`tasks.livecodebench.seccomp`, and a parent-death
  signal so that a killed harness takes it along (see :data:`_LAUNCHER` and :func:`process_argv`). As root, the
  program always runs under a fresh uid (:meth:`Isolation.new_uid`: no account's, no running process's): a folder
  closed to other users on the way to the interpreter (a 0700 home) is covered too; where that cannot work, process
  mode refuses rather than run a program as root. It has the network.

Both modes: each sandbox is one cgroup (:mod:`tasks.livecodebench.cgroup`: CPU time, memory and tasks of every
process in it, reaped or not; where none can be made, per-process limits and one warning), each phase of a program
is timed on that CPU clock (``sandbox.py``), the program starts on a fresh session keyring, its fd 2 is a pipe, and
the seccomp filter refuses memory outside the limits (``memfd_create``, ``memfd_secret``, ``shmget``), keyrings,
new user namespaces and the rest of Docker's default deny list (:mod:`tasks.livecodebench.seccomp`); on machines
other than x86-64 and aarch64 no filter is built (``memory_counts_memfd_and_shm`` is then missing from the
guarantees).

``auto`` picks ``bwrap`` when a probe run succeeds and otherwise ``process``, with one loud warning.
"""

from __future__ import annotations

import functools
import grp
import json
import logging
import os
import pwd
import random
import shutil
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from tasks.livecodebench import cgroup, seccomp

log = logging.getLogger(__name__)

MODES = ("auto", "bwrap", "process")
JOB_DIR = "/tmp/job"  # where the job folder appears inside bwrap
WORK_DIR = "/tmp/work"  # the program's current directory inside bwrap
_UID_RANGE = (0x40000000, 0x7FFF0000)  # fresh uids for programs: no account and no process uses them


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


PYTHON_FLAGS = ("-S", "-B")  # no site import (its .pth scan costs ~25 ms a run): the driver sets sys.path itself


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


def _under(path: str, root: str) -> bool:
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


SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache",
                "/etc/localtime")  # the shared libraries and tools an interpreter links against; nothing else of /
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])  # a checkout: results/, data and configs live under it


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
            if d not in made and not any(_under(d, s) for s in shown):
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
        if not any(_under(path, s) for s in shown):
            bind(path)
            shown.append(path)
    exposed: list[str] = []
    for mask in sorted(set(private)):
        inside = [p for p in needed if _under(p, mask)]
        if mask == "/" or mask in inside or not any(_under(mask, s) for s in shown):
            continue  # needed whole (an installed package), or not visible anyway
        args.extend(["--perms", "0755", "--tmpfs", mask])
        for p in sorted(inside):
            if not any(q != p and _under(p, q) for q in inside):
                args.extend(["--ro-bind", p, p])
                exposed.append(p)
    for path in hidden:
        masked = any(_under(path, m) for m in private if m != "/")
        if any(_under(path, s) for s in shown) and (not masked or any(_under(path, e) for e in exposed)):
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


PROCESS_VIEW = "/dev/shm"  # process mode: where the job, the work folder and the private /tmp appear
PROCESS_OWN_COVERS = ("/tmp", "/var/tmp", "/run")  # replaced by the launcher itself (private /tmp, empty /run)
# Run by the interpreter (``-S -I -c``) as PID 1 of fresh PID + mount + IPC namespaces, as root of the harness (or
# of a user namespace mapping the harness's user), with a plan (JSON, :func:`process_plan`): first the interpreter's
# folders that a cover below would hide are held (bound aside); then the whole host tree is made read-only
# (recursively: nothing the program writes lands in a host folder, world-writable ones included); one size-capped
# tmpfs on /dev/shm holds the job (bound read-only), the program's folder and its /tmp (bound on /tmp and
# /var/tmp), so nothing it writes outlives the namespace and the total it can write is capped; an empty /run (no
# host sockets, no /run/lock shared with other programs); each covered folder (the project, home, caches, a closed
# folder on the interpreter's way) gets an open, empty tmpfs; the held folders are bound back; the task's data files
# still visible are covered by an empty file. Then no_new_privs, the seccomp filter, an empty bounding and ambient
# capability set, and, when no fresh uid follows (the driver's setuid clears the rest), no capability at all.
# mount(2), mount_setattr(2), prctl(2) and capset(2) through ctypes; the driver then runs in this same interpreter
# (``-S`` like PYTHON_FLAGS, ``-I`` so that nothing of the environment reaches it): one interpreter start in all.
_LAUNCHER = """import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, what + ": " + os.strerror(err))
def mount(src, dst, fstype, flags, data):
    check(libc.mount(src.encode(), dst.encode(), fstype.encode(), flags, data.encode() if data else None),
          "mount " + dst)
with os.fdopen(int(sys.argv[1]), encoding="utf-8") as fh:  # a file, not the command line: /proc/1/cmdline
    cfg = json.load(fh)
size, job, uid, plan, bpf = cfg["size"], cfg["job"], cfg["uid"], cfg["plan"], cfg["bpf"]
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
os.umask(0o022)
mount("lcb", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=" + size + ",mode=0755")
for d in ("job", "work", "tmp", "keep"):
    os.mkdir("/dev/shm/" + d)
held = []  # the interpreter's folders, held before any cover below can hide them (a venv under /tmp included)
for i, src in enumerate(plan["hold"]):
    k = "/dev/shm/keep/%d" % i
    os.mkdir(k)
    mount(src, k, "", MS_BIND | MS_REC, "")
    held.append((src, k))
class Attr(ctypes.Structure):
    _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64), ("prop", ctypes.c_uint64), ("fd", ctypes.c_uint64)]
def setattr(path, on, off, flags):  # mount_setattr(2); AT_RECURSIVE: the mount and every one below it
    attr = Attr(on, off, 0, 0)
    return libc.syscall(442, -100, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr))
if setattr("/", 1, 0, 0x8000) == 0:  # MOUNT_ATTR_RDONLY on the whole host tree, then /dev/shm writable again
    check(setattr("/dev/shm", 0, 1, 0), "mount_setattr /dev/shm")
elif plan["strict"]:
    check(-1, "mount_setattr / read-only")
mount(job, "/dev/shm/job", "", MS_BIND, "")
mount("", "/dev/shm/job", "", MS_REMOUNT | MS_BIND | MS_RDONLY, "")
os.chmod("/dev/shm/tmp", 0o1777)
os.chmod("/dev/shm/work", 0o700)
if uid:
    os.chown("/dev/shm/work", int(uid), int(uid))
for d in ("/tmp", "/var/tmp"):
    if os.path.isdir(d):
        mount("/dev/shm/tmp", d, "", MS_BIND, "")
if os.path.isdir("/run"):
    mount("lcb-run", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
for cover in plan["covers"]:
    if os.path.isdir(cover):  # gone already when it lay under another cover or the private /tmp
        mount("lcb-open", cover, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
for dst, k in held:
    if not os.path.isdir(dst):
        os.makedirs(dst, 0o755)
    mount(k, dst, "", MS_BIND | MS_REC, "")
    check(libc.umount2(k.encode(), 2), "umount " + k)
    os.rmdir(k)
os.rmdir("/dev/shm/keep")
for path in plan["hidden"]:
    if os.path.isfile(path):
        mount("/dev/shm/job/blank", path, "", MS_BIND, "")
        mount("", path, "", MS_REMOUNT | MS_BIND | MS_RDONLY, "")
check(libc.prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
last = int(open("/proc/sys/kernel/cap_last_cap").read())
for cap in range(last + 1):
    check(libc.prctl(24, cap, 0, 0, 0), "prctl(PR_CAPBSET_DROP)")
check(libc.prctl(47, 4, 0, 0, 0), "prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
if not uid:
    check(libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()), "capset")
if bpf:
    code = bytes.fromhex(bpf)
    buf = ctypes.create_string_buffer(code, len(code))
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    prog = Prog(len(code) // 8, ctypes.addressof(buf))
    check(libc.prctl(22, 2, ctypes.byref(prog), 0, 0), "prctl(PR_SET_SECCOMP)")
child = os.fork()
if child:  # PID 1 stays out of the program's reach (no capability, another uid), so that the parent-death signal
    if uid:  # unshare set survives (a setuid clears it): the namespace, program included, dies with the harness
        check(libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()), "capset")
    while True:  # reap orphans; leave as the driver did (then the kernel kills the rest of the namespace)
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else code)
os.chdir("/dev/shm/work")
del libc, mount, check
sys.dont_write_bytecode = True  # -B
sys.argv = sys.argv[2:]
import runpy
runpy.run_path(sys.argv[0], run_name="__main__")
"""

CACHE_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE",
                   "XDG_CACHE_HOME", "TORCH_HOME")  # folders of downloaded data and models, wherever they are


def private_folders() -> tuple[str, ...]:
    """Folders no program may see: the project (data, configs, ``results/``), home and the download caches."""
    home = os.path.realpath(os.path.expanduser("~"))
    caches = [os.path.realpath(os.environ[v]) for v in CACHE_VARIABLES if os.environ.get(v)]
    return tuple(sorted({PROJECT_ROOT, home, *caches} - {"/"}))


def _outermost(paths: list[str]) -> list[str]:
    return sorted(p for p in set(paths) if not any(q != p and _under(p, q) for q in paths))


def process_plan(python: str, fresh_uid: bool, hidden: tuple[str, ...] = ()) -> dict:
    """What the process-mode launcher covers (see ``_LAUNCHER``): ``covers``, folders replaced by an empty open
    tmpfs (the private folders, and as root each folder on the interpreter's way that other users cannot traverse:
    a 0700 home); ``hold``, the outermost interpreter folders that lie below a cover or one of
    :data:`PROCESS_OWN_COVERS`, bound back once covered; ``hidden``, data files covered by an empty file."""
    needed = interpreter_paths(python)
    covers = {c for c in private_folders() if not any(_under(c, p) for p in needed)}  # not a folder needed whole
    if fresh_uid:
        for path in needed:
            closed = closed_ancestor(path)
            if closed is not None and closed != path:
                covers.add(closed)
    hold = _outermost([p for p in needed if any(_under(p, c) and p != c for c in [*covers, *PROCESS_OWN_COVERS])])
    files = sorted({f for h in hidden if os.path.isfile(h) for f in (os.path.abspath(h), os.path.realpath(h))})
    return {"covers": sorted(covers), "hold": hold, "hidden": files, "strict": os.geteuid() == 0}


def exposable(python: str) -> bool:
    """Whether, once the covers of :func:`process_plan` are applied, a fresh uid can traverse to every folder of the
    interpreter (no closed folder at or below the ones bound back)."""
    plan = process_plan(python, fresh_uid=True)
    opened: set[str] = set()  # the folders the launcher makes open: each cover and those down to a held folder
    for path in plan["hold"]:
        while path not in ("/", ""):
            path = os.path.dirname(path)
            opened.add(path)
    opened.update(plan["covers"])
    for path in interpreter_paths(python):
        current = "/"
        for part in Path(path).parts[1:]:
            current = os.path.join(current, part)
            if current in opened:
                continue
            try:
                mode = os.stat(current).st_mode
            except OSError:
                break
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                return False
    return True


def pdeathsig_prefix() -> list[str]:
    """A command prefix that makes the started process get SIGKILL when the harness thread that started it dies
    (``setpriv --pdeathsig``, util-linux): a ``kill -9`` of the harness ends the sandbox even while a program holds
    the GIL of the driver's watcher. Without setpriv, a one-line interpreter sets the signal and execs."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, "--pdeathsig", "KILL", "--"]
    code = ("import ctypes, os, sys\nif ctypes.CDLL(None).prctl(1, 9, 0, 0, 0) != 0:\n    sys.exit('prctl')\n"
            "os.execv(sys.argv[1], sys.argv[1:])")
    return [sys.executable, "-S", "-I", "-c", code]


def process_settings(iso: Isolation, job_dir: str, tmp_bytes: int, uid: int | None,
                     hidden: tuple[str, ...] = ()) -> bytes:
    """What the process-mode launcher reads from the file descriptor of :func:`process_argv` (JSON): the size of
    its tmpfs, the job folder, the uid, the plan of :func:`process_plan` and the seccomp filter."""
    plan = process_plan(iso.python, uid is not None, hidden)
    return json.dumps({"size": str(tmp_bytes), "job": job_dir, "uid": "" if uid is None else str(uid), "plan": plan,
                       "bpf": seccomp.filter_bytes().hex()}).encode()


def process_argv(iso: Isolation, settings_fd: int) -> list[str]:
    """The command of process mode: ``unshare`` gives the driver PID, mount and IPC namespaces (it is PID 1: when
    it dies, every process the program started dies with it, setuid or not, in any session), its own ``/proc`` and
    one size-capped tmpfs for all it may write; the launcher makes the host read-only, covers the private folders
    and the data files and drops every capability (see ``_LAUNCHER``), reading its settings from ``settings_fd``
    (:func:`process_settings`; no host path on its command line). Not root: a user namespace maps the harness user
    to root inside."""
    unshare = shutil.which("unshare")
    if not unshare:
        raise ValueError("task.sandbox=process needs util-linux's unshare (PID and mount namespaces); install "
                         "util-linux or bubblewrap")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [*pdeathsig_prefix(), unshare, *user, "--fork", "--pid", "--mount-proc", "--kill-child", "--mount",
            "--ipc", "--propagation", "private", iso.python, "-S", "-I", "-c", _LAUNCHER, str(settings_fd),
            f"{PROCESS_VIEW}/job/driver.py", f"{PROCESS_VIEW}/job/job.json"]
