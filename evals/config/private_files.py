"""Whether a file or folder the harness reads back (the sample cache, the checkpoint-hash memo) can be trusted: the
user's own, not a link, writable by nobody else. Anyone else who can write there could plant rows or hashes."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def untrusted(path: Path, st: os.stat_result, kind: str) -> str | None:
    """Why ``path`` (``st``: its ``lstat``) cannot be trusted as a ``kind`` (``"file"`` or ``"folder"``): a link, not
    a ``kind``, another owner, writable by group or others; None when it can."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if kind == "folder" and not stat.S_ISDIR(st.st_mode) or kind == "file" and not stat.S_ISREG(st.st_mode):
        return f"is not a {kind}"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user ({os.geteuid()})"
    if st.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def private_folder(path: Path) -> str | None:
    """Make ``path`` (mode 0700, its parents as usual) when nothing is there; why it cannot be trusted as a folder
    (:func:`untrusted`), or None."""
    if not os.path.lexists(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    return untrusted(path, os.lstat(path), "folder")
