
"""Replayed completions (``backend=replay``): each line of the file is type-checked and bounded, a lone surrogate
is repaired in its own row, and ids that match no item or rows of another model are refused in one line."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import tasks.base
from evals.execute.backends.replay import read_completions
from evals.record.rows import read_rows
from evals.run import run
from tests.refusals import DEEP, one_line_error
from tests.runner_utils import compose_cfg
from tests.small_runs import NEEDLE


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


def test_a_replayed_file_is_read_with_the_same_bound(tmp_path, monkeypatch):
    from evals.execute.backends.replay import read_completions

    monkeypatch.setattr(tasks.base, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"item_id": "a", "completion": "ok"}) + "\n"
                    + json.dumps({"item_id": "b", "completion": "x" * 2000}) + "\n")
    with pytest.raises(ValueError) as err:
        read_completions(path)
    assert f"backend.path: {path} line 2: longer than 1000 bytes" in one_line_error(err)


def test_a_lone_surrogate_in_a_replayed_completion_is_repaired_for_that_row(tmp_path):
    """``"\\ud800"`` (which UTF-8 cannot hold) is repaired in its own row; the run and its resume go on."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"item_id": "needle-0-0", "completion": "a\\ud800b"}\n'
                    '{"item_id": "needle-0-1", "completion": "\\ud83d\\ude00 fine"}\n')
    args = [*NEEDLE, "backend=replay", f"backend.path={path}"]
    out = run(compose_cfg(args), tmp_path / "run")
    rows = {r["item_id"]: r for r in read_rows(out / "samples.jsonl")}
    assert rows["needle-0-0"]["completion"] == "a\ufffdb" and rows["needle-0-1"]["completion"] == "\U0001f600 fine"
    again = run(compose_cfg(args), tmp_path / "run")  # resumes: nothing to redo
    assert len(read_rows(again / "samples.jsonl")) == 2


def test_replay_ids_that_match_no_item_are_an_error(tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"item_id": "not-an-item", "completion": "x"}) + "\n")
    with pytest.raises(ValueError, match="none of the 1 completions .* matches an item"):
        run(compose_cfg([*NEEDLE, "backend=replay", f"backend.path={other}", f"out_root={tmp_path}/o"]))
    assert not list((tmp_path / "o").rglob("samples.jsonl"))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps({"item_id": i, "completion": "x"}) + "\n"
                             for i in ("needle-0-0", "stray-1", "stray-2")))
    args = [*NEEDLE, "backend=replay", f"backend.path={mixed}", f"out_root={tmp_path}/m"]
    with pytest.raises(ValueError, match="2 item id.* match no item of this run .*stray-1, stray-2.*backend.partial"):
        run(compose_cfg(args))
    out = run(compose_cfg([*args, "backend.partial=true"]))
    assert pd.read_csv(out / "samples.csv")["item_id"].tolist() == ["needle-0-0"]


def test_replay_rows_of_another_model_are_not_filed_under_this_one(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"item_id": "needle-0-0", "completion": "x", "model": "r1_distill_llama_8b"}) + "\n")
    with pytest.raises(ValueError, match="made by r1_distill_llama_8b, not tiny_llama"):
        run(compose_cfg([*NEEDLE, "backend=replay", f"backend.path={rows}", f"out_root={tmp_path}"]))
