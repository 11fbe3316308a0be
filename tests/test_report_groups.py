"""The report never pools unlike runs: runs of two task configurations are in separate tables, curves and paired
comparisons, labelled by the settings that differ; a paired Δ and the values beside it are on the same items."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from evals.report import collect, headline, write_report
from evals.report.paired import paired_deltas


def _run(root, name, method, budget, correct: dict[str, int], task: dict, *, skipped=(), compressed=()):
    """A run directory: ``summary.csv`` (accuracy over the items), ``samples.csv`` (one row per item) and a
    ``meta.json`` whose identity has ``task`` (its settings) and a compression-free part shared by the runs."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    kept = {k: v for k, v in correct.items() if k not in skipped}
    acc = 100.0 * sum(kept.values()) / len(kept)
    base = {"model": "m", "task": "needle", "method": method, "prompt_budget": budget, "recent": None,
            "run_id": name, "unit": "%", "group": "all"}
    pd.DataFrame([{**base, "metric": "accuracy", "value": acc, "n": len(kept), "ci_lo": 0.0, "ci_hi": 100.0},
                  {**base, "metric": "mean_kv_tokens_peak", "value": float(budget or 4000), "n": len(kept),
                   "unit": "tokens"}]).to_csv(run_dir / "summary.csv", index=False)
    pd.DataFrame({"item_id": list(correct), "correct": [bool(c) for c in correct.values()],
                  "skipped": [k in skipped for k in correct], "compressed": [k in compressed for k in correct],
                  "gen_tokens": [10 + 5 * (k in compressed) for k in correct]}).to_csv(run_dir / "samples.csv",
                                                                                      index=False)
    identity = {"model": {"name": "m"}, "task": task, "gen": {"seed": 0},
                "compression": {"method": method, "prompt_budget": budget}}
    (run_dir / "meta.json").write_text(json.dumps({"identity": identity, "fingerprint": f"fp-{name}"}))


def _needle(context: int, limit=None) -> dict:
    return {"name": "needle", "context_tokens": context, "limit": limit, "data_sha256": f"d{context}{limit}"}


ALL = {"a": 1, "b": 1, "c": 1, "d": 1}


def test_two_context_lengths_are_two_groups_never_pooled(tmp_path):
    for ctx in (1024, 2048):
        _run(tmp_path, f"none_{ctx}", "none", None, ALL, _needle(ctx))
        _run(tmp_path, f"snap_{ctx}", "snapstream", 512 if ctx == 1024 else 1024,
             {"a": 1, "b": 0, "c": 1, "d": int(ctx == 2048)}, _needle(ctx))
    summary = collect(tmp_path)
    assert set(summary["task_config"]) == {"context_tokens=1024", "context_tokens=2048"}
    head = headline(summary)
    assert set(zip(head["run"], head["label"])) == {("none_1024", "none"), ("snap_1024", "snapstream"),
                                                    ("none_2048", "none"), ("snap_2048", "snapstream")}  # no hashes
    deltas = paired_deltas(head).set_index("run")
    assert deltas.loc["snap_1024", "reference"] == "none_1024" and deltas.loc["snap_2048", "reference"] == "none_2048"
    report, _ = write_report(tmp_path)
    text = report.read_text()
    assert "## needle (context_tokens=1024) · m: accuracy (%)" in text
    assert "## needle (context_tokens=2048) · m: accuracy (%)" in text
    plots = sorted(p.name for p in (tmp_path / "plots").glob("budget__*.png"))
    assert len(plots) == 2 and all("context_tokens" in p for p in plots)  # one curve per configuration
    for name in ("summary_all.csv", "deltas.csv"):
        frame = pd.read_csv(tmp_path / name)
        assert set(frame["task_config"]) == {"context_tokens=1024", "context_tokens=2048"}, name
    deltas_csv = pd.read_csv(tmp_path / "deltas.csv").set_index("task_config")
    assert deltas_csv.loc["context_tokens=1024", "delta"] == -50.0 and deltas_csv.loc["context_tokens=2048",
                                                                                       "delta"] == -25.0


def test_a_single_configuration_has_no_label(tmp_path):
    _run(tmp_path, "none", "none", None, ALL, _needle(1024))
    _run(tmp_path, "snap", "snapstream", 512, ALL, _needle(1024))
    assert set(collect(tmp_path)["task_config"]) == {""}


def test_a_run_that_misses_items_is_paired_on_the_common_items_with_both_counts(tmp_path):
    """The full cache scored a..f (one wrong); the compressed run only a..d, all right: Δ, value and reference are all
    on a..d, n_items 4 beside n_run 4 and n_reference 6, flagged, and said in the report."""
    task = _needle(1024)
    _run(tmp_path, "none", "none", None, {"a": 1, "b": 1, "c": 1, "d": 1, "e": 0, "f": 0}, task)
    _run(tmp_path, "snap", "snapstream", 512, {"a": 1, "b": 1, "c": 1, "d": 0}, task)
    write_report(tmp_path)
    row = pd.read_csv(tmp_path / "deltas.csv").iloc[0]
    assert (row["n_items"], row["n_run"], row["n_reference"], bool(row["subset"])) == (4, 4, 6, True)
    assert (row["value"], row["reference"], row["delta"]) == (75.0, 100.0, -25.0)  # one basis: a..d
    assert row["value"] - row["reference"] == row["delta"]
    text = (tmp_path / "report.md").read_text()
    assert "## Paired on fewer items than a run scored" in text and "4 items both scored, of 4 (run) and 6" in text
    assert "(on 4 of 6 items)" in text


def test_drop_empty_pairs_on_the_items_its_headline_counts(tmp_path):
    """Skipped rows (drop_empty) leave the pairing as they leave the headline: item d, skipped in the run, is not a
    0 in Δ."""
    task = _needle(1024)
    _run(tmp_path, "none", "none", None, ALL, task)
    _run(tmp_path, "snap", "snapstream", 512, {"a": 1, "b": 1, "c": 0, "d": 0}, task, skipped={"d"})
    head = headline(collect(tmp_path))
    assert head.set_index("run").loc["snap", "value"] == 100.0 * 2 / 3  # the summary leaves d out
    d = paired_deltas(head).iloc[0]
    assert d["n_paired"] == 3
    assert (d["value_paired"], d["delta"]) == pytest.approx((100.0 * 2 / 3, 100.0 * 2 / 3 - 100.0))


def test_delta_where_compression_acted_and_the_change_in_generated_tokens(tmp_path):
    task = _needle(1024)
    _run(tmp_path, "none", "none", None, ALL, task)
    _run(tmp_path, "snap", "snapstream", 512, {"a": 1, "b": 1, "c": 0, "d": 1}, task, compressed={"c", "d"})
    d = paired_deltas(headline(collect(tmp_path))).iloc[0]
    assert (d["delta"], d["n_acted"], d["delta_acted"]) == (-25.0, 2, -50.0)
    assert (d["value_acted"], d["reference_acted"]) == (50.0, 100.0)  # items c, d: one right of two
    assert d["gen_tokens_change"] == 2.5  # items c and d generated 5 more tokens each: +10 over 4 items


def test_keeps_every_token_and_throughput_at_equal_memory_in_the_report(tmp_path):
    """A snapstream run whose prompts and generations all fit its budget and ring is reported as keeping every token
    (= full cache), decided from its method and measured lengths; throughput is tokens per wall second with rows."""
    task = _needle(1024)
    _run(tmp_path, "none", "none", None, ALL, task)
    _run(tmp_path, "fits", "snapstream", 512, ALL, task)
    _run(tmp_path, "cuts", "snapstream", 64, {"a": 1, "b": 0, "c": 1, "d": 0}, task)
    for name, prompt, wall, rows in (("none", 300, 8.0, 1), ("fits", 300, 8.0, 1), ("cuts", 300, 2.0, 8)):
        run_dir = tmp_path / name
        samples = pd.read_csv(run_dir / "samples.csv").assign(prompt_tokens=prompt, gen_tokens=40, latency_s=2.0)
        samples.to_csv(run_dir / "samples.csv", index=False)
        meta = json.loads((run_dir / "meta.json").read_text())
        meta["identity"]["compression"] = {"method": meta["identity"]["compression"]["method"],
                                           **({"prompt_budget": int(name == "fits") * 448 + 64} if name != "none"
                                              else {})}
        meta["generation"] = {"wall_s": wall, "gen_tokens": 160, "samples": 4, "rows": rows, "measured": True,
                              "tokens_per_s": 160 / wall}
        (run_dir / "meta.json").write_text(json.dumps(meta))
    text = write_report(tmp_path)[0].read_text()
    assert text.count("snapstream — keeps every token (= full cache)") == 1  # the behaviour table, run "fits"
    assert "100.0 [0.0, 100.0] (n=4) (Δ +0.0, n.m.: 4 items) — keeps every token (= full cache)" in text
    section = text.split("## Throughput at equal memory")[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("| m ")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert sorted((c[2].split(" —")[0], c[5], c[6]) for c in cells) == [("none", "1", "20"), ("snapstream", "1", "20"),
                                                                       ("snapstream", "8", "80")]


def test_outcome_shares_are_one_table(tmp_path):
    from evals.report import breakdown_tables

    rows = [{"run": run, "model": "m", "task": "livecodebench", "method": method, "prompt_budget": budget,
             "recent": None, "metric": f"share_{o}", "group": g, "value": v, "n": n, "unit": "%", "ci_lo": None,
             "ci_hi": None}
            for run, method, budget in (("r1", "none", None), ("r2", "snapstream", 64))
            for g, n in (("all", 10), ("difficulty=easy", 4), ("difficulty=hard", 6))
            for o, v in (("passed", 50.0), ("wrong_answer", 30.0), ("timeout", 20.0))]
    [(title, table)] = breakdown_tables(pd.DataFrame(rows))
    assert title == "livecodebench: outcomes (% of samples) by group"
    assert list(table.columns[-4:]) == ["passed", "wrong_answer", "timeout", "n"] and len(table) == 6
    assert table["group"].tolist()[:3] == ["all", "difficulty=easy", "difficulty=hard"]


def test_a_narrow_memory_range_still_has_two_ticks_and_a_point_without_interval_is_marked(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evals.report.plots import at_least_two_ticks, frontier

    fig, ax = plt.subplots()
    ax.plot([1000 * 1024, 1200 * 1024], [1, 2])  # within one power of two: one LogLocator tick at most
    ax.set_xscale("log", base=2)
    ax.margins(x=0.08)
    at_least_two_ticks(ax)
    lo, hi = ax.get_xlim()
    assert len([t for t in ax.xaxis.get_majorticklocs() if lo <= t <= hi]) >= 2
    plt.close(fig)
    head = pd.DataFrame([{"model": "m", "task": "needle", "method": m, "label": m, "prompt_budget": b,
                          "metric": "accuracy", "unit": "%", "value": v, "ci_lo": lo, "ci_hi": hi,
                          "mean_kv_bytes_peak": kv, "mean_kv_tokens_peak": 1.0}
                         for m, b, v, lo, hi, kv in (("none", None, 90.0, 80.0, 95.0, 1200 * 1024.0),
                                                     ("snapstream", 64, 50.0, None, None, 1000 * 1024.0))])
    texts = []

    class Pyplot:  # pyplot as frontier uses it, reading the figure's annotations before it is closed
        subplots = staticmethod(plt.subplots)

        @staticmethod
        def close(figure):
            texts.extend(t.get_text() for a in figure.axes for t in a.texts)
            plt.close(figure)

    assert frontier(head, tmp_path / "f.png", Pyplot) is not None
    assert "n.m." in texts
