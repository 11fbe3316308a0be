"""The sandbox's system-call filter (:mod:`sandbox.seccomp`): the filter program, run on a classic-BPF interpreter
for both architectures, allows the calls of its allow-list, answers each named call as documented and every other
number with ENOSYS (default-deny), its numbers the kernel's; inside the sandbox io_uring,
userfaultfd, message queues, inotify, kcmp, file handles, mounts and persona changes fail with their errno,
``memfd_secret`` and new user namespaces are refused (``clone3`` says ENOSYS, so threads and subprocesses still
start), the calls a deny-list missed (AIO, landlock, the lsm_* calls, statmount/listmount, open_tree_attr,
set_mempolicy_home_node, an unknown number) fail, sockets of rare families too, while numpy, pandas and scipy still
import and compute."""

from __future__ import annotations

import os
import re
import struct

import pytest
from lcb_helpers import (
    MODES,
    needs_filter,
    output_of,
)

from sandbox import seccomp

ALLOW, KILL = 0x7FFF0000, 0x80000000


ENOSYS, EPERM = 0x00050000 | 38, 0x00050000 | 1


def run_filter(prog: bytes, nr: int, arch: int, arg0: int = 0, executed: list[int] | None = None) -> int:
    """The action classic BPF ``prog`` returns for a call (``struct seccomp_data``: nr, arch, ip, args);
    ``executed`` gets the number of instructions run."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if executed is not None:
            executed.append(pc)
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        pc += 1


ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


# calls a graded program makes (x86-64, aarch64): read, write, mmap, openat, futex, getrandom, sched_getaffinity
ORDINARY = {"x86_64": (0, 1, 9, 257, 202, 318, 204), "aarch64": (63, 64, 222, 56, 98, 278, 123)}


@pytest.mark.parametrize("machine", sorted(ARCH))
def test_the_filter_answers_each_listed_call(machine):
    prog = seccomp.filter_bytes(machine)
    arm = machine == "aarch64"
    run = lambda name, arg0=0: run_filter(prog, seccomp.syscall_number(name, machine), ARCH[machine], arg0)  # noqa: E731
    named = [n for n in seccomp.ABSENT + seccomp.PRIVILEGED if seccomp.syscall_number(n, machine) is not None]
    assert {"io_uring_setup", "userfaultfd", "msgget", "mq_open", "kcmp", "name_to_handle_at", "mount",
            "ptrace", "bpf"} <= set(named)
    for name in seccomp.ABSENT:
        if seccomp.syscall_number(name, machine) is not None:
            assert run(name) == ENOSYS, name
    for name in seccomp.PRIVILEGED:
        if seccomp.syscall_number(name, machine) is not None:
            assert run(name) == EPERM, name
    for persona in seccomp.PERSONAS:
        assert run("personality", persona) == ALLOW, persona
    assert run("personality", 0x0040000) == EPERM  # ADDR_NO_RANDOMIZE
    assert run("personality", 0x0400000) == EPERM  # READ_IMPLIES_EXEC
    assert run("clone", 0x10000000 | 0x11) == EPERM and run("clone", 0x3D0F00) == ALLOW  # thread flags
    assert run("clone", 0x4111) == ALLOW  # posix_spawn's vfork
    assert run("unshare", 0x10000000) == EPERM and run("unshare", 0x20000) == EPERM  # a user, a mount namespace
    assert run("unshare", 0x400) == ALLOW  # CLONE_FILES
    for nr in ORDINARY[machine]:
        assert run_filter(prog, nr, ARCH[machine]) == ALLOW, nr
    assert run_filter(prog, 0, ARCH["aarch64" if not arm else "x86_64"]) == KILL
    if not arm:
        assert run_filter(prog, 0x40000000 | 1, ARCH[machine]) == ENOSYS  # x32


# what a deny-list let reach the kernel (issue 51): ENOSYS, open_tree_attr EPERM like open_tree
MISSED = ("open_tree_attr", "statmount", "listmount", "set_mempolicy_home_node", "lsm_get_self_attr",
          "lsm_set_self_attr", "lsm_list_modules", "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents",
          "io_pgetevents", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
AF_UNIX, AF_INET6, AF_ALG, AF_VSOCK, EAFNOSUPPORT = 1, 10, 38, 40, 0x00050000 | 97


@pytest.mark.parametrize("machine", sorted(ARCH))
def test_the_filter_denies_by_default(machine):
    """Every number up to 1100 that the filter does not name answers ENOSYS (1000: no call at all), each allowed
    call is allowed, and the calls a deny-list missed are refused; the program stays far below the kernel's 4096
    instructions."""
    prog = seccomp.filter_bytes(machine)
    assert len(prog) // 8 < 400
    run = lambda nr, arg0=0: run_filter(prog, nr, ARCH[machine], arg0)  # noqa: E731
    number = lambda name: seccomp.syscall_number(name, machine)  # noqa: E731
    for name in MISSED:
        assert run(number(name)) == (EPERM if name == "open_tree_attr" else ENOSYS), name
    allowed = {number(n) for n in seccomp.ALLOWED} - {None}
    assert len(allowed) > 200 and allowed.isdisjoint({number(n) for n in seccomp.ABSENT + seccomp.PRIVILEGED})
    named = seccomp.answers(machine)
    for nr in range(1100):  # the compiled search gives each number the answer of the table
        expected = {"allow": ALLOW, "eperm": EPERM, "enosys": ENOSYS}.get(named.get(nr, "enosys"))
        if expected is not None:  # None: a rule on the first argument, checked above and below
            assert run(nr) == expected, nr
        assert (run(nr) == ALLOW) == (nr in allowed) or named.get(nr) in ("namespaces", "persona", "family"), nr
    for nr in allowed:  # a binary search: a dozen instructions per call (main's deny list ran 86 on x86-64)
        executed: list[int] = []
        run_filter(prog, nr, ARCH[machine], 0, executed)
        assert len(executed) <= 12, (nr, len(executed))
    assert run(1000) == ENOSYS and run(-1) == ENOSYS  # -1: the highest unsigned number
    for family in (AF_UNIX, 2, AF_INET6, 16):
        assert run(number("socket"), family) == ALLOW, family
    assert run(number("socket"), AF_ALG) == EAFNOSUPPORT and run(number("socket"), AF_VSOCK) == EAFNOSUPPORT


HEADERS = {"x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "aarch64": "/usr/include/asm-generic/unistd.h"}


@pytest.mark.parametrize("machine", sorted(ARCH))
def test_the_numbers_are_the_kernels(machine):
    """Each number of the filter's table is the one in this machine's kernel headers (x86-64's table, the generic
    table aarch64 uses); calls newer than the headers are skipped, and at least 250 names are checked."""
    path = HEADERS[machine]
    if not os.path.exists(path):
        pytest.skip(f"no {path} here (linux-libc-dev)")
    text = open(path, encoding="utf-8").read()
    generic = {m[0]: int(m[1]) for m in re.findall(r"#define __NR3264_(\w+)\s+(\d+)", text)}
    header: dict[str, int] = {}
    for name, value in re.findall(r"#define __NR_(\w+)\s+(\w+)", text):
        if value.isdigit() or value.removeprefix("__NR3264_") in generic:
            header.setdefault(name, int(value) if value.isdigit() else generic[value.removeprefix("__NR3264_")])
    checked = 0
    for name in seccomp.ALLOWED + seccomp.ABSENT + seccomp.PRIVILEGED + ("clone", "unshare", "personality", "socket"):
        nr = seccomp.syscall_number(name, machine)
        if name in header or nr is None:
            assert nr == header.get(name), name
            checked += 1
    assert checked > 250


SYSCALLS = """import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return errno.errorcode.get(ctypes.get_errno(), 'OK') if r < 0 else 'OK'
buf = ctypes.create_string_buffer(256)
print(' '.join([call({io_uring_setup}, 4, ctypes.addressof(buf)), call({userfaultfd}, 0), call({msgget}, 0, 0o1600),
    call({mq_open}, ctypes.addressof(ctypes.create_string_buffer(b'q')), 0o100 | 2, 0o600, 0),
    call({kcmp}, 1, 1, 0, 0, 0), call({inotify_init1}, 0),
    call({name_to_handle_at}, -100, ctypes.addressof(ctypes.create_string_buffer(b'/')), ctypes.addressof(buf),
         ctypes.addressof(ctypes.create_string_buffer(8)), 0),
    call({mount}, 0, 0, 0, 0, 0), call({personality}, 0x0040000), call({personality}, 0xFFFFFFFF)]))"""


@pytest.mark.parametrize("mode", MODES)
def test_a_program_meets_the_closed_calls(mode):
    needs_filter()
    names = ("io_uring_setup", "userfaultfd", "msgget", "mq_open", "kcmp", "inotify_init1", "name_to_handle_at",
             "mount", "personality")
    code = SYSCALLS.format(**{n: seccomp.syscall_number(n) for n in names})
    assert output_of(mode, code) == " ".join(["ENOSYS"] * 7 + ["EPERM", "EPERM", "OK"])


MISSED_CALLS = """import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return errno.errorcode.get(ctypes.get_errno(), 'OK') if r < 0 else 'OK'
import socket
def family(f):
    try:
        socket.socket(f, socket.SOCK_SEQPACKET if f == {alg} else socket.SOCK_STREAM).close()
        return 'OK'
    except OSError as exc:
        return errno.errorcode[exc.errno]
short = {{'ENOSYS': 'N', 'EPERM': 'P', 'EAFNOSUPPORT': 'A', 'OK': 'K'}}  # one letter each: the output stays short
results = [call(nr, 0, 0, 0, 0, 0) for nr in {numbers}] + [family({alg}), family({unix})]
print(''.join(short.get(r, '?' + r) for r in results))"""


@pytest.mark.parametrize("mode", MODES)
def test_a_program_meets_the_default_deny(mode):
    """The calls a deny-list let through (AIO, landlock, the lsm_* calls, statmount, listmount,
    set_mempolicy_home_node: ENOSYS; open_tree_attr: EPERM), an unknown number (1000: ENOSYS) and a socket of a
    rare family (AF_ALG: EAFNOSUPPORT) fail, while a local socket still opens. On main each reached the kernel."""
    needs_filter()
    numbers = [seccomp.syscall_number(n) for n in MISSED] + [1000]
    code = MISSED_CALLS.format(numbers=numbers, alg=AF_ALG, unix=AF_UNIX)
    expected = "".join("P" if n == "open_tree_attr" else "N" for n in MISSED) + "N" + "A" + "K"
    assert output_of(mode, code) == expected


@pytest.mark.parametrize("mode", MODES)
def test_memfd_secret_and_user_namespaces_are_refused(mode):
    """``memfd_secret`` (768 MiB under ``memory_mb=256``) and ``unshare(CLONE_NEWUSER)`` (a tmpfs outside
    every limit, all capabilities inside) used to be allowed. Now both fail, and ``clone3`` says ENOSYS so that
    threads and subprocesses still start through ``clone``."""
    needs_filter()
    secret, clone3 = seccomp.syscall_number("memfd_secret"), seccomp.syscall_number("clone3")
    code = ("import ctypes, os, subprocess, sys, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.syscall.restype = ctypes.c_long\n"
            f"s = libc.syscall({secret}, 0)\nu = libc.unshare(0x10000000)\n"
            f"c = libc.syscall({clone3}, 0, 0)\nerr = ctypes.get_errno()\n"
            "t = threading.Thread(target=lambda: None)\nt.start()\nt.join()\n"
            "p = subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True, text=True).stdout.strip()\n"
            "print('secret' if s >= 0 else 'nosecret', 'userns' if u == 0 else 'nouserns', err == 38, p)")
    assert output_of(mode, code, memory_mb=256) == "nosecret nouserns True 7"


@pytest.mark.parametrize("mode", MODES)
def test_numpy_pandas_and_scipy_still_work(mode):
    pytest.importorskip("scipy")
    code = ("import numpy as np, pandas as pd\nfrom scipy import linalg, optimize\n"
            "a = np.arange(12.0).reshape(3, 4)\ndf = pd.DataFrame(a).groupby(0).sum()\n"
            "x = linalg.solve(np.eye(3) * 2, np.ones(3))\nr = optimize.brentq(lambda t: t * t - 2, 0, 2)\n"
            "print(int(a.sum()), int(df.values.sum()), float(x[0]), round(r, 6))")
    assert output_of(mode, code, timeout_s=20.0, memory_mb=2048) == "66 54 0.5 1.414214"
