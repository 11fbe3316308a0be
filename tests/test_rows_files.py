
"""``samples.jsonl``, the rows of a run: read back strictly (a tail torn mid-character repaired, a bad or foreign row
refused in one line naming the line, every line bounded) and written by one writer that repairs lone surrogates and
never writes a line its reader refuses."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import tasks.base
from evals.record.rows import RowWriter, done_keys, read_rows
from tasks.base import iter_jsonl
from tests.refusals import one_line_error


def row(item_id="a", sample_idx=0, **extra) -> dict:
    return {"run_id": "r", "task": "livecodebench", "model": "tiny_llama", "method": "none", "item_id": item_id,
            "sample_idx": sample_idx, "latency_s": 0.1, "completion": "é" * 10, **extra}


def write_rows(path: Path, rows: list[dict], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in rows) + tail)
    return path


def test_a_tail_torn_inside_a_multibyte_character_is_repaired_before_reading(tmp_path):
    whole = json.dumps(row("b"), ensure_ascii=False).encode()
    torn = whole[: whole.index("é".encode()) + 1]  # cut between the two bytes of é
    path = write_rows(tmp_path / "samples.jsonl", [row("a"), row("a", 1)], torn)
    rows = read_rows(path)
    assert done_keys(rows) == {("a", 0), ("a", 1)}
    assert path.read_bytes().endswith(b"}\n")  # the torn line is gone from the file


@pytest.mark.parametrize("bad, message", [
    ({"sample_idx": None}, "sample_idx must be an integer >= 0, got None"),
    ({"sample_idx": 1.9}, "sample_idx must be an integer >= 0, got 1.9"),
    ({"sample_idx": True}, "sample_idx must be an integer >= 0, got True"),
    ({"item_id": None}, "item_id must be a string or an integer, got None"),
    ({"latency_s": {}}, "column latency_s must be a number or null, got {}"),
    ({"task": "aime24"}, r"a row of another run \(task='aime24', the file's first row has 'livecodebench'\)"),
])
def test_bad_or_foreign_rows_are_refused_with_one_line(tmp_path, bad, message):
    second = row("b")
    second.update(bad)
    path = write_rows(tmp_path / "samples.jsonl", [row("a"), second])
    with pytest.raises(ValueError, match=f"samples.jsonl line 2: .*{message}"):
        read_rows(path)


def test_a_row_without_sample_idx_is_refused_not_a_key_error(tmp_path):
    bare = {k: v for k, v in row("b").items() if k != "sample_idx"}
    with pytest.raises(ValueError, match="line 2: not a row of this harness"):
        read_rows(write_rows(tmp_path / "samples.jsonl", [row("a"), bare]))


def test_samples_jsonl_is_read_with_the_same_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(tasks.base, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"item_id": "a", "sample_idx": 0, "completion": "x" * 2000}) + "\n")
    with pytest.raises(ValueError) as err:
        read_rows(path)
    assert f"samples.jsonl: {path} line 1: longer than 1000 bytes" in one_line_error(err)


def test_the_row_writer_repairs_surrogates_in_keys_values_and_tuples_and_appends_on_resume(tmp_path):
    path = tmp_path / "samples.jsonl"
    with RowWriter(path) as writer:
        writer.write({"item_id": "a\ud800", "sample_idx": 0, "error\udfff": ("x\udc00",), "ok": "\ud83d\ude00"})
    with RowWriter(path) as writer:  # a resume appends to the same file
        writer.write({"item_id": "b", "sample_idx": 0, "completion": "\ud800"})
    first, second = read_rows(path)
    assert first == {"item_id": "a\ufffd", "sample_idx": 0, "error\ufffd": ["x\ufffd"], "ok": "\U0001f600"}
    assert second["completion"] == "\ufffd"


def test_the_row_writer_never_writes_a_line_its_reader_refuses(tmp_path, caplog):
    """A row longer than the line bound is cut (longest texts first, each with a note), never written whole."""
    from evals.record.rows import row_line

    limit = 4096
    line = row_line({"item_id": "q", "sample_idx": 0, "completion": "é" * 10_000, "error": "e" * 3000}, limit)
    assert len(line) <= limit
    (tmp_path / "s.jsonl").write_bytes(line)
    ((_, row),) = iter_jsonl(tmp_path / "s.jsonl", max_line_bytes=limit)
    assert row["completion"].endswith("[cut: 10000 characters; a row line holds at most 4096 bytes]")
    assert row["item_id"] == "q" and "completion" in caplog.text


def test_the_writer_bounds_lines_as_the_reader_does():
    with RowWriter(Path(os.devnull)) as writer:
        assert writer.max_line_bytes == tasks.base.MAX_LINE_BYTES >= 64 << 20
