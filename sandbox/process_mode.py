"""The process mode's command line: ``unshare`` for the namespaces, then a launcher, run by the interpreter as the
namespace's PID 1, that builds the program's view of the file system and drops every privilege before the driver
runs in the same interpreter. What the mode guarantees is written in :mod:`sandbox.isolation`."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

from sandbox import seccomp
from sandbox.isolation import PROJECT_ROOT, Isolation, closed_ancestor, interpreter_paths, under

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
# (``-S`` like :data:`sandbox.bwrap.PYTHON_FLAGS`, ``-I`` so that nothing of the environment reaches it): one
# interpreter start in all.
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
    return sorted(p for p in set(paths) if not any(q != p and under(p, q) for q in paths))


def process_plan(python: str, fresh_uid: bool, hidden: tuple[str, ...] = ()) -> dict:
    """What the process-mode launcher covers (see ``_LAUNCHER``): ``covers``, folders replaced by an empty open
    tmpfs (the private folders, and as root each folder on the interpreter's way that other users cannot traverse:
    a 0700 home); ``hold``, the outermost interpreter folders that lie below a cover or one of
    :data:`PROCESS_OWN_COVERS`, bound back once covered; ``hidden``, data files covered by an empty file."""
    needed = interpreter_paths(python)
    covers = {c for c in private_folders() if not any(under(c, p) for p in needed)}  # not a folder needed whole
    if fresh_uid:
        for path in needed:
            closed = closed_ancestor(path)
            if closed is not None and closed != path:
                covers.add(closed)
    hold = _outermost([p for p in needed if any(under(p, c) and p != c for c in [*covers, *PROCESS_OWN_COVERS])])
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
