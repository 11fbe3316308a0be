"""A classic-BPF seccomp filter that closes what a graded program never needs and could hold or read outside its
limits.

* Memory outside the rlimits: ``RLIMIT_AS`` counts mapped memory only: pages written into a ``memfd_create`` file, a
  ``memfd_secret`` area or a SysV shared memory segment that is then detached stay allocated without being mapped.
  These fail with ``ENOSYS`` (a program sees an old kernel and falls back to files, which the size-capped private
  ``/tmp`` bounds).
* Keyrings (``add_key``, ``keyctl``, ``request_key``): ``ENOSYS``. Keys are not namespaced: a program could read the
  harness's session keyring or leave keys for the next program (each program also starts on a fresh anonymous
  session keyring, see :mod:`tasks.livecodebench.cgroup`'s entry command).
* New user namespaces (``unshare``/``clone`` with ``CLONE_NEWUSER``): ``EPERM``. Inside one a program holds every
  capability and may mount a tmpfs outside every limit. ``clone3`` passes its flags in memory, which a seccomp
  filter cannot read: it fails with ``ENOSYS``, and the C library falls back to ``clone`` (glibc, musl).

Everything else is allowed. x86-64 (x32 syscalls refused too) and aarch64; on other machines no filter is built
(:func:`filter_bytes` returns ``b""``) and the README documents the gap.

Stdlib only and import-free of the package: the process-mode launcher and bwrap's ``--seccomp FD`` load the same
bytes (an array of ``struct sock_filter``).
"""

from __future__ import annotations

import platform
import struct

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name: (x86-64, aarch64)
_NUMBERS = {"memfd_create": (319, 279), "shmget": (29, 194), "memfd_secret": (447, 447), "add_key": (248, 217),
            "request_key": (249, 218), "keyctl": (250, 219), "clone3": (435, 435), "unshare": (272, 97),
            "clone": (56, 220)}
NO_SUCH_CALL = ("memfd_create", "shmget", "memfd_secret", "add_key", "request_key", "keyctl", "clone3")
NO_NEW_USER = ("unshare", "clone")  # refused when their flags (first argument) hold CLONE_NEWUSER
CLONE_NEWUSER = 0x10000000
_X32_BIT = 0x40000000

_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO, _ENOSYS, _EPERM = 0x7FFF0000, 0x00050000, 38, 1
_RET_KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS: a syscall of another architecture (int 0x80 on x86-64)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # offsets in struct seccomp_data (little-endian: the low word of args[0] first)


def syscall_number(name: str, machine: str | None = None) -> int | None:
    """The number of syscall ``name`` on ``machine`` (default: this one), or None where no filter is built."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return None
    return _NUMBERS[name][0 if machine == "x86_64" else 1]


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_bytes(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one), or ``b""`` where none is built."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return b""
    arm = machine != "x86_64"
    # (code, true target, false target, k): targets are labels ("next" or one of the returns below)
    prog: list[tuple[int, str, str, int]] = [(_LD_W_ABS, "next", "next", _ARCH),
                                             (_JEQ_K, "next", "kill", _AUDIT_ARCH[machine]),
                                             (_LD_W_ABS, "next", "next", _NR)]
    if not arm:
        prog.append((_JGE_K, "enosys", "next", _X32_BIT))
    for name in NO_SUCH_CALL:
        prog.append((_JEQ_K, "enosys", "next", _NUMBERS[name][arm]))
    for name in NO_NEW_USER:
        prog.append((_JEQ_K, "flags", "next", _NUMBERS[name][arm]))
    labels = {"allow": len(prog), "enosys": len(prog) + 1, "kill": len(prog) + 2, "flags": len(prog) + 3,
              "allow_flags": len(prog) + 5, "eperm": len(prog) + 6}  # jumps go forward only
    tail = [(_RET_K, "", "", _RET_ALLOW), (_RET_K, "", "", _RET_ERRNO | _ENOSYS), (_RET_K, "", "", _RET_KILL),
            (_LD_W_ABS, "next", "next", _ARG0_LOW), (_JSET_K, "eperm", "allow_flags", CLONE_NEWUSER),
            (_RET_K, "", "", _RET_ALLOW), (_RET_K, "", "", _RET_ERRNO | _EPERM)]
    prog += tail  # the checks fall through to "allow"
    out = []
    for i, (code, jt, jf, k) in enumerate(prog):
        if code in (_RET_K, _LD_W_ABS):
            out.append(_insn(code, 0, 0, k))
            continue
        t, f = (0 if x == "next" else labels[x] - i - 1 for x in (jt, jf))
        assert 0 <= t < 256 and 0 <= f < 256
        out.append(_insn(code, t, f, k))
    return b"".join(out)
