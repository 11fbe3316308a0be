"""Which filesystem a path lies on, and whether it is shared over a network (Linux ``/proc/self/mountinfo``).

SQLite's write-ahead log needs memory shared by every process that opens the database, which only processes of
one host have: "WAL does not work over a network filesystem" (sqlite.org/wal.html), and even the rollback journal's
POSIX locks are unreliable on many network filesystems (sqlite.org/useovernet.html). The sample cache asks here
before it opens its database (:mod:`evals.execute.cache_place`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MOUNTINFO = Path("/proc/self/mountinfo")
# systemd's list of network filesystems (fstype_is_network, src/basic/mountpoint-util.c: a "fuse." prefix is
# stripped first), plus the cluster and FUSE network filesystems of HPC sites and clouds, and 9p (WSL2 drives,
# VM shares: SQLite's locks are known broken there)
NETWORK = frozenset({
    "afs", "ceph", "cifs", "smb3", "smbfs", "smb2", "sshfs", "ncpfs", "ncp", "nfs", "nfs4", "gfs", "gfs2", "glusterfs",
    "gpfs", "pvfs2", "ocfs2", "lustre", "davfs",
    "beegfs", "orangefs", "panfs", "wekafs", "cvmfs", "9p", "ceph-fuse", "s3fs", "gcsfuse", "rclone", "juicefs",
    "quobyte", "mfs", "lizardfs",
})  # fmt: skip


@dataclass(frozen=True)
class Mount:
    """One line of ``mountinfo``: where it is mounted, its filesystem type and its source."""

    point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/<pid>/mountinfo`` text, in its order (later lines are mounted over earlier ones);
    lines that do not parse are skipped."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and tail:
            mounts.append(Mount(_unescape(fields[4]), tail[0], _unescape(tail[1]) if len(tail) > 1 else ""))
    return mounts


def mount_of(path: str | os.PathLike[str], mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path`` (absolute, resolved by the caller): the longest mount point that is ``path`` or a
    folder above it, the last such line when several stack on one point; None when nothing matches."""
    parts = PurePosixPath(path).parts
    best: Mount | None = None
    for mount in mounts:
        point = PurePosixPath(mount.point).parts
        if parts[:len(point)] == point and (best is None or len(point) >= len(PurePosixPath(best.point).parts)):
            best = mount
    return best


def is_network(fstype: str) -> bool:
    """Whether a mountinfo filesystem type is shared over a network (``fuse.sshfs`` is ``sshfs``)."""
    return fstype.lower().removeprefix("fuse.") in NETWORK


def existing_real(path: Path) -> Path:
    """``path`` with its links resolved, through its nearest existing folder (the path itself may not exist yet)."""
    path = Path(os.path.abspath(path))
    missing: list[str] = []
    while not path.exists() and path != path.parent:
        missing.append(path.name)
        path = path.parent
    return Path(os.path.realpath(path)).joinpath(*reversed(missing))


def filesystem_of(path: Path, mountinfo: str) -> Mount | None:
    """The mount ``path`` lies on, from ``mountinfo`` (the text of ``/proc/self/mountinfo``)."""
    return mount_of(existing_real(path), parse_mountinfo(mountinfo))


def read_mountinfo(source: Path = MOUNTINFO) -> str:
    """The mount table's text; empty where there is none (not Linux): every path then counts as local."""
    try:
        return source.read_text(errors="replace")
    except OSError:
        return ""
