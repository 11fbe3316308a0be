"""From a replayed run through ``evals.analysis.summary`` to ``evals.report``, with no hand-built summary: the published
references appear beside our value when the protocol matches, and are listed as not comparable when it does not."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from evals.report import write_report
from evals.run import run
from tests.runner_utils import ROOT, compose_cfg

AIME = ROOT / "tasks" / "data" / "aime24" / "aime24_sample.jsonl"
LONGBENCH = ROOT / "tasks" / "data" / "longbench_v2" / "sample.jsonl"


def _replay(root: Path, name: str, records: list[dict], *overrides: str) -> Path:
    path = root / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = compose_cfg(["backend=replay", f"backend.path={path}", f"out_root={root}/runs", *overrides])
    return run(cfg)


def _reference_lines(report: str, needle: str) -> list[str]:
    return [line for line in report.splitlines() if needle in line and line.startswith("|")]


def test_a_replayed_r1_aime_run_shows_the_card_figure_beside_its_pass_at_1(tmp_path):
    """R1 replayed on the 8 real AIME 2024 problems bundled, 2 samples each, one right: pass@1 50.0, beside the R1
    card's 50.4 in report.md and report.html (a subset of its 30 problems, within its interval)."""
    problems = [json.loads(line) for line in AIME.read_text().splitlines()]
    records = [{"item_id": str(p["id"]), "sample_idx": s,
                "completion": f"<think>work</think> The answer is \\boxed{{{p['answer'] if s == 0 else 1}}}."}
               for p in problems for s in range(2)]
    run_dir = _replay(tmp_path, "r1", records, "task=aime24", "model=r1_distill_llama_8b", "task.source=bundled",
                      "gen.n_samples=2")
    summary = pd.read_csv(run_dir / "summary.csv")
    ours = summary[(summary.metric == "pass@1") & (summary.group == "all")].iloc[0]
    assert (ours["value"], ours["unit"], ours["n"]) == (50.0, "%", 8)
    report, _head = write_report(tmp_path / "runs")
    md = report.read_text()
    [card] = [line for line in _reference_lines(md, "50.4 [") if "DeepSeek-R1 model card" in line]
    assert "| 50.0 ±" in card and "within; subset: 8 of 30 items" in card
    assert "samples 2 (64)" in card and "template =" in card and "temperature =" in card
    page = (tmp_path / "runs" / "report.html").read_text()
    assert "50.4 [" in page and "DeepSeek-R1 model card" in page and "subset: 8 of 30 items" in page


def test_a_cot_longbench_run_is_never_compared_with_the_no_cot_figure(tmp_path):
    items = [json.loads(line) for line in LONGBENCH.read_text().splitlines()]
    records = [{"item_id": it["_id"], "sample_idx": 0, "completion": f"The correct answer is ({it['answer']})"}
               for it in items]
    _replay(tmp_path, "lb", records, "task=longbench_v2", "model=llama31_8b_instruct", "task.source=bundled",
            "task.cot=true")
    report, _head = write_report(tmp_path / "runs")
    md = report.read_text()
    [no_cot] = _reference_lines(md, "30.0 [")
    assert "NOT COMPARABLE: task.cot: ours true, published false" in no_cot
    [cot] = _reference_lines(md, "30.4 [")
    assert "| 100.0" in cot and "OUTSIDE" in cot  # every answer right: far above 30.4, and compared
    for line in _reference_lines(md, "(w/o CoT)"):
        assert "NOT COMPARABLE" in line
