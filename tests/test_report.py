"""evals.report on run directories whose knobs differ in some columns and are missing in others: one line and one
cell per run, the paired delta against the full cache, and the files a user opens."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from evals.analysis.power import mde_80
from evals.analysis.stats import paired_bootstrap
from evals.report import breakdown_tables, collect, headline, main, pivots, write_report
from evals.report.paired import item_scores, paired_deltas

KNOBS = {"window": 32, "pooling": "max", "gqa_agg": "mean", "positions": "original"}
RUNS = [  # run, method, prompt_budget, recent, kernel, sinks, per-item correct (4 items), accuracy depth=middle
    ("r_none", "none", None, None, None, None, [1, 1, 1, 1], 90.0),
    ("r_k7", "snapkv", 256, None, 7, 0, [0, 0, 0, 0], 10.0),
    ("r_k15", "snapkv", 256, None, 15, 0, [1, 0, 1, 0], 60.0),
    ("r_stream", "streaming_llm", 256, 252, None, 4, [0, 1, 0, 0], 20.0),
]
ITEMS = ["a", "b", "c", "d"]


def _summary(run, **extra) -> pd.DataFrame:
    run_id, method, budget, recent, kernel, sinks, correct, acc_mid = run
    knobs = KNOBS if method not in ("none", "streaming_llm") else {}
    base = {"model": "m", "task": "needle", "method": method, "prompt_budget": budget, "recent": recent,
            "kernel": kernel, "sinks": sinks, "run_id": run_id, "n": 4, "unit": "%",
            **{k: knobs.get(k) for k in KNOBS}, **extra}
    acc = 100.0 * sum(correct) / 4
    return pd.DataFrame([
        {**base, "metric": "accuracy", "group": "all", "value": acc, "stderr": 5.0, "ci_lo": acc - 10, "ci_hi": acc},
        {**base, "metric": "accuracy", "group": "depth=middle", "value": acc_mid, "stderr": None},
        {**base, "metric": "mean_kv_bytes_peak", "group": "all", "value": 1000.0 * (budget or 2000), "unit": "bytes"},
        {**base, "metric": "mean_kv_tokens_peak", "group": "all", "value": (budget or 2000) + 4.0, "unit": "tokens"},
    ])


def _write(root, run, **extra):
    run_dir = root / run[0]
    run_dir.mkdir(parents=True)
    _summary(run, **extra).to_csv(run_dir / "summary.csv", index=False)
    pd.DataFrame({"item_id": ITEMS, "correct": [bool(c) for c in run[6]]}).to_csv(run_dir / "samples.csv", index=False)
    identity = {"model": "m", "task": "needle", "compression": {"method": run[1], "prompt_budget": run[2]}}
    (run_dir / "meta.json").write_text(json.dumps({"identity": identity, "fingerprint": f"fp-{run[0]}"}))
    return run_dir


def test_breakdown_has_one_row_per_run_and_tells_variants_apart(tmp_path):
    for run in RUNS:
        _write(tmp_path, run)
    [(title, table)] = breakdown_tables(collect(tmp_path))
    assert title.startswith("needle: accuracy (%)")
    assert len(table) == len(RUNS)  # no rows for knob combinations that no run has
    assert list(table.columns[-2:]) == ["all", "depth=middle"]
    assert "kernel" in table.columns  # the one knob that tells the two snapkv runs apart
    by_kernel = table[table["method"] == "snapkv"].set_index("kernel")
    assert by_kernel.loc["7", "all"] == "0.0 [-10.0, 0.0] (n=4)"  # [ ]: the summary's ci_lo, ci_hi; n per group
    assert by_kernel.loc["15", "all"] == "50.0 [40.0, 50.0] (n=4)"
    none = table[table["method"] == "none"].iloc[0]
    assert none["prompt_budget"] == "—" and none["depth=middle"] == "90.0 (n=4)"  # no interval given: value, n
    assert not table.isna().any().any() and "nan" not in table.to_string()


def test_paired_delta_against_the_full_cache_is_the_hand_computed_one(tmp_path):
    for run in RUNS:
        _write(tmp_path, run)
    deltas = paired_deltas(headline(collect(tmp_path))).set_index("run")
    assert set(deltas.index) == {"r_k7", "r_k15", "r_stream"} and set(deltas["reference"]) == {"r_none"}
    # r_k15 against r_none on items a..d: differences 0, -100, 0, -100 -> mean -50, stderr 100/sqrt(3)/2... by hand
    k15 = deltas.loc["r_k15"]
    assert k15["delta"] == -50.0 and k15["n_paired"] == 4
    assert k15["delta_stderr"] == pytest.approx(pd.Series([0, -100, 0, -100]).std() / 2)
    expected = paired_bootstrap([100] * 4, [100, 0, 100, 0], iters=1000, seed=0)
    assert (k15["delta_ci_lo"], k15["delta_ci_hi"], k15["p_value"]) == (expected.ci_lo, expected.ci_hi,
                                                                       expected.p_value)
    # 4 of 4 items lost: 2 of the 16 sign patterns are as extreme; every difference is -100, so a bootstrap interval
    # would have zero width: none is given
    assert deltas.loc["r_k7", ["delta", "p_value"]].tolist() == [-100, 0.125]
    assert deltas.loc["r_k7", ["delta_ci_lo", "delta_ci_hi"]].isna().all()


def test_runs_differing_in_any_knob_are_never_merged_into_one_line_or_cell(tmp_path, monkeypatch):
    monkeypatch.setattr("evals.report.tables.SMALL_N", 4)  # 4 paired items count here: Δ and p are shown
    for run in RUNS:
        _write(tmp_path, run)
    # a second snapkv k=15 run that differs only in a knob the summary does not show (its fingerprint differs)
    twin = ("r_k15_seed1", *RUNS[2][1:6], [0, 0, 1, 1], 60.0)
    _write(tmp_path, twin)
    head = headline(collect(tmp_path))
    assert len(head) == 5 and head["label"].is_unique
    assert {lbl for lbl in head["label"] if "kernel=15" in lbl} == {
        "snapkv (kernel=15) [fp-r_k15]", "snapkv (kernel=15) [fp-r_k15_see]"}
    [(title, table)] = pivots(collect(tmp_path), head, paired_deltas(head))
    assert title == "needle · m: accuracy (%), [95% CI] (n items)"
    assert len(table) == 5 and list(table.columns) == ["method", "full", "256"]
    cells = table.set_index("method")["256"]
    assert cells["snapkv (kernel=15) [fp-r_k15]"].startswith("50.0 [40.0, 50.0] (n=4) (Δ -50.0, p ")
    assert cells["snapkv (kernel=7)"] == "0.0 [-10.0, 0.0] (n=4) (Δ -100.0, p 0.12)"
    assert table.set_index("method").loc["none", "full"] == "100.0 [90.0, 100.0] (n=4)"
    assert not table.isna().any().any()
    monkeypatch.setattr("evals.report.tables.SMALL_N", 20)  # the default: 4 items are too few for Δ and p
    [(_, table)] = pivots(collect(tmp_path), head, paired_deltas(head))
    assert table.set_index("method")["256"]["snapkv (kernel=7)"] == "0.0 [-10.0, 0.0] (n=4) (Δ -100.0, n.m.: 4 items)"
    assert not table.isna().any().any()


def test_report_writes_markdown_html_and_plots_and_prints_headline(tmp_path, capsys):
    for run in RUNS:
        _write(tmp_path, run)
    report, head = write_report(tmp_path)
    assert len(head) == len(RUNS) and set(head["value"]) == {100.0, 0.0, 50.0, 25.0}
    text = report.read_text()
    assert "## needle · m: accuracy (%), \\[95% CI\\] (n items)" in text and "nan" not in text  # [ ] escaped
    assert "**Pipeline check.** 4 of 4 runs have fewer than 20 items: needle (4 runs at n=4)" in text
    titles = {"frontier": "accuracy vs KV memory held", "budget": "accuracy vs each method's budget"}
    for kind in ("frontier", "budget"):
        png = tmp_path / "plots" / f"{kind}__needle__m.png"
        assert png.stat().st_size > 0 and f"![needle · m: {titles[kind]}](plots/{png.name})" in text
    deltas = pd.read_csv(tmp_path / "deltas.csv")
    assert list(deltas.columns[deltas.columns.isin(["value", "reference", "delta", "ci_low", "ci_high", "p_value",
                                                    "n_items"])]) == ["value", "reference", "delta", "ci_low",
                                                                      "ci_high", "p_value", "n_items"]
    k7 = deltas.set_index("budget").query("label == 'snapkv (kernel=7)'").iloc[0]
    assert (k7["value"], k7["reference"], k7["delta"], k7["n_items"], k7["meaningful"]) == (0.0, 100.0, -100.0, 4,
                                                                                           False)
    assert set(deltas["method"]) == {"snapkv", "streaming_llm"}  # one row per compressed run with a reference
    assert np.isnan(k7["mde_80"])  # every item lost: no paired spread to size a test from
    for _, row in deltas.iterrows():  # mde_80: evals.analysis.power.mde_80 of the paired per-item differences
        run, ref = head[head["label"] == row["label"]].iloc[0], head[head["method"] == "none"].iloc[0]
        d = item_scores(run["run_dir"], 100.0) - item_scores(ref["run_dir"], 100.0)
        assert row["mde_80"] == pytest.approx(mde_80(d.to_numpy()), nan_ok=True)
    page = (tmp_path / "report.html").read_text()
    assert page.count("src='data:image/png;base64,") == 2 and "<table" in page and "plots/" not in page
    assert page.count("<table") == page.count("<div class='scroll'><table") and ".scroll{overflow-x:auto" in page
    assert len(pd.read_csv(tmp_path / "summary_all.csv")) == 4 * len(RUNS)
    assert main([str(tmp_path)]) == 0
    assert f"report: {report}" in capsys.readouterr().out


def test_report_of_an_empty_folder_is_one_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no summary.csv" in capsys.readouterr().err


def test_a_ring_that_holds_more_than_the_full_cache_on_short_generations_is_explained(tmp_path):
    from evals.report.footprint import inversion_notes, kv_at_max_new

    runs = []
    for name, knobs, kv_bytes, kv_tokens in (("full", {"method": "none"}, 200 * 1024, 200),
                                             ("ring", {"method": "streaming_llm", "prompt_budget": 1024}, 1028 * 1024,
                                              1028)):
        run_dir = tmp_path / name
        run_dir.mkdir()
        pd.DataFrame({"item_id": ["a", "b"], "prompt_tokens": [100, 100], "kv_tokens_peak": [kv_tokens] * 2,
                      "kv_bytes_peak": [kv_bytes] * 2}).to_csv(run_dir / "samples.csv", index=False)
        (run_dir / "meta.json").write_text(json.dumps({"identity": {"compression": knobs},
                                                       "config": {"gen": {"max_new_tokens": 4000}}}))
        runs.append({"run": name, "run_dir": str(run_dir), "model": "m", "task": "aime24", "method": knobs["method"],
                     "label": knobs["method"], "prompt_budget": knobs.get("prompt_budget"),
                     "mean_kv_bytes_peak": float(kv_bytes), "mean_gen_tokens": 100.0})
    head = pd.DataFrame(runs)
    head["kv_mib_at_max_new"] = kv_at_max_new(head)
    # 1 KiB per entry; at 4000 new tokens the full cache holds 100 + 4000 entries, the ring sinks + recent = 1024
    assert head["kv_mib_at_max_new"].tolist() == pytest.approx([4100 / 1024, 1024 / 1024])
    [note] = inversion_notes(head)
    assert note.startswith("aime24 · m: streaming_llm @ 1024 held 1.00 MiB, more than the full cache's 0.20 MiB")
    assert "at gen.max_new_tokens come to 1.00 MiB (full cache: 4.00 MiB)" in note


def test_the_pipeline_banner_gives_every_small_runs_n():
    """The banner said one n per task (its largest) while runs of that task had several."""
    from evals.report.render import small_n_banner

    head = pd.DataFrame({"task": ["needle", "needle", "needle", "aime24", "lcb"], "n": [6, 6, 2, 2, 400]})
    assert "4 of 5 runs have fewer than 20 items: needle (2 runs at n=6, 1 at n=2), aime24 (1 run at n=2)." \
        in small_n_banner(head)


def test_methods_with_the_same_values_stay_visible_on_top_of_each_other():
    """Four methods at the same points: each later line is drawn above with a smaller hollow marker of another
    shape and dash, so none hides another."""
    from evals.report.plots import _style

    styles = [_style(i) for i in range(4)]
    assert len({s["marker"] for s in styles}) == len({s["linestyle"] for s in styles}) == 4
    sizes = [s["markersize"] for s in styles]
    assert sizes == sorted(set(sizes), reverse=True) and all(s["markerfacecolor"] == "none" for s in styles)
