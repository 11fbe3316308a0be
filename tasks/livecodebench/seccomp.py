"""A classic-BPF seccomp filter that closes the memory a graded program could hold outside its rlimits.

``RLIMIT_AS`` counts mapped memory only: pages written into a ``memfd_create`` file, or into a SysV shared memory
segment that is then detached, stay allocated without being mapped. The filter makes ``memfd_create`` and
``shmget`` fail with ``ENOSYS`` (a program sees an old kernel and falls back to files, which the size-capped private
``/tmp`` bounds) and allows everything else. x86-64 (x32 syscalls refused too) and aarch64; on other machines no
filter is built (:func:`filter_bytes` returns ``b""``) and the README documents the gap.

Stdlib only and import-free of the package: the process-mode launcher and bwrap's ``--seccomp FD`` load the same
bytes (an array of ``struct sock_filter``).
"""

from __future__ import annotations

import platform
import struct

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_DENIED = {"x86_64": (319, 29), "aarch64": (279, 194)}  # memfd_create, shmget
_X32_BIT = 0x40000000

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO, _ENOSYS = 0x7FFF0000, 0x00050000, 38
_RET_KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS: a syscall of another architecture (int 0x80 on x86-64)


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_bytes(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one), or ``b""`` where none is built."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return b""
    denied = _DENIED[machine]
    prog = [_insn(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
            _insn(_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
            _insn(_RET_K, 0, 0, _RET_KILL),
            _insn(_LD_W_ABS, 0, 0, 0)]  # seccomp_data.nr
    deny_at = len(prog) + len(denied) + 2  # index of the ERRNO return
    if machine == "x86_64":
        prog.append(_insn(_JGE_K, deny_at - len(prog) - 1, 0, _X32_BIT))
    else:
        deny_at -= 1
    for nr in denied:
        prog.append(_insn(_JEQ_K, deny_at - len(prog) - 1, 0, nr))
    prog.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    assert len(prog) == deny_at
    prog.append(_insn(_RET_K, 0, 0, _RET_ERRNO | _ENOSYS))
    return b"".join(prog)
