"""Hostile files and knobs (issue #14): deep or broken JSON, zlib bombs, torn and foreign ``samples.jsonl`` rows,
poisoned replay lines and impossible knobs each get one ``ValueError`` naming the file, line and field (never a
traceback of another kind), and a failed run never deletes a folder it did not create."""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import re
import time
import zlib
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import tasks.livecodebench as lcb
from evals.execute.backends.replay import read_completions
from evals.rows import done_keys, read_rows
from evals.rundir import remove_if_empty
from snapstream_core.generate import SamplingConfig
from tasks.base import iter_jsonl, read_records
from tasks.livecodebench.grader import GradeSettings
from tasks.livecodebench.problem import MAX_TESTS, parse_problem
from tests.runner_utils import compose_cfg

DEEP = "[" * 100_000 + "]" * 100_000


def bundled_rows() -> list[dict]:
    path = Path(lcb.__file__).resolve().parents[1] / "data" / "livecodebench" / "sample.jsonl"
    return [r for _, r in iter_jsonl(path)]


# ------------------------------------------------------------------------------------------------ task files


def test_a_100k_deep_line_names_file_and_line(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"a": 1}\n{"x": ' + DEEP + "}\n")
    with pytest.raises(ValueError, match=r"task.path: .*deep.jsonl line 2: JSON nested deeper than 64"):
        list(iter_jsonl(path))
    path = tmp_path / "deep.json"
    path.write_text(DEEP)
    with pytest.raises(ValueError, match="deep.json: JSON nested deeper"):
        read_records(path)


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl line 2: invalid UTF-8 at byte 10 of the line"):
        list(iter_jsonl(path))
    path = tmp_path / "bad.json"
    path.write_bytes(b'[\n{"a": 1},\n{"a": "\xff"}]')
    with pytest.raises(ValueError, match=r"bad.json line 3: invalid UTF-8"):
        read_records(path)


@pytest.mark.parametrize("field, value, message", [
    ("public_test_cases", DEEP, "field 'public_test_cases': JSON nested deeper"),
    ("metadata", '{"func_name": ' + DEEP + "}", "field 'metadata': JSON nested deeper"),
    ("question_id", None, "field 'question_id' must be a string or an integer, got None"),
    ("public_test_cases", json.dumps([{"input": "", "output": ""}] * (MAX_TESTS + 1)),
     f"more than {MAX_TESTS} JSON objects"),
])
def test_hostile_problem_fields_are_one_line_errors(field, value, message):
    """An unusable id stops the load; tests or metadata that cannot be parsed make the problem one named item
    whose ``data_error`` is that one line."""
    record = dict(bundled_rows()[0], **{field: value})
    if field == "question_id":
        with pytest.raises(ValueError, match=f"f.jsonl line 7: .*{message}"):
            parse_problem(record, "f.jsonl line 7")
        return
    assert re.match(f"f.jsonl line 7: .*{message}", unparsed_tests_reason(record, "f.jsonl line 7"))


def unparsed_tests_reason(record: dict, where: str) -> str:
    """The one-line reason why the tests of ``record`` cannot be parsed (the problem itself parses, testless)."""
    problem = parse_problem(record, where)
    assert problem.data_error and problem.tests == () and "\n" not in problem.data_error
    return problem.data_error


def test_a_zlib_bomb_stops_at_the_per_problem_limit():
    """288 MiB of zeros compressed ~1,000-fold: refused at the 256 MiB per-problem limit, before any unpickling."""
    comp = zlib.compressobj(1)
    chunk = b"\0" * (1 << 24)
    raw = b"".join(comp.compress(chunk) for _ in range(18)) + comp.flush()
    record = dict(bundled_rows()[0], private_test_cases=base64.b64encode(raw).decode())
    assert "decompresses past the per-problem limit of 256 MiB" in unparsed_tests_reason(record, "bomb.jsonl line 1")


def test_a_many_tests_bomb_is_refused_by_count():
    tests = json.dumps([{"input": "", "output": "", "testtype": "stdin"}] * 100_000)
    packed = base64.b64encode(zlib.compress(pickle.dumps(tests))).decode()  # ~2.5 MB of JSON in ~10 KB
    record = dict(bundled_rows()[0], private_test_cases=packed)
    reason = unparsed_tests_reason(record, "many.jsonl line 1")
    assert f"field 'private_test_cases': more than {MAX_TESTS} JSON objects" in reason


# ------------------------------------------------------------------------------------------------ samples.jsonl


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


# ------------------------------------------------------------------------------------------------ replay files


@pytest.mark.parametrize("bad, message", [
    ({"sample_idx": 1.9}, "sample_idx must be an integer >= 0"),
    ({"sample_idx": True}, "sample_idx must be an integer >= 0"),
    ({"item_id": None}, "item_id must be a non-empty string or an integer"),
    ({"latency_s": {}}, "column latency_s must be a number or null"),
    ({"gen_tokens": "12"}, "column gen_tokens must be a number or null"),
    ({"finish_reason": 3}, "finish_reason must be a string or null"),
    ({"completion": DEEP}, None),  # a string: fine, it is the model's text
])
def test_replay_lines_are_type_checked(tmp_path, bad, message):
    rec = {"item_id": "q1", "sample_idx": 0, "completion": "x", **bad}
    path = tmp_path / "replay.jsonl"
    path.write_text(json.dumps({"item_id": "q0", "completion": "y"}) + "\n" + json.dumps(rec) + "\n")
    if message is None:
        assert len(read_completions(path)) == 2
        return
    with pytest.raises(ValueError, match=f"backend.path: .*replay.jsonl line 2: {message}"):
        read_completions(path)


def test_a_deep_replay_line_is_one_line_error(tmp_path):
    path = tmp_path / "replay.jsonl"
    path.write_text('{"item_id": "q", "completion": "x", "meta": ' + DEEP + "}\n")
    with pytest.raises(ValueError, match="backend.path: .*line 1: JSON nested deeper"):
        read_completions(path)


# ------------------------------------------------------------------------------------------------ run folders


def test_a_folder_of_user_logs_survives_a_failed_run(tmp_path):
    """On main ``hydra.run.dir`` pointing at a folder of ``*.log`` files deleted them all when the run failed."""
    folder = tmp_path / "mylogs"
    folder.mkdir()
    old = time.time() - 3600
    for name, text in [("run.log", "[2020-01-01 10:00:00,000][x][INFO] - an old run\n"), ("notes.log", "mine\n")]:
        (folder / name).write_text(text)
        os.utime(folder / name, (old, old))
    with (folder / "run.log").open("a") as fh:  # Hydra appends this run's records to an existing job log
        fh.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')},000][evals][ERROR] - failed\n")
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text("a: 1\n")
    remove_if_empty(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.log", "run.log"]  # this run's .hydra/ is gone


def test_a_folder_this_run_made_is_removed_when_it_failed(tmp_path):
    folder = tmp_path / "fresh"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("[]\n")
    (folder / "run.log").write_text(f"[{time.strftime('%Y-%m-%d %H:%M:%S')},000][evals][ERROR] - failed\n")
    remove_if_empty(folder)
    assert not folder.exists()


# ------------------------------------------------------------------------------------------------ knobs


@pytest.mark.parametrize("knob", ["temperature", "top_p"])
def test_nan_and_inf_generation_knobs_are_refused(knob):
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"gen.{knob}: must be finite"):
            SamplingConfig(**{knob: value})


@pytest.mark.parametrize("knob, value, message", [
    ("timeout_s", float("inf"), "task.timeout_s: expected a finite number"),
    ("timeout_s", float("nan"), "task.timeout_s: expected a finite number"),
    ("max_output_mb", 10_000_000, r"task.max_output_mb: must be a finite number in \[1, 1024\]"),
    ("memory_mb", 2048.5, "task.memory_mb: expected a finite integer"),
    ("python", "/usr", "task.python: not an executable file"),
])
def test_impossible_grading_knobs_are_refused(knob, value, message):
    with pytest.raises(ValueError, match=message):
        GradeSettings.from_cfg(OmegaConf.create({knob: value}))


def test_max_new_tokens_past_the_model_positions_warns(caplog):
    from evals.execute.backends.base import Request
    from evals.execute.backends.hf import HFBackend
    from snapstream_core import compression_from_config
    from tasks.base import Prompt

    cfg = compose_cfg(["model=tiny_llama", "model.arch.max_position_embeddings=24"])
    backend = HFBackend(cfg.model, compression_from_config({"method": "none"}), SamplingConfig(max_new_tokens=16))
    with caplog.at_level(logging.WARNING, logger="evals.execute.backends.hf"):
        backend.generate([Request(None, Prompt("hello there, a prompt of about a dozen tokens"), (0,))])
    assert "goes past the 24 positions tiny_llama was trained for" in caplog.text


def test_a_refused_run_leaves_no_empty_folders_up_to_out_root(tmp_path):
    """A refused run removed its own folder but left ``<model>/<task>/<method>/`` empty under out_root."""
    out_root = tmp_path / "results"
    (out_root / "kept").mkdir(parents=True)
    (out_root / "m" / "other" / "x").mkdir(parents=True)
    folder = out_root / "m" / "task" / "method" / "gen"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("[]\n")
    remove_if_empty(folder, up_to=out_root)
    assert sorted(str(p.relative_to(out_root)) for p in out_root.rglob("*")) == ["kept", "m", "m/other", "m/other/x"]
