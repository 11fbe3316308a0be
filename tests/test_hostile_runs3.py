"""Hostile runs, round 3: rows that are never silently wrong. One writer repairs every row (a program's lone
surrogate never crashes a run or its resume) and bounds its line; every JSONL reader bounds a line before it reads
it whole; rows of an unknown or other configuration are never resumed; ``overwrite=true`` takes the old headline
away first; a no-op re-run leaves the run's record alone; LongBench-v2 refuses duplicate ids and non-text fields."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import tasks.base
from evals.rows import RowWriter, read_rows
from evals.run import run
from tasks.base import bundled_path, iter_jsonl
from tasks.longbench_v2 import load as load_longbench
from tests.runner_utils import TINY, cli, compose_cfg

NEEDLE = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "gen.max_new_tokens=4"]
IDS = ("needle-0-0", "needle-0-1")


def replay_args(tmp_path: Path, completions=("x", "y"), name="c.jsonl") -> list[str]:
    path = tmp_path / name
    path.write_text("".join(json.dumps({"item_id": i, "completion": c}) + "\n" for i, c in zip(IDS, completions)))
    return [*NEEDLE, "backend=replay", f"backend.path={path}"]


def one_line_error(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


# --- the one row writer -------------------------------------------------------------------------------------------

def test_a_program_raising_a_lone_surrogate_neither_crashes_the_run_nor_its_resume(tmp_path):
    """S10, run side: ``raise ValueError(chr(0xD800))`` put U+D800 in the grader's message; the row write raised
    ``UnicodeEncodeError`` and every resume crashed again on the same sample."""
    from lcb_helpers import bundled, fenced

    qid = next(iter(bundled()))
    path = tmp_path / "replay.jsonl"
    path.write_text(json.dumps({"item_id": qid, "completion": fenced("raise ValueError(chr(0xD800))")}) + "\n")
    args = ["task=livecodebench", "task.source=bundled", "task.limit=1", "backend=replay", f"backend.path={path}",
            f"out_root={tmp_path}"]
    out = run(compose_cfg(args), tmp_path / "run")
    (row,) = read_rows(out / "samples.jsonl")
    assert row["outcome"] == "runtime_error" and "\ufffd" in row["error"]
    assert run(compose_cfg(args), tmp_path / "run") == out  # the resume reads the row back
    assert len(read_rows(out / "samples.jsonl")) == 1


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
    from evals.rows import row_line

    limit = 4096
    line = row_line({"item_id": "q", "sample_idx": 0, "completion": "é" * 10_000, "error": "e" * 3000}, limit)
    assert len(line) <= limit
    (tmp_path / "s.jsonl").write_bytes(line)
    ((_, row),) = iter_jsonl(tmp_path / "s.jsonl", max_line_bytes=limit)
    assert row["completion"].endswith("[cut: 10000 characters; a row line holds at most 4096 bytes]")
    assert row["item_id"] == "q" and "completion" in caplog.text


# --- bounded JSONL lines ------------------------------------------------------------------------------------------

def test_a_huge_line_in_a_task_file_is_refused_after_reading_at_most_the_bound(tmp_path, monkeypatch):
    """R4: a 1 GiB line cost 2.2 GiB before the error. Here: a 64 MiB line (sparse) under a 1 MiB bound."""
    monkeypatch.setattr(tasks.base, "MAX_LINE_BYTES", 1 << 20)
    path = tmp_path / "items.jsonl"
    with path.open("wb") as fh:
        fh.write(b'{"_id": "x"}\n')
        fh.truncate(64 << 20)  # line 2: 64 MiB of zero bytes, no newline
    cfg = OmegaConf.create({"source": "path", "path": str(path), "limit": None, "difficulty": None, "length": None,
                            "domain": None, "cot": False, "max_len": None, "cot_tokens": 1, "answer_tokens": 1})
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as err:
            load_longbench(cfg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"{path} line 2: longer than 1 MiB" in one_line_error(err)
    assert peak < 8 << 20, peak


def test_the_bound_is_exact_and_long_lines_under_it_are_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(tasks.base, "READ_CHUNK", 7)  # many pieces per line
    record = json.dumps({"k": "v" * 40})  # 51 bytes
    path = tmp_path / "f.jsonl"
    path.write_text(record + "\n" + record)  # the last line without its newline
    assert [r for _, r in iter_jsonl(path, max_line_bytes=len(record))] == [{"k": "v" * 40}] * 2
    path.write_text(record + "\n" + record + " \n")
    with pytest.raises(ValueError, match=rf"line 2: longer than {len(record)} bytes"):
        list(iter_jsonl(path, max_line_bytes=len(record)))


def test_samples_jsonl_is_read_with_the_same_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(tasks.base, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"item_id": "a", "sample_idx": 0, "completion": "x" * 2000}) + "\n")
    with pytest.raises(ValueError) as err:
        read_rows(path)
    assert f"samples.jsonl: {path} line 1: longer than 1000 bytes" in one_line_error(err)


def test_a_replayed_file_is_read_with_the_same_bound(tmp_path, monkeypatch):
    from evals.execute.backends.replay import read_completions

    monkeypatch.setattr(tasks.base, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"item_id": "a", "completion": "ok"}) + "\n"
                    + json.dumps({"item_id": "b", "completion": "x" * 2000}) + "\n")
    with pytest.raises(ValueError) as err:
        read_completions(path)
    assert f"backend.path: {path} line 2: longer than 1000 bytes" in one_line_error(err)


# --- what a run resumes -------------------------------------------------------------------------------------------

def test_rows_without_meta_json_are_never_resumed(tmp_path):
    """R2: run B resumed run A's rows (no meta.json beside them) and reported A's score."""
    a = run(compose_cfg(replay_args(tmp_path, ("a1", "a2"), "a.jsonl")), tmp_path / "a")
    b = tmp_path / "b"
    b.mkdir()
    (b / "samples.jsonl").write_bytes((a / "samples.jsonl").read_bytes())
    with pytest.raises(ValueError) as err:
        run(compose_cfg(replay_args(tmp_path, ("b1", "b2"), "b.jsonl")), b)
    assert f"{b / 'samples.jsonl'} has no meta.json beside it" in one_line_error(err)
    assert "overwrite=true" in str(err.value)
    out = run(compose_cfg([*replay_args(tmp_path, ("b1", "b2"), "b.jsonl"), "overwrite=true"]), b)
    assert sorted(r["completion"] for r in read_rows(out / "samples.jsonl")) == ["b1", "b2"]


def test_every_resumed_row_carries_this_runs_fingerprint(tmp_path):
    """R2: a row of another configuration among a run's rows (meta.json is this run's) was resumed as its own."""
    args = replay_args(tmp_path)
    out = run(compose_cfg(args), tmp_path / "run")
    first, _ = (out / "samples.jsonl").read_text().splitlines()
    foreign = {**json.loads(first), "fingerprint": "0123456789abcdef"}
    (out / "samples.jsonl").write_text(json.dumps(foreign) + "\n")  # one row lost, the other foreign: a resume
    with pytest.raises(ValueError) as err:
        run(compose_cfg(args), out)
    text = one_line_error(err)
    assert f"{out / 'samples.jsonl'} line 1: a row of another configuration" in text and "0123456789abcdef" in text


@pytest.mark.parametrize("content", [b"{", b"[1, 2]", b"\xff\xfe"])
def test_a_corrupt_meta_json_is_one_line_naming_it(tmp_path, content):
    """R6: a damaged meta.json beside rows gave json's 'Expecting ...' naming no file."""
    out = run(compose_cfg(replay_args(tmp_path)), tmp_path / "run")
    (out / "meta.json").write_bytes(content)
    with pytest.raises(ValueError) as err:
        run(compose_cfg(replay_args(tmp_path)), out)
    assert f"{out / 'meta.json'} is not a JSON object" in one_line_error(err)


def test_a_meta_json_that_is_not_an_object_with_no_rows_beside_it_is_replaced(tmp_path):
    """R6: ``meta.json`` holding ``[1]`` (no rows to resume) ended in ``AttributeError: 'list' object ...``."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "meta.json").write_text("[1]")
    out = run(compose_cfg(replay_args(tmp_path)), run_dir)
    assert json.loads((out / "meta.json").read_text())["status"] == "complete"


def test_overwrite_takes_the_old_headline_away_before_anything_else(tmp_path, monkeypatch):
    """R3: ``overwrite=true`` kept ``results.json``; a re-run killed early left the old scores beside no rows."""
    import evals.execute.loop

    args = replay_args(tmp_path)
    out = run(compose_cfg(args), tmp_path / "run")
    assert (out / "results.json").is_file()

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(evals.execute.loop, "_generate_and_score", killed)
    with pytest.raises(KeyboardInterrupt):
        run(compose_cfg([*args, "overwrite=true"]), out)
    assert not (out / "results.json").exists() and not (out / "summary.csv").exists()


def test_a_no_op_rerun_leaves_the_hydra_record_alone(tmp_path):
    """R9: re-running a complete run rewrote ``.hydra/`` although nothing was done."""
    run_dir = tmp_path / "run"
    args = [*replay_args(tmp_path), f"hydra.run.dir={run_dir}"]
    first = cli(args)
    assert first.returncode == 0, first.stderr
    files = sorted((run_dir / ".hydra").glob("*.yaml"))
    assert len(files) == 3
    before = {f.name: (f.stat().st_ino, f.stat().st_mtime_ns, f.read_bytes()) for f in files}
    second = cli([*args, "log_every=5"])  # outside the identity: the same, complete run
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stderr + second.stdout
    assert {f.name: (f.stat().st_ino, f.stat().st_mtime_ns, f.read_bytes()) for f in files} == before


# --- LongBench-v2 items -------------------------------------------------------------------------------------------

def _longbench_cfg(path: Path):
    return OmegaConf.create({"source": "path", "path": str(path), "limit": None, "difficulty": None, "length": None,
                             "domain": None, "cot": False, "max_len": None, "cot_tokens": 1, "answer_tokens": 1})


def _longbench_records() -> list[dict]:
    text = bundled_path("longbench_v2/sample.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()][:3]


def test_longbench_refuses_two_questions_under_one_id(tmp_path):
    """R1: rows of two questions collided under one ``_id``; AIME and LiveCodeBench refuse duplicates."""
    records = _longbench_records()
    records[2] = {**records[2], "_id": records[0]["_id"]}
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError) as err:
        load_longbench(_longbench_cfg(path))
    text = one_line_error(err)
    assert f"{path} record 3: field '_id': duplicate id {records[0]['_id']!r} (first at record 1)" in text


@pytest.mark.parametrize("field", ["question", "choice_C", "context"])
def test_longbench_refuses_a_lone_surrogate_naming_the_field(tmp_path, field):
    """R5: a lone surrogate in a field crashed late (at the prompt or the row) and named no field."""
    records = _longbench_records()
    line = json.dumps(records[1])  # ASCII-escaped: a surrogate is written "\ud800"
    line = line.replace(f'"{field}": "', f'"{field}": "ok \\ud800 ', 1)
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(records[0]) + "\n" + line + "\n")
    with pytest.raises(ValueError) as err:
        load_longbench(_longbench_cfg(path))
    text = one_line_error(err)
    assert f"{path} line 2: field '{field}' holds a lone surrogate (U+D800 at character 3)" in text


def test_a_surrogate_pair_written_as_two_escapes_is_text(tmp_path):
    records = _longbench_records()
    line = json.dumps(records[0]).replace('"question": "', '"question": "\\ud83d\\ude00 ', 1)
    path = tmp_path / "items.jsonl"
    path.write_text(line + "\n")
    (item,) = load_longbench(_longbench_cfg(path))
    assert item.question.startswith("\U0001f600 ")


def test_the_writer_bounds_lines_as_the_reader_does():
    with RowWriter(Path(os.devnull)) as writer:
        assert writer.max_line_bytes == tasks.base.MAX_LINE_BYTES >= 64 << 20
