"""Where the sample cache's database lives: the configured folder, unless it lies on a network filesystem.

The cache is one SQLite database in write-ahead-log mode (:mod:`evals.execute.sample_cache`), which is safe only
among processes of one host (:mod:`evals.record.filesystem`). A configured folder on NFS, Lustre, GPFS, CephFS, SMB,
BeeGFS, sshfs... (the shared ``results/`` of a SLURM cluster) is therefore replaced by a node-local one,
``<$TMPDIR or /tmp>/snapstream-sample-cache-<uid>-<host>``, with one warning: each node reuses the samples its own
jobs generated. When neither ``$TMPDIR`` nor ``/tmp`` is local, the cache is off for the run (one warning). Never
a database opened where its locks cannot hold. ``meta.json`` records the decision (``sample_cache_place``).
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.record.filesystem import filesystem_of, is_network

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachePlace:
    """The configured cache folder (``asked``), its filesystem type, and the folder used (None: the cache is off
    for this run), with the reason when they differ."""

    asked: Path
    filesystem: str
    used: Path | None
    why: str | None = None

    def record(self) -> dict[str, Any]:
        """``meta.json``'s ``sample_cache_place``."""
        return {"asked": str(self.asked), "filesystem": self.filesystem,
                "used": None if self.used is None else str(self.used), "why": self.why}


def local_roots(environ: Mapping[str, str] = os.environ) -> list[Path]:
    """Folders that may hold a node-local cache, in order: ``$TMPDIR`` (when it is a folder), ``/tmp``."""
    roots = [Path(environ["TMPDIR"])] if environ.get("TMPDIR") and Path(environ["TMPDIR"]).is_dir() else []
    return [*roots, Path("/tmp")]


def place(asked: Path, mountinfo: str, roots: list[Path], host: str | None = None) -> CachePlace:
    """Where the cache asked for in ``asked`` goes (module docstring); ``mountinfo``: the mount table's text,
    ``roots``: :func:`local_roots`."""
    mount = filesystem_of(asked, mountinfo)
    fstype = mount.fstype if mount is not None else "unknown"
    if not is_network(fstype):
        return CachePlace(asked, fstype, asked)
    why = f"{asked} is on {fstype}, a network filesystem, where SQLite's write-ahead log is unsafe"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", host or socket.gethostname())[:100]
    for root in roots:
        local = filesystem_of(root, mountinfo)
        if local is not None and is_network(local.fstype):
            continue
        used = root / f"snapstream-sample-cache-{os.geteuid()}-{name}"
        log.warning("sample cache: %s: this run uses the node-local cache %s instead (samples are reused by jobs "
                    "of this host; $SNAPSTREAM_SAMPLE_CACHE names a local folder, sample_cache=false turns it off)",
                    why, used)
        return CachePlace(asked, fstype, used, f"{why}: node-local cache")
    log.warning("sample cache: %s, and no local folder was found (%s): off for this run; set "
                "$SNAPSTREAM_SAMPLE_CACHE to a local folder", why, ", ".join(map(str, roots)))
    return CachePlace(asked, fstype, None, f"{why}: no local folder, cache off")
