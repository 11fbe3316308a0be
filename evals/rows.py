"""Result rows: the columns (docs/architecture.md, "Result rows"), an append-only JSONL writer that survives
``kill -9``, and its reader."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from snapstream_core.methods import knob_names

log = logging.getLogger(__name__)

BASE_COLUMNS = ["run_id", "fingerprint", "model", "weights", "task", "item_id", "sample_idx", "method"]
MEASURE_COLUMNS = [
    "seed", "prompt_tokens", "truncated", "gen_tokens", "finish_reason", "thinking_closed",
    "kv_tokens_peak", "kv_bytes_peak", "latency_s", "prompt_hash", "prediction", "answer", "correct",
]  # fmt: skip


# Columns the runner writes besides the knobs (long texts, provenance) and the compression node's own keys.
OTHER_COLUMNS = ("completion", "completions", "prompt", "same_as", "cached_from", "tag")


def check_knob_names() -> None:
    """Refuse (one ``ValueError`` naming the method and the field) a registered method whose knob has the name of a
    row column: its value would share the column with another (``seed``: two ``seed`` columns in ``samples.csv``,
    one value lost in ``samples.jsonl``)."""
    from snapstream_core.methods import METHODS

    taken = {*BASE_COLUMNS, *MEASURE_COLUMNS, *OTHER_COLUMNS}
    for name, cls in METHODS.items():
        for f in dataclasses.fields(cls):
            if f.name in taken and f.name != "method":
                raise ValueError(f"compression method {name!r}: knob {f.name!r} has the name of a result-row "
                                 f"column; rename the field of {cls.__name__} (e.g. {name}_{f.name})")


def row_columns() -> list[str]:
    """The columns every row has, in order: who and what, one column per compression knob (from the method
    dataclasses registered now, so a new method's knob is a new column), then what was measured and graded."""
    check_knob_names()
    return [*BASE_COLUMNS, *knob_names(), *MEASURE_COLUMNS]


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


MEASURED_COLUMNS = ("prompt_tokens", "gen_tokens", "latency_s", "kv_tokens_peak", "kv_bytes_peak",
                    "kv_prefill_bytes_peak", "kv_bytes_after_prefill", "kv_bytes_final")
IDENTITY_COLUMNS = ("task", "model", "method")  # a row whose values differ from the file's first row is foreign


def is_number(value: Any) -> bool:
    """A JSON number that is a real measurement: int or float, not bool, not NaN/inf."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_measured(record: dict[str, Any], where: str) -> None:
    """Raise ``ValueError`` naming ``where`` and the column when a measured column is neither a number nor null."""
    for name in MEASURED_COLUMNS:
        value = record.get(name)
        if value is not None and not is_number(value):
            raise ValueError(f"{where}: column {name} must be a number or null, got {_brief(value)}")


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def repair_tail(path: Path) -> None:
    """Cut a partial last line (no trailing newline) left by an interrupted write; reads only the tail."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        end, keep = size, 0
        while end > 0:  # scan back for the last newline, 64 KiB at a time
            start = max(0, end - (1 << 16))
            fh.seek(start)
            nl = fh.read(end - start).rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            end = start
        log.warning("%s: dropping a partial last line (%d bytes) left by an interrupted run", path.name, size - keep)
        fh.truncate(keep)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """All rows of a ``samples.jsonl`` (none if it does not exist), after cutting a torn tail.

    Every row must be a JSON object with an ``item_id`` (string or integer), an integer ``sample_idx``, numbers or
    nulls in the measured columns, and the same ``task``/``model``/``method`` as the first row (rows of another run
    are refused, never counted). Raises ``ValueError`` naming the file and line, in one line.
    """
    if not path.is_file():
        return []
    repair_tail(path)
    rows = []
    reference: dict[str, Any] | None = None
    from tasks.base import iter_jsonl  # here: checking a config (the planner) reads no task module

    for lineno, rec in iter_jsonl(path, field="samples.jsonl"):
        where = f"{path} line {lineno}"
        item_id, idx = rec.get("item_id"), rec.get("sample_idx")
        if isinstance(item_id, bool) or not isinstance(item_id, (str, int)):
            raise ValueError(f"{where}: not a row of this harness (item_id must be a string or an integer, "
                             f"got {_brief(item_id)})")
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            raise ValueError(f"{where}: not a row of this harness (sample_idx must be an integer >= 0, "
                             f"got {_brief(idx)})")
        check_measured(rec, where)
        ident = {k: rec.get(k) for k in IDENTITY_COLUMNS}
        if reference is None:
            reference = ident
        elif ident != reference:
            diff = next(k for k in IDENTITY_COLUMNS if ident[k] != reference[k])
            raise ValueError(f"{where}: a row of another run ({diff}={_brief(ident[diff])}, the file's first row has "
                             f"{_brief(reference[diff])}); move it out or choose another hydra.run.dir")
        rows.append(rec)
    return rows


def done_keys(rows: Iterable[dict[str, Any]]) -> set[tuple[str, int]]:
    """``(item_id, sample_idx)`` of rows read by :func:`read_rows` (which checked their types)."""
    return {(str(r["item_id"]), r["sample_idx"]) for r in rows}


def tidy(rows: list[dict[str, Any]]):
    """The rows as a pandas DataFrame without long texts, :func:`row_columns` first."""
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df.drop(columns=[c for c in LONG_TEXT_COLUMNS if c in df.columns])
    first = [c for c in row_columns() if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]]
