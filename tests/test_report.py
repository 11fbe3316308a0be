"""evals.report on summaries of runs whose knobs differ in some columns and are missing (NaN) in others."""

from __future__ import annotations

import pandas as pd

from evals.report import breakdown_tables, main, write_report

KNOBS = {"window": 32, "pooling": "max", "gqa_agg": "mean", "positions": "original"}
RUNS = [  # run_id, method, prompt_budget, recent, kernel, sinks, accuracy (all), accuracy (depth=middle)
    ("r_none", "none", None, None, None, None, 100.0, 90.0),
    ("r_k7", "snapkv", 256, None, 7, 0, 0.0, 10.0),
    ("r_k15", "snapkv", 256, None, 15, 0, 50.0, 60.0),
    ("r_stream", "streaming_llm", 256, 252, None, 4, 25.0, 20.0),
]


def _summary(run) -> pd.DataFrame:
    run_id, method, budget, recent, kernel, sinks, acc_all, acc_mid = run
    knobs = KNOBS if method != "none" and method != "streaming_llm" else {}
    base = {"model": "m", "task": "needle", "method": method, "prompt_budget": budget, "recent": recent,
            "kernel": kernel, "sinks": sinks, "run_id": run_id, "n": 10, "metric": "accuracy",
            **{k: knobs.get(k) for k in KNOBS}}
    return pd.DataFrame([{**base, "group": "all", "value": acc_all}, {**base, "group": "depth=middle", "value": acc_mid}])


def test_breakdown_has_one_row_per_run_and_tells_variants_apart():
    summary = pd.concat([_summary(r) for r in RUNS], ignore_index=True)
    [(title, table)] = breakdown_tables(summary)
    assert title == "needle: accuracy"
    assert len(table) == len(RUNS)  # no rows for knob combinations that no run has
    assert list(table.columns[-2:]) == ["all", "depth=middle"]
    assert "kernel" in table.columns  # the one knob that tells the two snapkv runs apart
    by_kernel = table[table["method"] == "snapkv"].set_index("kernel")
    assert by_kernel.loc[7, "all"] == 0.0 and by_kernel.loc[15, "all"] == 50.0
    none = table[table["method"] == "none"].iloc[0]
    assert pd.isna(none["prompt_budget"]) and none["depth=middle"] == 90.0


def test_report_writes_files_and_prints_headline(tmp_path, capsys):
    for run in RUNS:
        run_dir = tmp_path / run[0]
        run_dir.mkdir()
        _summary(run).to_csv(run_dir / "summary.csv", index=False)
    report, head = write_report(tmp_path)
    assert len(head) == len(RUNS) and set(head["value"]) == {100.0, 0.0, 50.0, 25.0}
    text = report.read_text()
    assert "## needle: accuracy" in text and "![needle__m](plots/needle__m.png)" in text
    assert (tmp_path / "plots" / "needle__m.png").stat().st_size > 0
    assert len(pd.read_csv(tmp_path / "summary_all.csv")) == 2 * len(RUNS)
    assert main([str(tmp_path)]) == 0
    assert f"report: {report}" in capsys.readouterr().out


def test_report_of_an_empty_folder_is_one_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no summary.csv" in capsys.readouterr().err
