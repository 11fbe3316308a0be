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

from evals.record.text import repair_surrogates
from snapstream_core.methods import knob_names
from tasks.base import MAX_LINE_BYTES, iter_jsonl

log = logging.getLogger(__name__)

BASE_COLUMNS = ["run_id", "fingerprint", "model", "weights", "task", "item_id", "sample_idx", "method", "backend"]
MEASURE_COLUMNS = [
    "seed", "prompt_tokens", "truncated", "gen_tokens", "finish_reason", "thinking_closed",
    "kv_tokens_peak", "kv_bytes_peak", "compressed", "kv_tokens_mean", "kv_slots_peak",
    "kv_tokens_total_after_prefill", "kv_held_bytes_after_prefill", "latency_s", "device", "prompt_hash",
    "generation_id", "generation_commit", "grading_id", "prediction", "answer", "correct",
]  # fmt: skip


# Columns the runner writes besides the knobs (long texts, provenance) and the compression node's own keys.
OTHER_COLUMNS = ("completion", "completions", "prompt", "same_as", "cached_from", "regraded_from", "tag")


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

    Every row goes through here, so every row is readable back by :func:`read_rows`: lone UTF-16 surrogates (a
    program's ``raise ValueError(chr(0xD800))``, a broken decode), which UTF-8 cannot hold, become U+FFFD in keys
    and values; a line longer than :data:`~tasks.base.MAX_LINE_BYTES` has its longest texts cut, with a note.
    A line is written with a single ``write`` call; on open, a torn last line (a run killed mid-write) is cut off so
    that the file holds only whole rows.
    """

    def __init__(self, path: Path, max_line_bytes: int | None = None):
        self.path = path
        self.max_line_bytes = MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
        repair_tail(path)
        self._fh = path.open("ab")

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(row_line(row, self.max_line_bytes, where=str(self.path)))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


CUT_NOTE = " [cut: {n} characters; a row line holds at most {limit} bytes]"


def row_line(row: dict[str, Any], limit: int = MAX_LINE_BYTES, where: str = "samples.jsonl") -> bytes:
    """One row as a UTF-8 JSON line of at most ``limit`` bytes (newline included), surrogates repaired.

    When the line is longer, the longest top-level strings (the completion, a grader's message) are cut, each
    ending in a note saying how long it was, and a warning names them; a row that still does not fit (its other
    fields alone) raises ``ValueError`` naming ``where``."""
    line = _encode(row)
    cut: list[str] = []
    while len(line) > limit:
        texts = [k for k, v in row.items() if isinstance(v, str) and k not in cut]
        if not texts:
            raise ValueError(f"{where}: a row of {len(line)} bytes does not fit the {limit}-byte line limit "
                             f"(item_id={_brief(row.get('item_id'))})")
        key = max(texts, key=lambda k: len(row[k]))
        text = row[key]
        note = CUT_NOTE.format(n=len(text), limit=limit)
        row = {**row, key: text[: max(0, len(text) - (len(line) - limit) - len(note))] + note}
        cut.append(key)
        line = _encode(row)
    if cut:
        log.warning("%s: item_id=%s sample_idx=%s: %s cut to fit a %d-byte line", where, row.get("item_id"),
                    row.get("sample_idx"), ", ".join(cut), limit)
    return line


def _encode(row: dict[str, Any]) -> bytes:
    """The JSON line of ``row`` in UTF-8; lone surrogates anywhere in it (keys, values, tuples, ``str()`` of other
    objects) become U+FFFD, as :func:`evals.record.text.repair_surrogates` does (JSON's syntax is ASCII, so repairing
    the line repairs each string)."""
    text = json.dumps(row, ensure_ascii=False, default=_jsonable) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return repair_surrogates(text).encode("utf-8")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    return str(value)


MEASURED_COLUMNS = ("prompt_tokens", "gen_tokens", "latency_s", "kv_tokens_peak", "kv_bytes_peak", "kv_tokens_mean",
                    "kv_prefill_bytes_peak", "kv_bytes_after_prefill", "kv_bytes_final", "kv_slots_peak",
                    "kv_tokens_total_after_prefill", "kv_held_bytes_after_prefill")
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


def read_rows(path: Path, fingerprint: str | None = None) -> list[dict[str, Any]]:
    """All rows of a ``samples.jsonl`` (none if it does not exist), after cutting a torn tail.

    Every row must be a JSON object with an ``item_id`` (string or integer), an integer ``sample_idx``, numbers or
    nulls in the measured columns, and the same ``task``/``model``/``method`` as the first row (rows of another run
    are refused, never counted); with ``fingerprint`` (a resume), every row must carry exactly that ``fingerprint``.
    Raises ``ValueError`` naming the file and line, in one line.
    """
    if not path.is_file():
        return []
    repair_tail(path)
    rows = []
    reference: dict[str, Any] | None = None
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
        if fingerprint is not None and rec.get("fingerprint") != fingerprint:
            raise ValueError(f"{where}: a row of another configuration (fingerprint {_brief(rec.get('fingerprint'))}"
                             f", this run's is {fingerprint}); pass overwrite=true to start afresh or choose another "
                             "hydra.run.dir")
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
