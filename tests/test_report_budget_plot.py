"""The report's budget plot answers "which method is safe at which budget": one curve per method across its own
budget knob (R-KV's ``budget`` as SnapKV's ``prompt_budget``), never pooling runs whose other settings differ, the
cap in the legend, coinciding curves visible and named, every label inside the image, and report.md giving the
answer before its units note."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from evals.report import collect, headline, write_report
from evals.report.plots import budget_axis_label, budget_series, by_budget, coinciding, knob_axis_label, offsets


def _run(root, name, method, budget, correct, *, kernel=None, max_new=8):
    """A run directory as the runner leaves it: ``summary.csv`` with the method's own budget knob (``budget`` for
    the decode-time methods, ``prompt_budget`` for the others), ``samples.csv`` and ``meta.json``'s identity."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    knob = "budget" if method in ("rkv", "snapkv_decode", "triattention") else "prompt_budget"
    acc = 100.0 * sum(correct) / len(correct)
    base = {"model": "m", "task": "needle", "method": method, "prompt_budget": None, "budget": None, "recent": None,
            "kernel": kernel, knob: budget, "run_id": name, "group": "all"}
    pd.DataFrame([{**base, "metric": "accuracy", "unit": "%", "value": acc, "n": len(correct),
                   "ci_lo": max(acc - 20, 0), "ci_hi": min(acc + 20, 100)},
                  {**base, "metric": "mean_kv_tokens_peak", "unit": "tokens", "value": float((budget or 500) + 7),
                   "n": len(correct)}]).to_csv(run_dir / "summary.csv", index=False)
    pd.DataFrame({"item_id": [f"i{k}" for k in range(len(correct))],
                  "correct": [bool(c) for c in correct]}).to_csv(run_dir / "samples.csv", index=False)
    identity = {"model": {"name": "m"}, "task": {"name": "needle", "context_tokens": 512},
                "gen": {"max_new_tokens": max_new, "seed": 0},
                "compression": {"method": method, knob: budget, "kernel": kernel}}
    (run_dir / "meta.json").write_text(json.dumps({"identity": identity, "fingerprint": f"fp-{name}"}))


def _sweep(root):
    """The full cache, R-KV at 128/256/512 (its ``budget``) and SnapKV at 128/256 (its ``prompt_budget``)."""
    _run(root, "none", "none", None, [1, 1, 1, 1])
    for b, c in ((128, [0, 0, 1, 0]), (256, [1, 0, 1, 0]), (512, [1, 1, 1, 0])):
        _run(root, f"rkv{b}", "rkv", b, c)
    for b, c in ((128, [1, 0, 0, 0]), (256, [1, 1, 0, 1])):
        _run(root, f"snapkv{b}", "snapkv", b, c)


def test_a_decode_time_method_is_one_curve_across_its_budgets_beside_a_prompt_method(tmp_path):
    _sweep(tmp_path)
    head = headline(collect(tmp_path))
    assert set(head.loc[head["method"] == "rkv", "label"]) == {"rkv"}  # was rkv (budget=128), rkv (budget=256), ...
    series = budget_series(head)
    assert list(series) == ["rkv", "snapkv"]
    assert series["rkv"]["prompt_budget"].tolist() == [128, 256, 512]
    assert series["rkv"]["value"].tolist() == [25.0, 50.0, 75.0]
    assert series["snapkv"]["prompt_budget"].tolist() == [128, 256]


def test_runs_differing_in_another_knob_or_setting_are_separate_curves(tmp_path):
    _run(tmp_path, "none", "none", None, [1, 1, 1, 1])
    for b in (128, 256):
        _run(tmp_path, f"k5_{b}", "rkv", b, [1, 0, 0, 0], kernel=5)
        _run(tmp_path, f"k7_{b}", "rkv", b, [1, 1, 0, 0], kernel=7)
    # two runs of R-KV that differ only in gen.max_new_tokens, at different budgets: never one curve
    _run(tmp_path, "short", "snapkv", 128, [0, 0, 0, 0], max_new=8)
    _run(tmp_path, "long", "snapkv", 256, [1, 1, 1, 1], max_new=64)
    series = budget_series(headline(collect(tmp_path)))
    assert {k: v["run"].tolist() for k, v in series.items()} == {
        "rkv (kernel=5)": ["k5_128", "k5_256"], "rkv (kernel=7)": ["k7_128", "k7_256"],
        "snapkv (gen.max_new_tokens=8)": ["short"], "snapkv (gen.max_new_tokens=64)": ["long"]}


def test_the_axis_is_named_by_each_methods_own_budget_knob():
    assert knob_axis_label("rkv").startswith("compression.budget (KV entries per layer and KV head; caps the whole")
    assert knob_axis_label("triattention").startswith("compression.budget ")
    assert knob_axis_label("snapkv").startswith("compression.prompt_budget (")
    assert "prompt" in knob_axis_label("snapkv") and "prompt" not in knob_axis_label("rkv")
    assert budget_axis_label(["snapkv", "rkv", "snapstream"]).startswith(
        "budget: compression.budget (rkv), compression.prompt_budget (snapkv, snapstream)\n")


def _draw(head, path):
    """``by_budget`` with a pyplot whose ``close`` keeps what a reader sees: the axis labels, legend entries, every
    curve's x positions, and the extent of everything drawn (in pixels at the saved resolution)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen: dict = {}

    class Pyplot:
        subplots = staticmethod(plt.subplots)

        @staticmethod
        def close(figure):
            ax = figure.axes[0]
            seen["xlabel"] = ax.get_xlabel()
            seen["legend"] = [t.get_text() for t in ax.get_legend().get_texts()]
            seen["x"] = {c.get_label(): list(c.lines[0].get_xdata()) for c in ax.containers}  # errorbar curves
            box = figure.get_tightbbox(figure.canvas.get_renderer())
            seen["needed_px"] = (box.width * 120, box.height * 120)
            plt.close(figure)

    assert by_budget(head, path, Pyplot) == path
    return seen


def test_the_budget_plot_labels_caps_fit_and_coinciding_curves_stay_visible(tmp_path):
    import matplotlib.image

    _sweep(tmp_path)
    _run(tmp_path, "stream128", "snapstream", 128, [1, 0, 0, 0])  # equal to snapkv at 128 and 256: coincides
    _run(tmp_path, "stream256", "snapstream", 256, [1, 1, 0, 1])
    head = headline(collect(tmp_path))
    assert coinciding(budget_series(head)) == [["snapkv", "snapstream"]]
    seen = _draw(head, tmp_path / "budget.png")
    assert [t.split(":")[0] for t in seen["legend"]] == ["full cache", "rkv (caps cache)", "snapkv (caps prompt)",
                                                        "snapstream (caps prompt)"]
    assert "coincide at every budget: snapkv = snapstream" in seen["xlabel"]
    assert seen["xlabel"].startswith("budget: compression.budget (rkv), compression.prompt_budget (snapkv, snap")
    snapkv, stream = seen["x"][seen["legend"][2]], seen["x"][seen["legend"][3]]
    assert all(a != b for a, b in zip(snapkv, stream))  # drawn side by side, not on top of each other
    assert all(abs(x / b - 1) <= 0.06 for x, b in zip(snapkv + stream, [128, 256] * 2))  # near their budgets
    height, width = matplotlib.image.imread(tmp_path / "budget.png").shape[:2]
    needed_w, needed_h = seen["needed_px"]
    assert width >= needed_w - 2 and height >= needed_h - 2  # every label and the legend inside the image


def test_offsets_spread_curves_symmetrically_and_leave_one_curve_in_place():
    assert offsets(1) == [1.0]
    spread = offsets(11)
    assert spread == sorted(spread) and len(set(spread)) == 11
    assert spread[0] * spread[-1] == pytest.approx(1.0) and 1 / 1.07 < spread[0] < 1 < spread[-1] < 1.07


def test_report_gives_the_answer_before_the_units_note(tmp_path):
    _sweep(tmp_path)
    report, _ = write_report(tmp_path)
    text = report.read_text()
    figures = text.index("## Figures")
    answer = text.index("## needle · m: accuracy (%)")
    units = text.index("## How to read the numbers")
    assert figures < answer < units and text.index("Units: rates") > units
    assert "accuracy vs each method's budget](plots/budget__needle__m.png)" in text
    page = (tmp_path / "report.html").read_text()
    assert page.index("<h2>Figures</h2>") < page.index("needle · m: accuracy (%)") < page.index("Units: rates")
