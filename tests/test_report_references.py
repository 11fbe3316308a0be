"""Published references beside full-cache runs (evals/report/references.py + references.yaml)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from evals.report.references import load_references, published_stderr, reference_rows, reference_table


def summary(rows):
    base = {"method": "none", "stderr": 2.0, "unit": "percent", "run": "r"}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_every_reference_has_a_source_and_the_issue_figures():
    refs = load_references()
    assert refs["source"].str.len().min() > 10
    got = {(r.model, r.task, r.metric, r.group, r.value) for r in refs.itertuples()}
    for fig in [("llama31_8b_instruct", "longbench_v2", "accuracy", "all", 30.0),
                ("llama31_8b_instruct", "longbench_v2", "accuracy", "difficulty=easy", 30.7),
                ("llama31_8b_instruct", "longbench_v2", "accuracy", "length=long", 25.9),
                ("r1_distill_llama_8b", "aime24", "pass@1", "all", 50.4),
                ("r1_distill_llama_8b", "aime24", "cons@64", "all", 80.0),
                ("r1_distill_llama_8b", "aime24", "pass@1", "all", 43.9),
                ("r1_distill_llama_8b", "livecodebench", "pass@1", "all", 39.6),
                ("r1_distill_llama_8b", "livecodebench", "pass@1", "all", 37.4)]:
        assert fig in got, fig


def test_published_stderr_is_the_binomial_bound():
    assert published_stderr(50.0, 30) == pytest.approx(100 * math.sqrt(0.25 / 30))  # ~9.1 points: AIME's ±9
    assert published_stderr(0.0, 30) == 0.0


def test_rows_match_none_runs_only_and_flag_outside_values():
    s = summary([
        {"model": "r1_distill_llama_8b", "task": "aime24", "metric": "pass@1", "group": "all", "value": 48.0, "n": 30},
        {"model": "r1_distill_llama_8b", "task": "aime24", "metric": "pass@1", "group": "all", "value": 10.0, "n": 30,
         "method": "snapstream"},  # a compressed run: never compared
        {"model": "llama31_8b_instruct", "task": "longbench_v2", "metric": "accuracy", "group": "all", "value": 45.0,
         "n": 503},
        {"model": "llama31_8b_instruct", "task": "longbench_v2", "metric": "accuracy", "group": "length=long",
         "value": 25.0, "n": 20},
        {"model": "tiny_llama", "task": "aime24", "metric": "pass@1", "group": "all", "value": 0.0, "n": 3},
    ])
    rows = reference_rows(s)
    aime = rows[rows.task == "aime24"].set_index("reference")
    assert set(aime.index) == {50.4, 43.9}  # both published pass@1 figures, only the none run
    assert not aime.loc[50.4, "outside"] and not aime.loc[43.9, "outside"]  # within ±9-point noise
    assert aime.loc[50.4, "delta"] == pytest.approx(48.0 - 50.4)
    lb = rows[(rows.task == "longbench_v2") & (rows.group == "all")].iloc[0]
    assert lb["outside"]  # 45 vs 30.0 ± 2.0 (n=503) with our ± 2.0: z ≈ 5.3
    assert lb["ref_ci_lo"] < 30.0 < lb["ref_ci_hi"]
    long = rows[rows.group == "length=long"].iloc[0]
    assert long["subset"] and not long["outside"]
    assert "tiny_llama" not in set(rows.model)
    table = reference_table(s)
    assert table["check"].str.contains("OUTSIDE").sum() == 1 and table["source"].str.len().min() > 0


def test_nothing_to_compare_gives_an_empty_frame():
    assert reference_rows(pd.DataFrame()).empty
    assert reference_rows(summary([{"model": "smollm2_135m", "task": "aime24", "metric": "pass@1", "group": "all",
                                    "value": 1.0, "n": 30}])).empty


def test_a_malformed_reference_file_is_refused(tmp_path):
    bad = tmp_path / "refs.yaml"
    bad.write_text("references:\n  - {model: m, task: t, metric: x, group: all, value: 130, n_items: 3, "
                   "samples: 1, source: s}\n")
    with pytest.raises(ValueError, match="entry 0"):
        load_references(bad)


def test_report_sections_show_the_references(tmp_path):
    """A full-cache run of a paper model: the report's first table is the references table."""
    from evals.report.render import _sections

    run = tmp_path / "run1"
    run.mkdir()
    pd.DataFrame([{"model": "llama31_8b_instruct", "task": "longbench_v2", "method": "none",
                   "prompt_budget": float("nan"), "recent": float("nan"), "metric": "accuracy", "group": "all",
                   "value": 31.0, "n": 503, "stderr": 2.0, "ci_lo": 27.0, "ci_hi": 35.0, "unit": "percent",
                   "run_id": "x", "fingerprint": "f"}]).to_csv(run / "summary.csv", index=False)
    _summary, _head, tables, _deltas = _sections(tmp_path)
    title, table = tables[0]
    assert title.startswith("Published references")
    assert table.iloc[0]["published"].startswith("30.0 ± 2.0")
    assert "LongBench-v2 leaderboard" in table.iloc[0]["source"]
