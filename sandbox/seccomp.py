"""A classic-BPF seccomp filter: default-deny. A graded program may make only the system calls of :data:`ALLOWED`
(what the Python interpreter, numpy, pandas, scipy, threads, subprocesses and the sandbox's own driver and launcher
use); every other call fails with ``ENOSYS``, as on a kernel that lacks it, so that a program or library that probes
(io_uring, ``statx`` fallbacks, ``clone3``) falls back, and so that every kernel surface added after this list was
written stays closed (``open_tree_attr``, ``statmount``/``listmount``, the ``lsm_*`` calls, landlock, the AIO family,
``set_mempolicy_home_node`` and whatever comes next).

Named in :data:`ABSENT` (``ENOSYS`` like every call not allowed; named for the docs and the tests):

* Memory outside the rlimits: ``RLIMIT_AS`` counts mapped memory only: pages written into a ``memfd_create`` file, a
  ``memfd_secret`` area or a SysV shared memory segment that is then detached stay allocated without being mapped
  (a program sees an old kernel and falls back to files, which the size-capped private ``/tmp`` bounds).
* Keyrings (``add_key``, ``keyctl``, ``request_key``): keys are not namespaced: a program could read the harness's
  session keyring or leave keys for the next program (each program also starts on a fresh anonymous session keyring,
  see :mod:`sandbox.cgroup`'s entry command).
* ``clone3`` passes its flags in memory, which a seccomp filter cannot read (see the namespace rule below): the C
  library falls back to ``clone`` (glibc, musl).
* Kernel surfaces a graded program never needs, which container runtimes close by default: io_uring and the AIO
  family, ``userfaultfd``, SysV and POSIX message queues, inotify and fanotify, ``kcmp``, file handles, NUMA memory
  policies, landlock, the LSM attribute calls and the mount listing calls.

``EPERM``, as Docker's default profile (moby's ``profiles/seccomp/default.json``) answers a container without the
capability, for the administrator's calls of :data:`PRIVILEGED`: mounts, kernel modules, kexec, reboot, swap, the
clocks, accounting, quotas, ``bpf``, ``perf_event_open``, ``ptrace`` and the reads of another process's memory or
descriptors, ``setns``, ``chroot``, host and domain names, ``syslog`` and the legacy calls.

Allowed only with some arguments (the low 32 bits of the first): ``clone`` and ``unshare`` without a flag that makes
a new namespace (:data:`NEW_NAMESPACES`, Docker's mask: inside a new user namespace a program holds every capability
and may mount a tmpfs outside every limit), else ``EPERM``; ``personality`` with the personas Docker allows
(:data:`PERSONAS`), else ``EPERM``; ``socket`` in the families of :data:`SOCKET_FAMILIES` (local and IP sockets,
netlink for ``getaddrinfo``), else ``EAFNOSUPPORT`` as from a kernel built without the family (closes ``AF_VSOCK``,
``AF_ALG``, ``AF_PACKET`` and the rarely used families).

x86-64 (x32 calls refused with ``ENOSYS``; a call of another architecture, ``int 0x80``, kills the process) and
aarch64; on other machines no filter is built (:func:`filter_bytes` returns ``b""``) and the README documents the
gap. The numbers are the kernel's (``arch/x86/entry/syscalls/syscall_64.tbl``, ``include/uapi/asm-generic/unistd.h``
for aarch64). The program is a binary search over the ranges of numbers that share an answer (about 200
instructions, a dozen run per call; the kernel also caches the answer of each call whose answer does not depend on
its arguments, since Linux 5.11).

Stdlib only and import-free of the package: the process-mode launcher and bwrap's ``--seccomp FD`` load the same
bytes (an array of ``struct sock_filter``), and ``bench/lcb_filter.py`` runs this file alone at a git revision.
"""

from __future__ import annotations

import platform
import struct

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name: (x86-64, aarch64); None where the architecture has no such call
_NUMBERS = {
    "_sysctl": (156, None), "accept": (43, 202), "accept4": (288, 242), "access": (21, None), "acct": (163, 89),
    "add_key": (248, 217), "adjtimex": (159, 171), "alarm": (37, None), "arch_prctl": (158, None), "bind": (49, 200),
    "bpf": (321, 280), "brk": (12, 214), "capget": (125, 90), "capset": (126, 91), "chdir": (80, 49),
    "chmod": (90, None), "chown": (92, None), "chroot": (161, 51), "clock_adjtime": (305, 266),
    "clock_getres": (229, 114), "clock_gettime": (228, 113), "clock_nanosleep": (230, 115),
    "clock_settime": (227, 112), "clone": (56, 220), "clone3": (435, 435), "close": (3, 57),
    "close_range": (436, 436), "connect": (42, 203), "copy_file_range": (326, 285), "creat": (85, None),
    "create_module": (174, None), "delete_module": (176, 106), "dup": (32, 23), "dup2": (33, None),
    "dup3": (292, 24), "epoll_create": (213, None), "epoll_create1": (291, 20), "epoll_ctl": (233, 21),
    "epoll_pwait": (281, 22), "epoll_pwait2": (441, 441), "epoll_wait": (232, None), "eventfd": (284, None),
    "eventfd2": (290, 19), "execve": (59, 221), "execveat": (322, 281), "exit": (60, 93), "exit_group": (231, 94),
    "faccessat": (269, 48), "faccessat2": (439, 439), "fadvise64": (221, 223), "fallocate": (285, 47),
    "fanotify_init": (300, 262), "fanotify_mark": (301, 263), "fchdir": (81, 50), "fchmod": (91, 52),
    "fchmodat": (268, 53), "fchmodat2": (452, 452), "fchown": (93, 55), "fchownat": (260, 54), "fcntl": (72, 25),
    "fdatasync": (75, 83), "fgetxattr": (193, 10), "finit_module": (313, 273), "flistxattr": (196, 13),
    "flock": (73, 32), "fork": (57, None), "fremovexattr": (199, 16), "fsconfig": (431, 431), "fsetxattr": (190, 7),
    "fsmount": (432, 432), "fsopen": (430, 430), "fspick": (433, 433), "fstat": (5, 80), "fstatfs": (138, 44),
    "fsync": (74, 82), "ftruncate": (77, 46), "futex": (202, 98), "futex_waitv": (449, 449),
    "futimesat": (261, None), "get_kernel_syms": (177, None), "get_mempolicy": (239, 236),
    "get_robust_list": (274, 100), "get_thread_area": (211, None), "getcpu": (309, 168), "getcwd": (79, 17),
    "getdents": (78, None), "getdents64": (217, 61), "getegid": (108, 177), "geteuid": (107, 175),
    "getgid": (104, 176), "getgroups": (115, 158), "getitimer": (36, 102), "getpeername": (52, 205),
    "getpgid": (121, 155), "getpgrp": (111, None), "getpid": (39, 172), "getppid": (110, 173),
    "getpriority": (140, 141), "getrandom": (318, 278), "getresgid": (120, 150), "getresuid": (118, 148),
    "getrlimit": (97, 163), "getrusage": (98, 165), "getsid": (124, 156), "getsockname": (51, 204),
    "getsockopt": (55, 209), "gettid": (186, 178), "gettimeofday": (96, 169), "getuid": (102, 174),
    "getxattr": (191, 8), "init_module": (175, 105), "inotify_add_watch": (254, 27), "inotify_init": (253, None),
    "inotify_init1": (294, 26), "inotify_rm_watch": (255, 28), "io_cancel": (210, 3), "io_destroy": (207, 1),
    "io_getevents": (208, 4), "io_pgetevents": (333, 292), "io_setup": (206, 0), "io_submit": (209, 2),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "io_uring_setup": (425, 425), "ioctl": (16, 29),
    "ioperm": (173, None), "iopl": (172, None), "ioprio_get": (252, 31), "ioprio_set": (251, 30), "kcmp": (312, 272),
    "kexec_file_load": (320, 294), "kexec_load": (246, 104), "keyctl": (250, 219), "kill": (62, 129),
    "landlock_add_rule": (445, 445), "landlock_create_ruleset": (444, 444), "landlock_restrict_self": (446, 446),
    "lchown": (94, None), "lgetxattr": (192, 9), "link": (86, None), "linkat": (265, 37), "listen": (50, 201),
    "listmount": (458, 458), "listxattr": (194, 11), "llistxattr": (195, 12), "lookup_dcookie": (212, 18),
    "lremovexattr": (198, 15), "lseek": (8, 62), "lsetxattr": (189, 6), "lsm_get_self_attr": (459, 459),
    "lsm_list_modules": (461, 461), "lsm_set_self_attr": (460, 460), "lstat": (6, None), "madvise": (28, 233),
    "map_shadow_stack": (453, 453), "mbind": (237, 235), "membarrier": (324, 283), "memfd_create": (319, 279),
    "memfd_secret": (447, 447), "mincore": (27, 232), "mkdir": (83, None), "mkdirat": (258, 34),
    "mknod": (133, None), "mknodat": (259, 33), "mlock": (149, 228), "mlock2": (325, 284), "mlockall": (151, 230),
    "mmap": (9, 222), "mount": (165, 40), "mount_setattr": (442, 442), "move_mount": (429, 429),
    "move_pages": (279, 239), "mprotect": (10, 226), "mq_getsetattr": (245, 185), "mq_notify": (244, 184),
    "mq_open": (240, 180), "mq_timedreceive": (243, 183), "mq_timedsend": (242, 182), "mq_unlink": (241, 181),
    "mremap": (25, 216), "msgctl": (71, 187), "msgget": (68, 186), "msgrcv": (70, 188), "msgsnd": (69, 189),
    "msync": (26, 227), "munlock": (150, 229), "munlockall": (152, 231), "munmap": (11, 215),
    "name_to_handle_at": (303, 264), "nanosleep": (35, 101), "newfstatat": (262, 79), "nfsservctl": (180, 42),
    "open": (2, None), "open_by_handle_at": (304, 265), "open_tree": (428, 428), "open_tree_attr": (467, 467),
    "openat": (257, 56), "openat2": (437, 437), "pause": (34, None), "perf_event_open": (298, 241),
    "personality": (135, 92), "pidfd_getfd": (438, 438), "pidfd_open": (434, 434), "pidfd_send_signal": (424, 424),
    "pipe": (22, None), "pipe2": (293, 59), "pivot_root": (155, 41), "pkey_alloc": (330, 289),
    "pkey_free": (331, 290), "pkey_mprotect": (329, 288), "poll": (7, None), "ppoll": (271, 73), "prctl": (157, 167),
    "pread64": (17, 67), "preadv": (295, 69), "preadv2": (327, 286), "prlimit64": (302, 261),
    "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "pselect6": (270, 72), "ptrace": (101, 117),
    "pwrite64": (18, 68), "pwritev": (296, 70), "pwritev2": (328, 287), "query_module": (178, None),
    "quotactl": (179, 60), "quotactl_fd": (443, 443), "read": (0, 63), "readahead": (187, 213),
    "readlink": (89, None), "readlinkat": (267, 78), "readv": (19, 65), "reboot": (169, 142), "recvfrom": (45, 207),
    "recvmmsg": (299, 243), "recvmsg": (47, 212), "removexattr": (197, 14), "rename": (82, None),
    "renameat": (264, 38), "renameat2": (316, 276), "request_key": (249, 218), "restart_syscall": (219, 128),
    "rmdir": (84, None), "rseq": (334, 293), "rt_sigaction": (13, 134), "rt_sigpending": (127, 136),
    "rt_sigprocmask": (14, 135), "rt_sigqueueinfo": (129, 138), "rt_sigreturn": (15, 139),
    "rt_sigsuspend": (130, 133), "rt_sigtimedwait": (128, 137), "rt_tgsigqueueinfo": (297, 240),
    "sched_get_priority_max": (146, 125), "sched_get_priority_min": (147, 126), "sched_getaffinity": (204, 123),
    "sched_getattr": (315, 275), "sched_getparam": (143, 121), "sched_getscheduler": (145, 120),
    "sched_rr_get_interval": (148, 127), "sched_setaffinity": (203, 122), "sched_setattr": (314, 274),
    "sched_setparam": (142, 118), "sched_setscheduler": (144, 119), "sched_yield": (24, 124), "select": (23, None),
    "semctl": (66, 191), "semget": (64, 190), "semop": (65, 193), "semtimedop": (220, 192), "sendfile": (40, 71),
    "sendmmsg": (307, 269), "sendmsg": (46, 211), "sendto": (44, 206), "set_mempolicy": (238, 237),
    "set_mempolicy_home_node": (450, 450), "set_robust_list": (273, 99), "set_thread_area": (205, None),
    "set_tid_address": (218, 96), "setdomainname": (171, 162), "setfsgid": (123, 152), "setfsuid": (122, 151),
    "setgid": (106, 144), "setgroups": (116, 159), "sethostname": (170, 161), "setitimer": (38, 103),
    "setns": (308, 268), "setpgid": (109, 154), "setpriority": (141, 140), "setregid": (114, 143),
    "setresgid": (119, 149), "setresuid": (117, 147), "setreuid": (113, 145), "setrlimit": (160, 164),
    "setsid": (112, 157), "setsockopt": (54, 208), "settimeofday": (164, 170), "setuid": (105, 146),
    "setxattr": (188, 5), "shmget": (29, 194), "shutdown": (48, 210), "sigaltstack": (131, 132),
    "signalfd": (282, None), "signalfd4": (289, 74), "socket": (41, 198), "socketpair": (53, 199),
    "splice": (275, 76), "stat": (4, None), "statfs": (137, 43), "statmount": (457, 457), "statx": (332, 291),
    "swapoff": (168, 225), "swapon": (167, 224), "symlink": (88, None), "symlinkat": (266, 36), "sync": (162, 81),
    "sync_file_range": (277, 84), "syncfs": (306, 267), "sysfs": (139, None), "sysinfo": (99, 179),
    "syslog": (103, 116), "tee": (276, 77), "tgkill": (234, 131), "time": (201, None), "timer_create": (222, 107),
    "timer_delete": (226, 111), "timer_getoverrun": (225, 109), "timer_gettime": (224, 108),
    "timer_settime": (223, 110), "timerfd_create": (283, 85), "timerfd_gettime": (287, 87),
    "timerfd_settime": (286, 86), "times": (100, 153), "tkill": (200, 130), "truncate": (76, 45), "umask": (95, 166),
    "umount2": (166, 39), "uname": (63, 160), "unlink": (87, None), "unlinkat": (263, 35), "unshare": (272, 97),
    "uselib": (134, None), "userfaultfd": (323, 282), "ustat": (136, None), "utime": (132, None),
    "utimensat": (280, 88), "utimes": (235, None), "vfork": (58, None), "vhangup": (153, 58), "wait4": (61, 260),
    "waitid": (247, 95), "write": (1, 64), "writev": (20, 66),
}
# the calls a graded program may make, by what they serve
ALLOWED = (
    # files and descriptors: the driver's I/O, imports, tempfile, shutil (xattrs: copystat)
    "read", "write", "open", "close", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "lseek",
    "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2", "access", "faccessat",
    "faccessat2", "openat", "openat2", "creat", "pipe", "pipe2", "dup", "dup2", "dup3", "fcntl", "flock", "ioctl",
    "close_range", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "truncate", "ftruncate", "fallocate",
    "fadvise64", "readahead", "sendfile", "copy_file_range", "splice", "tee", "getdents", "getdents64", "getcwd",
    "chdir", "fchdir", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "link", "linkat", "unlink",
    "unlinkat", "symlink", "symlinkat", "readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown",
    "fchown", "lchown", "fchownat", "umask", "mknod", "mknodat", "utime", "utimes", "futimesat", "utimensat",
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "setxattr", "lsetxattr",
    "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    # waiting on descriptors (select, asyncio, threads' wake-ups)
    "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
    "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create", "timerfd_settime",
    "timerfd_gettime",
    # memory (rlimits bound it: RLIMIT_AS, RLIMIT_MEMLOCK)
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore", "mlock", "mlock2", "mlockall",
    "munlock", "munlockall", "pkey_alloc", "pkey_free", "pkey_mprotect", "membarrier", "map_shadow_stack",
    # processes and threads (subprocess, multiprocessing, glibc's thread start-up), the driver's privilege drop
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "set_tid_address",
    "set_robust_list", "get_robust_list", "rseq", "futex", "futex_waitv", "arch_prctl", "set_thread_area",
    "get_thread_area", "gettid", "getpid", "getppid", "getpgid", "getpgrp", "getsid", "setpgid", "setsid", "prctl",
    "pidfd_open", "pidfd_send_signal", "restart_syscall",
    # scheduling, limits and process information (os.cpu_count, resource, the driver's rlimits)
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam", "sched_getscheduler",
    "sched_setscheduler", "sched_getattr", "sched_setattr", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "getpriority", "setpriority", "ioprio_get", "ioprio_set", "getcpu", "getrlimit",
    "setrlimit", "prlimit64", "getrusage", "times", "sysinfo", "uname", "capget", "capset",
    # user and group ids (the driver's setuid to a fresh uid)
    "getuid", "geteuid", "getgid", "getegid", "getgroups", "getresuid", "getresgid", "setuid", "setgid", "setgroups",
    "setresuid", "setresgid", "setreuid", "setregid", "setfsuid", "setfsgid",
    # signals
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "kill", "tkill", "tgkill", "pause", "alarm",
    # time and randomness
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time", "getitimer", "setitimer",
    "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete", "adjtimex", "getrandom",
    # sockets (no network in bwrap mode; families restricted: SOCKET_FAMILIES) and SysV semaphores (own IPC namespace)
    "socketpair", "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername", "sendto",
    "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "setsockopt", "getsockopt", "semget",
    "semop", "semtimedop", "semctl",
)
# ENOSYS, as every call not in ALLOWED: named here because each closes something (see the module docstring)
ABSENT = ("memfd_create", "shmget", "memfd_secret", "add_key", "request_key", "keyctl", "clone3", "io_uring_setup",
          "io_uring_enter", "io_uring_register", "userfaultfd", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open",
          "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr", "inotify_init",
          "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_init", "fanotify_mark", "kcmp",
          "name_to_handle_at", "open_by_handle_at", "get_mempolicy", "set_mempolicy", "mbind", "move_pages",
          "set_mempolicy_home_node", "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents",
          "io_pgetevents", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
          "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules", "statmount", "listmount")
# EPERM, as Docker's default profile refuses them to a container without the capability
PRIVILEGED = ("mount", "umount2", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
              "mount_setattr", "pivot_root", "setns", "init_module", "finit_module", "delete_module", "create_module",
              "get_kernel_syms", "query_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
              "acct", "quotactl", "quotactl_fd", "clock_settime", "clock_adjtime", "settimeofday", "bpf",
              "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "syslog",
              "vhangup", "lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "iopl", "ioperm",
              "open_tree_attr", "chroot", "sethostname", "setdomainname")
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
NEW_NAMESPACES = 0x7E020000  # clone and unshare: EPERM when their flags (first argument) hold one
# personality(2) personas Docker's default profile allows: PER_LINUX, PER_LINUX32, UNAME26, both, and the query
PERSONAS = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
SOCKET_FAMILIES = (1, 2, 10, 16)  # socket(2): AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
_RULED = {"clone": "namespaces", "unshare": "namespaces", "personality": "persona", "socket": "family"}

_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO, _ENOSYS, _EPERM, _EAFNOSUPPORT = 0x7FFF0000, 0x00050000, 38, 1, 97
_RET_KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS: a syscall of another architecture (int 0x80 on x86-64)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # offsets in struct seccomp_data (little-endian: the low word of args[0] first)
_MAX_INSNS = 4096  # BPF_MAXINSNS: the kernel refuses a longer program


def syscall_number(name: str, machine: str | None = None) -> int | None:
    """The number of syscall ``name`` on ``machine`` (default: this one), or None where no filter is built or the
    architecture has no such call."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return None
    return _NUMBERS[name][0 if machine == "x86_64" else 1]


def answers(machine: str) -> dict[int, str]:
    """The answer to each named call of ``machine`` (number -> ``allow``, ``eperm``, ``enosys`` or the rule of
    :data:`_RULED`: ``namespaces``, ``persona``, ``family``); every other number gets ``enosys``."""
    out: dict[int, str] = {}
    for names, answer in ((ABSENT, "enosys"), (PRIVILEGED, "eperm"), (ALLOWED, "allow")):
        for name in names:
            nr = syscall_number(name, machine)
            if nr is not None:
                out[nr] = answer
    for name, rule in _RULED.items():
        out[syscall_number(name, machine)] = rule
    return out


def _ranges(table: dict[int, str]) -> list[tuple[int, str]]:
    """``table`` as the ranges of numbers that share an answer: (first number, answer), from 0 up, each range ending
    where the next begins (the last one: at 2**32; x32 numbers on x86-64 fall in it)."""
    out: list[tuple[int, str]] = []
    for nr in range(max(table) + 2):
        answer = table.get(nr, "enosys")
        if not out or out[-1][1] != answer:
            out.append((nr, answer))
    return out


def _answer(answer: str) -> list[tuple[int, int, int, int]]:
    """The instructions that answer a call (code, jump if true, jump if false, k): a return, or a check of the first
    argument followed by its two returns."""
    ret = {"allow": _RET_ALLOW, "enosys": _RET_ERRNO | _ENOSYS, "eperm": _RET_ERRNO | _EPERM}
    if answer in ret:
        return [(_RET_K, 0, 0, ret[answer])]
    load = (_LD_W_ABS, 0, 0, _ARG0_LOW)
    if answer == "namespaces":
        return [load, (_JSET_K, 0, 1, NEW_NAMESPACES), (_RET_K, 0, 0, ret["eperm"]), (_RET_K, 0, 0, _RET_ALLOW)]
    good, refusal = {"persona": (PERSONAS, ret["eperm"]),
                     "family": (SOCKET_FAMILIES, _RET_ERRNO | _EAFNOSUPPORT)}[answer]
    # each JEQ jumps over the ones after it and the refusal to the final allow
    return [load, *((_JEQ_K, len(good) - i, 0, k) for i, k in enumerate(good)), (_RET_K, 0, 0, refusal),
            (_RET_K, 0, 0, _RET_ALLOW)]


def _search(ranges: list[tuple[int, str]]) -> list[tuple[int, int, int, int]]:
    """A binary search over ``ranges`` (the syscall number in the accumulator): ``JGE`` the first number of the
    middle range jumps over the code of the lower half to the upper half's."""
    if len(ranges) == 1:
        return _answer(ranges[0][1])
    mid = len(ranges) // 2
    low, high = _search(ranges[:mid]), _search(ranges[mid:])
    if len(low) > 255:
        raise ValueError(f"seccomp: {len(ranges)} ranges make a jump longer than classic BPF's 255 instructions")
    return [(_JGE_K, len(low), 0, ranges[mid][0]), *low, *high]


def filter_bytes(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one), or ``b""`` where none is built.

    Layout: check the architecture (else kill), load the syscall number, then the binary search of :func:`_search`
    over the ranges of :func:`answers`, each leaf its answer (x32 numbers, 0x40000000 and up, fall in the last
    range: ``ENOSYS``)."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return b""
    prog = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ_K, 1, 0, _AUDIT_ARCH[machine]), (_RET_K, 0, 0, _RET_KILL),
            (_LD_W_ABS, 0, 0, _NR)]
    prog += _search(_ranges(answers(machine)))
    if len(prog) > _MAX_INSNS:
        raise ValueError(f"seccomp: {len(prog)} instructions, more than the kernel's {_MAX_INSNS}")
    return b"".join(struct.pack("=HBBI", *insn) for insn in prog)
