"""Result rows: the columns of Contract 3, an append-only JSONL writer that survives ``kill -9``, and its reader."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

KNOB_COLUMNS = ["prompt_budget", "window", "kernel", "pooling", "gqa_agg", "sinks", "recent", "positions"]
ROW_COLUMNS = [
    "run_id", "fingerprint", "model", "weights", "task", "item_id", "sample_idx", "method", *KNOB_COLUMNS, "seed",
    "prompt_tokens", "truncated", "gen_tokens", "finish_reason", "thinking_closed",
    "kv_tokens_peak", "kv_bytes_peak", "latency_s", "prompt_hash", "prediction", "answer", "correct",
]  # fmt: skip
LONG_TEXT_COLUMNS = ("completion", "completions", "prompt")


class RowWriter:
    """Appends one JSON line per row to ``samples.jsonl``, flushed and fsynced as written.

    A line is written with a single ``write`` call; on open, a torn last line (a run killed mid-write) is cut off so
    that the file holds only whole rows.
    """

    def __init__(self, path: Path):
        self.path = path
        repair_tail(path)
        self._fh = path.open("a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps(row, ensure_ascii=False, default=_jsonable) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    return str(value)


def repair_tail(path: Path) -> None:
    """Cut a partial last line (no trailing newline) left by an interrupted write."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        data = path.read_bytes()
        keep = data.rfind(b"\n") + 1
        log.warning("samples.jsonl: dropping a partial last line (%d bytes) left by an interrupted run",
                    len(data) - keep)
        fh.truncate(keep)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """All whole rows of a ``samples.jsonl`` (none if it does not exist)."""
    if not path.is_file():
        return []
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.endswith("\n"):
                break  # torn tail: not a row
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} line {lineno}: malformed row ({exc.msg})") from exc
    return rows


def done_keys(rows: Iterable[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(str(r["item_id"]), int(r["sample_idx"])) for r in rows}


def tidy(rows: list[dict[str, Any]]):
    """The rows as a pandas DataFrame without long texts, Contract-3 columns first."""
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df.drop(columns=[c for c in LONG_TEXT_COLUMNS if c in df.columns])
    first = [c for c in ROW_COLUMNS if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]]
