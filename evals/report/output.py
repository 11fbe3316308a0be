"""Writing a report's files: each one whole or not at all, never through a symbolic link.

Every file is written to a fresh temporary file in its own folder (``mkstemp``: created exclusively, so a link
planted under any name is never followed), flushed to disk, then renamed over the target with ``os.replace``,
which replaces a link planted at the target instead of writing where it points. A full or read-only disk raises
``OSError`` naming the target, and the file there before stays as it was. :class:`Batch` stages several files and
renames them only once all of them are written, so a failure leaves the whole earlier set in place.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any


def _stage(path: Path, data: bytes) -> Path:
    """``data`` in a new temporary file beside ``path`` (its name starts with ``.<name>.``), synced; returned."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None  # name the file the user asked for
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all, never through a link; returns ``path``."""
    path = Path(path)
    tmp = _stage(path, _bytes(data))
    try:
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    return path


def save_figure(fig: Any, path: Path, **kwargs: Any) -> Path:
    """``fig.savefig`` (format from the suffix) rendered in memory, then :func:`write_atomic`."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **kwargs)
    return write_atomic(path, buf.getvalue())


def output_folder(path: Path) -> Path:
    """Create the folder ``path`` (parents too) for a report's files; ``ValueError`` when it is a symbolic link
    or not a folder (a report never writes through a link)."""
    path = Path(path)
    if path.is_symlink():
        raise ValueError(f"{path}: is a symbolic link; a report never writes through one (remove it)")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path}: is not a folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


class Batch:
    """Files written together: :meth:`write` stages each one at once (so a full disk shows at the first file that
    does not fit), and leaving the ``with`` block without an error renames them all into place; with an error, the
    staged files are removed and every target keeps its earlier content."""

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []

    def write(self, path: Path, data: str | bytes) -> Path:
        path = Path(path)
        self._staged.append((_stage(path, _bytes(data)), path))
        return path

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            try:
                while self._staged:
                    tmp, path = self._staged[0]
                    try:
                        os.replace(tmp, path)
                    except OSError as err:
                        raise OSError(err.errno, err.strerror, str(path)) from None
                    self._staged.pop(0)
            finally:
                self._discard()
        else:
            self._discard()

    def _discard(self) -> None:
        for tmp, _ in self._staged:
            tmp.unlink(missing_ok=True)
        self._staged.clear()
