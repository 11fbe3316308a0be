"""Reading a run's files without ever waiting or crashing on what lies at their path: a FIFO (which blocks a reader
forever), a device, a socket or a folder is named in one line before anything is read, and JSON nested deeper than
any file of ours is (a ``meta.json`` of ``[[[[...`` exhausts Python's recursion) is refused in one line too.

Every error is a :class:`NotReadable` (a ``ValueError``: ``<path>: <why>``); :func:`why_not_regular` says the same
without raising, for callers that skip the file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

# Deeper than any meta.json, results.json or config of this harness (about 6 levels), far below Python's recursion
# limit (json.loads recurses once per level)
MAX_JSON_DEPTH = 64


class NotReadable(ValueError):
    """A file that cannot be read as what it should be: ``str()`` is ``<path>: <why>``, one line."""

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


def kind(mode: int) -> str:
    """What a file that is not a regular file is, in words (``a FIFO``, ``a socket``, ``a device``, ``a folder``,
    ``a symbolic link``)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def why_not_regular(path: Path, follow: bool = True) -> str:
    """Empty when ``path`` is absent or a regular file; else why it cannot be read or written as one (``a FIFO,
    not a regular file``). ``follow=False`` (a path the caller writes): a symbolic link is refused as well.
    Only ``stat``/``lstat``: nothing at the path is opened."""
    try:
        mode = (os.stat if follow else os.lstat)(path).st_mode
    except FileNotFoundError:
        if follow and os.path.lexists(path):
            return "a symbolic link to nothing, not a regular file"
        return ""
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return "" if stat.S_ISREG(mode) else f"{kind(mode)}, not a regular file"


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file ``path``; ``ValueError`` (``<path>: a FIFO, not a regular file``, ``<path>: No
    such file or directory``) otherwise. Opened without blocking and checked on the open descriptor, so a FIFO put
    there between a check and the open is never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise NotReadable(path, exc.strerror or type(exc).__name__) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotReadable(path, f"{kind(mode)}, not a regular file")
    with os.fdopen(fd, "rb") as fh:
        try:
            return fh.read()
        except OSError as exc:
            raise NotReadable(path, exc.strerror or type(exc).__name__) from None


def json_depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (a scalar: 0), counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
            depth += 1
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
            depth += 1
        deepest = max(deepest, depth)
    return deepest


def loads(data: bytes | str, where: object) -> Any:
    """``json.loads(data)``; ``ValueError`` naming ``where`` when it is not JSON or nests deeper than
    :data:`MAX_JSON_DEPTH` (the recursion a deeper document would need is never reached by later code either)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise NotReadable(where, f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise NotReadable(where, f"not JSON ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") \
            from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise NotReadable(where, f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    return value


def read_json(path: Path) -> Any:
    """The JSON value of the regular file ``path`` (:func:`read_regular`, then :func:`loads`)."""
    return loads(read_regular(path), path)
