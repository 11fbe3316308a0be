"""Reading run directories: every ``summary.csv`` under a root, one run per directory, with its identity.

Each summary row gets ``run`` (the run directory relative to the root: one directory is one line of a plot and one
row or cell of a table, whatever its knobs), ``fingerprint`` (from the row or from ``meta.json``) and ``pair_key``:
the fingerprint of the run's identity without its compression (model, task and data, sampling, backend), which is
what a compressed run and its full-cache run share (:mod:`evals.report.paired`), and ``same_as``: the full-cache run
whose rows the run copied instead of generating them (evals/alias.py), else empty.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

UNCERTAINTY = ("stderr", "ci_lo", "ci_hi")
REQUIRED = ("model", "task", "method", "metric", "value")  # what every table of the report reads


def _meta(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def pair_key(meta: dict) -> str | None:
    """A hash of the identity in ``meta.json`` less its ``compression``; None when there is no identity."""
    identity = meta.get("identity")
    if not isinstance(identity, dict):
        return None
    rest = {k: v for k, v in identity.items() if k != "compression"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _relative(run_dir: str | None, root: Path) -> str | None:
    """A run directory named in ``meta.json`` (``same_as``: the full-cache run whose rows a run copied), relative
    to the report's root when it lies under it."""
    if not run_dir:
        return None
    try:
        return Path(run_dir).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(run_dir)


def read_summary(path: Path) -> pd.DataFrame | str:
    """The table of one ``summary.csv``, or why it cannot be read (then the report skips it, with one line).

    Opened without blocking and checked as it is opened: a FIFO (which would block forever), a device, a folder
    or a socket of that name is not a file; an empty file, one that is not a CSV table or that lacks a column of
    :data:`REQUIRED` is not a run's summary."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device"
        return f"{kind}, not a regular file"
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read()
        except OSError as exc:
            return exc.strerror or type(exc).__name__
    if not data.strip():
        return "empty"
    try:
        frame = pd.read_csv(io.BytesIO(data))
    except (ValueError, UnicodeDecodeError) as exc:  # pandas' ParserError and EmptyDataError are ValueErrors
        return f"not a CSV table: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        return f"no column {', '.join(missing)}"
    if frame.empty:
        return "no rows"
    return frame


def collect(root: Path) -> pd.DataFrame:
    """All summary rows under ``root`` (a run directory or a tree of them); a ``summary.csv`` that cannot be read
    (:func:`read_summary`) is skipped with one warning naming it."""
    files = sorted(p for p in root.rglob("summary.csv") if p.name == "summary.csv")
    if not files:
        raise ValueError(f"DIR: no summary.csv under {root}")
    frames = []
    for path in files:
        frame = read_summary(path)
        if isinstance(frame, str):
            log.warning("%s: skipped (%s)", path, frame)
            continue
        meta = _meta(path.parent)
        rel = path.parent.relative_to(root).as_posix()
        frame["run"] = rel if rel != "." else root.name
        if "fingerprint" not in frame.columns:
            frame["fingerprint"] = meta.get("fingerprint")
        frame["pair_key"] = pair_key(meta)
        frame["same_as"] = _relative(meta.get("same_as"), root)
        frame["run_dir"] = str(path.parent)
        frames.append(frame)
    if not frames:
        raise ValueError(f"DIR: no readable summary.csv under {root} ({len(files)} skipped)")
    out = pd.concat(frames, ignore_index=True)
    for col in UNCERTAINTY:
        if col not in out.columns:
            out[col] = np.nan
    if "unit" not in out.columns:
        out["unit"] = ""
    out["unit"] = out["unit"].fillna("")
    return out
