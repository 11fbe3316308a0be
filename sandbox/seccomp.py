"""A classic-BPF seccomp filter that closes what a graded program never needs and could hold or read outside its
limits.

* Memory outside the rlimits: ``RLIMIT_AS`` counts mapped memory only: pages written into a ``memfd_create`` file, a
  ``memfd_secret`` area or a SysV shared memory segment that is then detached stay allocated without being mapped.
  These fail with ``ENOSYS`` (a program sees an old kernel and falls back to files, which the size-capped private
  ``/tmp`` bounds).
* Keyrings (``add_key``, ``keyctl``, ``request_key``): ``ENOSYS``. Keys are not namespaced: a program could read the
  harness's session keyring or leave keys for the next program (each program also starts on a fresh anonymous
  session keyring, see :mod:`sandbox.cgroup`'s entry command).
* New user namespaces (``unshare``/``clone`` with ``CLONE_NEWUSER``): ``EPERM``. Inside one a program holds every
  capability and may mount a tmpfs outside every limit. ``clone3`` passes its flags in memory, which a seccomp
  filter cannot read: it fails with ``ENOSYS``, and the C library falls back to ``clone`` (glibc, musl).

* Kernel surfaces a graded program never needs, which container runtimes close by default: ``ENOSYS`` (a program
  or library sees an old kernel and falls back) for io_uring, ``userfaultfd``, SysV and POSIX message queues,
  inotify and fanotify, ``kcmp``, file handles (``name_to_handle_at``, ``open_by_handle_at``) and NUMA memory
  policies (:data:`ABSENT`); ``EPERM`` (as Docker's default profile answers) for the administrator's calls: mounts,
  kernel modules, kexec, reboot, swap, the clocks, accounting, quotas, ``bpf``, ``perf_event_open``, ``ptrace`` and
  the reads of another process's memory or descriptors, ``setns``, ``syslog`` and the legacy calls
  (:data:`PRIVILEGED`); ``personality`` with any persona but the ones Docker allows (:data:`PERSONAS`): ``EPERM``.
  The list follows moby's ``profiles/seccomp/default.json`` (Docker's default profile), read as a deny list.

Everything else is allowed. x86-64 (x32 syscalls refused too) and aarch64; on other machines no filter is built
(:func:`filter_bytes` returns ``b""``) and the README documents the gap.

Stdlib only and import-free of the package: the process-mode launcher and bwrap's ``--seccomp FD`` load the same
bytes (an array of ``struct sock_filter``).
"""

from __future__ import annotations

import platform
import struct

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name: (x86-64, aarch64); None where the architecture has no such call (from the kernel's unistd headers)
_NUMBERS = {
    "memfd_create": (319, 279), "shmget": (29, 194), "memfd_secret": (447, 447), "add_key": (248, 217),
    "request_key": (249, 218), "keyctl": (250, 219), "clone3": (435, 435), "unshare": (272, 97), "clone": (56, 220),
    "personality": (135, 92),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "userfaultfd": (323, 282), "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182), "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184), "mq_getsetattr": (245, 185), "inotify_init": (253, None), "inotify_init1": (294, 26),
    "inotify_add_watch": (254, 27), "inotify_rm_watch": (255, 28), "fanotify_init": (300, 262),
    "fanotify_mark": (301, 263), "kcmp": (312, 272), "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265), "get_mempolicy": (239, 236), "set_mempolicy": (238, 237), "mbind": (237, 235),
    "move_pages": (279, 239),
    "mount": (165, 40), "umount2": (166, 39), "move_mount": (429, 429), "open_tree": (428, 428),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "pivot_root": (155, 41), "setns": (308, 268), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "create_module": (174, None),
    "get_kernel_syms": (177, None), "query_module": (178, None), "kexec_load": (246, 104),
    "kexec_file_load": (320, 294), "reboot": (169, 142), "swapon": (167, 224), "swapoff": (168, 225),
    "acct": (163, 89), "quotactl": (179, 60), "quotactl_fd": (443, 443), "clock_settime": (227, 112),
    "clock_adjtime": (305, 266), "settimeofday": (164, 170), "bpf": (321, 280), "perf_event_open": (298, 241),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438), "syslog": (103, 116), "vhangup": (153, 58), "lookup_dcookie": (212, 18),
    "nfsservctl": (180, 42), "uselib": (134, None), "ustat": (136, None), "sysfs": (139, None),
    "_sysctl": (156, None), "iopl": (172, None), "ioperm": (173, None),
}
# refused with ENOSYS: the first line closes memory outside the rlimits, keyrings and clone3
ABSENT = ("memfd_create", "shmget", "memfd_secret", "add_key", "request_key", "keyctl", "clone3",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd", "msgget", "msgsnd", "msgrcv",
          "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
          "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_init", "fanotify_mark",
          "kcmp", "name_to_handle_at", "open_by_handle_at", "get_mempolicy", "set_mempolicy", "mbind", "move_pages")
# refused with EPERM, as Docker's default profile refuses them to a container without the capability
PRIVILEGED = ("mount", "umount2", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
              "mount_setattr", "pivot_root", "setns", "init_module", "finit_module", "delete_module", "create_module",
              "get_kernel_syms", "query_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
              "acct", "quotactl", "quotactl_fd", "clock_settime", "clock_adjtime", "settimeofday", "bpf",
              "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "syslog",
              "vhangup", "lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "iopl", "ioperm")
NO_NEW_USER = ("unshare", "clone")  # refused when their flags (first argument) hold CLONE_NEWUSER
CLONE_NEWUSER = 0x10000000
# personality(2) personas Docker's default profile allows: PER_LINUX, PER_LINUX32, UNAME26, both, and the query
PERSONAS = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
_X32_BIT = 0x40000000

_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO, _ENOSYS, _EPERM = 0x7FFF0000, 0x00050000, 38, 1
_RET_KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS: a syscall of another architecture (int 0x80 on x86-64)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # offsets in struct seccomp_data (little-endian: the low word of args[0] first)


def syscall_number(name: str, machine: str | None = None) -> int | None:
    """The number of syscall ``name`` on ``machine`` (default: this one), or None where no filter is built or the
    architecture has no such call."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return None
    return _NUMBERS[name][0 if machine == "x86_64" else 1]


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_bytes(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one), or ``b""`` where none is built.

    Layout: check the architecture, load the syscall number, one ``JEQ`` per listed call jumping forward to its
    answer, fall through to allow; the answers and the two argument checks (clone flags, personas) form the tail."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return b""
    arm = machine != "x86_64"

    def numbers(names: tuple[str, ...]) -> list[int]:
        return [n for n in (_NUMBERS[name][arm] for name in names) if n is not None]

    # (code, true target, false target, k): targets are "next" or a label of the tail (jumps go forward only)
    prog: list[tuple[int, str, str, int]] = [(_LD_W_ABS, "next", "next", _ARCH),
                                             (_JEQ_K, "next", "kill", _AUDIT_ARCH[machine]),
                                             (_LD_W_ABS, "next", "next", _NR)]
    if not arm:
        prog.append((_JGE_K, "enosys", "next", _X32_BIT))
    prog += [(_JEQ_K, "enosys", "next", n) for n in numbers(ABSENT)]
    prog += [(_JEQ_K, "eperm", "next", n) for n in numbers(PRIVILEGED)]
    prog += [(_JEQ_K, "flags", "next", n) for n in numbers(NO_NEW_USER)]
    prog += [(_JEQ_K, "persona", "next", n) for n in numbers(("personality",))]
    tail: list[tuple[str | None, tuple[int, str, str, int]]] = [
        ("allow", (_RET_K, "", "", _RET_ALLOW)),
        ("enosys", (_RET_K, "", "", _RET_ERRNO | _ENOSYS)),
        ("kill", (_RET_K, "", "", _RET_KILL)),
        ("eperm", (_RET_K, "", "", _RET_ERRNO | _EPERM)),
        ("flags", (_LD_W_ABS, "next", "next", _ARG0_LOW)),
        (None, (_JSET_K, "eperm_args", "allow_args", CLONE_NEWUSER)),
        ("persona", (_LD_W_ABS, "next", "next", _ARG0_LOW)),
        *((None, (_JEQ_K, "allow_args", "next", k)) for k in PERSONAS),
        ("eperm_args", (_RET_K, "", "", _RET_ERRNO | _EPERM)),
        ("allow_args", (_RET_K, "", "", _RET_ALLOW)),
    ]
    labels = {name: len(prog) + i for i, (name, _) in enumerate(tail) if name}
    prog += [insn for _, insn in tail]
    out = []
    for i, (code, jt, jf, k) in enumerate(prog):
        if code in (_RET_K, _LD_W_ABS):
            out.append(_insn(code, 0, 0, k))
            continue
        t, f = (0 if x == "next" else labels[x] - i - 1 for x in (jt, jf))
        assert 0 <= t < 256 and 0 <= f < 256
        out.append(_insn(code, t, f, k))
    return b"".join(out)
