"""``backend=replay`` through the runner on each benchmark's bundled items: right answers score 100%, wrong 0%."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evals.report import write_report
from evals.run import run
from tasks import get_task
from tests.runner_utils import ROOT, compose_cfg

LCB_REPLAY = ROOT / "tests" / "data" / "livecodebench_replay.jsonl"


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def replay(tmp_path: Path, name: str, records: list[dict], *extra: str) -> pd.DataFrame:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_jsonl(tmp_path / f"{name}.jsonl", records)
    cfg = compose_cfg([f"task={name}", "backend=replay", f"backend.path={path}", f"out_root={tmp_path}/{name}", *extra])
    out = run(cfg)
    return pd.read_csv(out / "summary.csv").set_index(["metric", "group"])["value"]


def bundled(name: str, *extra: str):
    cfg = compose_cfg([f"task={name}", *extra])
    return get_task(name).load(cfg.task)


def test_longbench_v2_right_letter_100_wrong_letter_0(tmp_path):
    items = bundled("longbench_v2")
    right = [{"item_id": i.item_id, "completion": f"The correct answer is ({i.answer})"} for i in items]
    wrong_letter = {"A": "B", "B": "C", "C": "D", "D": "A"}
    wrong = [{"item_id": i.item_id, "completion": f"The correct answer is ({wrong_letter[i.answer]})"} for i in items]
    good = replay(tmp_path / "r", "longbench_v2", right)
    bad = replay(tmp_path / "w", "longbench_v2", wrong)
    acc_good = good.xs("accuracy", level="metric")
    assert len(acc_good) >= 6 and (acc_good == 100).all()  # every group: all, easy/hard, short/medium/long, domains
    assert (bad.xs("accuracy", level="metric") == 0).all()
    report, _ = write_report(tmp_path)
    assert "longbench_v2: accuracy" in report.read_text()  # the breakdown table


@pytest.mark.parametrize("model", ["smollm2_135m", "r1_distill_llama_8b"])
def test_aime24_boxed_answer_100_answer_plus_one_0(tmp_path, model):
    items = bundled("aime24", "task.source=bundled")
    think = "<think>\nLet me try \\boxed{0}.\n</think>\n" if model == "r1_distill_llama_8b" else ""
    right = [{"item_id": i.item_id, "completion": f"{think}So the answer is $\\boxed{{{i.answer}}}$."} for i in items]
    wrong = [{"item_id": i.item_id, "completion": f"{think}\\boxed{{{int(i.answer) + 1}}}"} for i in items]
    extra = (f"model={model}", "task.source=bundled")
    assert replay(tmp_path / "r", "aime24", right, *extra)[("pass@1", "all")] == 100.0  # summary.csv: percent
    assert replay(tmp_path / "w", "aime24", wrong, *extra)[("pass@1", "all")] == 0.0


@pytest.mark.parametrize("protocol, expected", [("lighteval", 100.0), ("boxed", 0.0)])  # percent
def test_aime24_unclosed_thinking_by_protocol(tmp_path, protocol, expected):
    """lighteval (default) grades a completion whose thinking never closed as it stands; ``boxed`` gives it nothing.
    Either way the rows say the thinking never closed, and record the protocol."""
    items = bundled("aime24", "task.source=bundled")
    cut = [{"item_id": i.item_id, "completion": f"<think>\nmaybe \\boxed{{{i.answer}}} but let me check"}
           for i in items]
    value = replay(tmp_path, "aime24", cut, "model=r1_distill_llama_8b", "task.source=bundled",
                   f"task.protocol={protocol}")
    assert value[("pass@1", "all")] == expected
    assert value[("share_think_unclosed", "all")] == 100.0
    rows = pd.read_csv(next(tmp_path.rglob("samples.csv")))
    assert not rows["thinking_closed"].any()
    assert set(rows["protocol"]) == {protocol}


def test_longbench_v2_empty_outputs_stay_in_the_denominator(tmp_path):
    """strict (default): 2 empty outputs of 8 count wrong over n=8; drop_empty (the old behaviour, by name only)
    leaves them out: 100% over n=6."""
    items = bundled("longbench_v2")
    records = [{"item_id": i.item_id, "completion": "" if k < 2 else f"The correct answer is ({i.answer})"}
               for k, i in enumerate(items)]
    strict = replay(tmp_path / "s", "longbench_v2", records)
    dropped = replay(tmp_path / "o", "longbench_v2", records, "task.protocol=drop_empty")
    n = len(items)
    assert strict[("accuracy", "all")] == pytest.approx(100 * (n - 2) / n) and strict[("skipped", "all")] == 0
    assert dropped[("accuracy", "all")] == 100.0 and dropped[("skipped", "all")] == pytest.approx(100 * 2 / n)
    counts = pd.read_csv(next((tmp_path / "o").rglob("summary.csv"))).set_index(["metric", "group"])["n"]
    assert counts[("accuracy", "all")] == n - 2 and counts[("skipped", "all")] == n


@pytest.mark.parametrize("protocol, expected_right", [("strict", 2), ("raw", 4)])
def test_longbench_v2_r1_unfinished_thinking_counts_and_is_reported(tmp_path, protocol, expected_right):
    """R1 replay: 2 finished answers right, 2 unfinished thinking blocks holding the right letter, 4 unfinished with
    none. Every item stays in the denominator; strict counts the unfinished ones wrong, raw (pred.py on the whole
    text) reads the letter inside the thinking; summary.csv carries the share of unfinished thinking (6 of 8)."""
    items = bundled("longbench_v2")
    records = []
    for k, i in enumerate(items):
        if k < 2:
            text = f"<think>\nreading\n</think>\n\nThe correct answer is ({i.answer})"
        elif k < 4:
            text = f"<think>\nThe correct answer is ({i.answer}), unless the"
        else:
            text = "<think>\nStill reading the"
        records.append({"item_id": i.item_id, "completion": text})
    value = replay(tmp_path, "longbench_v2", records, "model=r1_distill_llama_8b", "task.source=bundled",
                   f"task.protocol={protocol}")
    n = len(items)
    assert value[("accuracy", "all")] == pytest.approx(100 * expected_right / n)
    assert value[("share_think_unclosed", "all")] == pytest.approx(100 * (n - 2) / n)
    counts = pd.read_csv(next(tmp_path.rglob("summary.csv"))).set_index(["metric", "group"])["n"]
    assert counts[("accuracy", "all")] == n


def test_livecodebench_reference_solutions_pass_at_1_is_100(tmp_path):
    records = [json.loads(line) for line in LCB_REPLAY.read_text().splitlines()]
    value = replay(tmp_path, "livecodebench", records, "gen.n_samples=2")
    assert value[("pass@1", "all")] == 100.0  # summary.csv: percent
    rows = pd.read_csv(next(tmp_path.rglob("samples.csv")))
    assert set(rows["outcome"]) == {"passed"} and len(rows) == len(records)
