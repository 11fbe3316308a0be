"""Figures per (model, task): the accuracy–memory frontier and the metric against each method's budget.

- ``frontier__<task>__<model>.png``: the headline metric (95% interval as error bars) against the **measured** KV
  memory held per sequence (``mean_kv_bytes_peak``, else ``mean_kv_tokens_peak``; log scale), one line per method
  variant, the full cache as a band (its interval) and a star at its own footprint; a grey bar marks each run's
  footprint at ``gen.max_new_tokens`` (:mod:`evals.report.footprint`), where a ring that holds more than the full cache
  on short generations holds less. Methods are compared at the
  memory they really hold, not at their nominal budget.
- ``budget__<task>__<model>.png``: the same metric against each method's own budget knob
  (``CompressionMethod.budget_knob``: ``prompt_budget``, or ``budget`` for the decode-time methods; log scale, plain
  tick labels at the budgets run), one curve per method variant across its budgets (:func:`budget_series`: runs equal
  in everything but the budget), what the budget caps in the legend (``rkv (caps cache)``, ``snapkv (caps prompt)``)
  with each curve's effective footprint (``holds ≈ budget + N``: the measured peak minus the budget), the full cache
  as a dashed line and band. The x label names each method's knob.

Lines differ in colour, marker and dash; markers are hollow and shrink from line to line, and on the budget plot each
curve is offset sideways by a few percent (:func:`offsets`), so that lines that coincide stay visible; curves equal
at every budget are named under the axis (:func:`coinciding`). Legends sit outside the axes and figures are saved
with every label inside the image. Rates are drawn on a fixed 0–100 axis. A point without an interval is marked
``n.m.`` (not meaningful), never drawn as if certain; a log axis always has at least two labelled ticks.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from evals.report.escape import file_part
from evals.report.output import output_folder, save_figure
from evals.report.reference import full_cache
from evals.report.references import method_cap
from evals.report.tables import task_title, with_config
from snapstream_core.methods import METHODS

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">"]
DASHES = ["-", "--", "-.", ":"]


def _human_bytes(x: float, _pos=None) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.3g} {unit}"
        x /= 1024
    return str(x)


def _plain(x: float, _pos=None) -> str:
    return f"{x:,.0f}" if x >= 1 else f"{x:.2g}"


def _style(i: int) -> dict:
    return {"color": COLORS[i % len(COLORS)], "marker": MARKERS[i % len(MARKERS)],
            "linestyle": DASHES[i % len(DASHES)], "markersize": max(4.0, 11.0 - 1.5 * i),
            "markerfacecolor": "none", "markeredgewidth": 1.6, "linewidth": 1.6, "capsize": 3}


def _yerr(frame: pd.DataFrame):
    lo = (frame["value"] - frame["ci_lo"]).clip(lower=0).fillna(0)
    hi = (frame["ci_hi"] - frame["value"]).clip(lower=0).fillna(0)
    return [lo.to_numpy(), hi.to_numpy()]


def _y_axis(ax, frame: pd.DataFrame) -> None:
    unit = str(frame["unit"].iloc[0])
    ax.set_ylabel(f"{frame['metric'].iloc[0]} ({unit})" if unit else str(frame["metric"].iloc[0]))
    if unit == "%":
        ax.set_ylim(-4, 104)
        return
    values = pd.concat([frame["value"], frame["ci_lo"], frame["ci_hi"]]).dropna()
    lo, hi = (values.min(), values.max()) if len(values) else (0.0, 1.0)
    pad = 0.1 * (hi - lo) if hi > lo else max(abs(hi) * 0.1, 1.0)
    ax.set_ylim(lo - pad, hi + pad)


def _full_band(ax, full: pd.DataFrame, x_col: str | None) -> None:
    for j, (_, row) in enumerate(full.iterrows()):
        suffix = f" [{row['label']}]" if len(full) > 1 else ""
        if not math.isnan(row["ci_lo"]) and not math.isnan(row["ci_hi"]):
            ax.axhspan(row["ci_lo"], row["ci_hi"], color="grey", alpha=0.18, lw=0)
        label = f"full cache{suffix}: {row['value']:.3g} (band: 95% CI)"
        ax.axhline(row["value"], color="black", linestyle=(0, (4, 2)), linewidth=1.2, label=label)
        if x_col is not None and not math.isnan(row[x_col]):
            ax.plot([row[x_col]], [row["value"]], marker="*", markersize=14, color="black", linestyle="none")


def _no_interval(ax, line: pd.DataFrame, x_col: str) -> None:
    """``n.m.`` beside each point that has no interval (a point without a bar would read as a certain value)."""
    for x, y, lo in zip(line[x_col], line["value"], line["ci_lo"]):
        if pd.isna(lo) and pd.notna(x) and pd.notna(y):
            ax.annotate("n.m.", (x, y), xytext=(4, 4), textcoords="offset points", fontsize=7, color="grey")


def at_least_two_ticks(ax) -> None:
    """At least two labelled ticks on a log x axis: where the powers of two inside the range are fewer (runs whose
    memory differs by less than a factor of two), three ticks spread over the range instead."""
    import numpy as np
    from matplotlib.ticker import FixedLocator

    lo, hi = ax.get_xlim()
    if lo <= 0 or hi <= lo:
        return
    inside = [t for t in ax.xaxis.get_majorticklocs() if lo <= t <= hi]
    if len(inside) < 2:
        ax.xaxis.set_major_locator(FixedLocator(np.geomspace(lo * 1.02, hi / 1.02, 3)))


def _task_of(frame: pd.DataFrame) -> str:
    """The task of a figure, with its configuration when the task has several (``needle (context_tokens=1024)``)."""
    return task_title(frame["task"].iloc[0], with_config(frame)["task_config"].iloc[0])


def _save(fig, path: Path) -> Path:
    """Saved with every label and the legend outside the axes inside the image (``bbox_inches="tight"``)."""
    fig.tight_layout()
    return save_figure(fig, path, dpi=120, bbox_inches="tight")


def frontier(frame: pd.DataFrame, path: Path, plt) -> Path | None:
    """Metric vs measured KV memory per sequence for one (model, task); None when no run measured its memory."""
    x_col = "mean_kv_bytes_peak" if frame["mean_kv_bytes_peak"].notna().any() else "mean_kv_tokens_peak"
    if not frame[x_col].notna().any():
        return None
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    ref = full_cache(frame)  # the full cache in FP8 is a point of its own (its bytes), never the band
    _full_band(ax, frame[ref], x_col)
    compressed = frame[~ref & frame[x_col].notna()]
    for i, (label, line) in enumerate(compressed.groupby("label", sort=True)):
        line = line.sort_values(x_col)
        name = legend_label(label, str(line["method"].iloc[0]))
        ax.errorbar(line[x_col], line["value"], yerr=_yerr(line), label=name, zorder=3 + i, **_style(i))
        _no_interval(ax, line, x_col)
    bound = frame[frame["kv_mib_at_max_new"].notna()] if "kv_mib_at_max_new" in frame else frame.iloc[:0]
    if x_col.endswith("bytes_peak") and len(bound):  # where each run would be at gen.max_new_tokens
        ax.scatter(bound["kv_mib_at_max_new"] * 1024 * 1024, bound["value"], marker="|", s=160, color="grey",
                   zorder=2, label="at gen.max_new_tokens (bound)")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(_human_bytes if x_col.endswith("bytes_peak") else _plain))
    ax.margins(x=0.08)
    at_least_two_ticks(ax)
    what = "bytes, all layers" if x_col.endswith("bytes_peak") else "tokens per layer and KV head"
    ax.set_xlabel(f"KV per sequence ({what}, measured peak, log)\n★ full cache"
                  + ("   | the same run at gen.max_new_tokens" if len(bound) else ""))
    _y_axis(ax, frame)
    model, task = frame["model"].iloc[0], _task_of(frame)
    ax.set_title(f"{task} · {model}: {frame['metric'].iloc[0]} vs KV memory held per sequence")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path = _save(fig, path)
    plt.close(fig)
    return path


def budget_series(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The budget plot's curves of one (model, task): ``label -> runs`` sorted by budget. A curve is one method with
    everything but its budget equal: its runs share a label (:func:`evals.report.tables.assign_labels`: the method,
    its non-budget knobs and its other settings that vary), whatever the method's budget knob (``prompt_budget``,
    or ``budget`` for the decode-time methods; both on the ``prompt_budget`` column:
    :func:`evals.report.load.budget_axis`). The full cache and runs without a budget are no curve."""
    compressed = frame[~full_cache(frame) & frame["prompt_budget"].notna()]
    return {label: line.sort_values("prompt_budget") for label, line in compressed.groupby("label", sort=True)}


def legend_label(label: str, method: str) -> str:
    """``rkv (caps cache)``, ``snapkv (caps prompt, kernel=15) · vllm``: the label with what the method's budget
    caps (``CompressionMethod.budget_cap``)."""
    cap = f"caps {method_cap(method)}"
    if label.startswith(f"{method} ("):
        return f"{method} ({cap}, {label[len(method) + 2:]}"
    return f"{method} ({cap}){label[len(method):]}" if label.startswith(method) else f"{label} ({cap})"


def budget_axis_label(methods: list[str]) -> str:
    """The x label of a budget axis: each method's own knob (``CompressionMethod.budget_knob``), e.g.
    ``budget: compression.budget (rkv), compression.prompt_budget (snapkv, snapstream)``, in KV entries per layer
    and KV head."""
    by_knob: dict[str, list[str]] = {}
    for method in dict.fromkeys(methods):
        cls = METHODS.get(method)
        by_knob.setdefault(cls.budget_knob if cls is not None else "prompt_budget", []).append(method)
    knobs = ", ".join(f"compression.{k} ({', '.join(sorted(ms))})" for k, ms in sorted(by_knob.items()))
    return f"budget: {knobs}\nKV entries per layer and KV head (log scale)"


CAP_WORDS = {"prompt": "caps the prompt kept; generated tokens are added", "cache": "caps the whole cache while "
             "decoding", "none": "caps nothing"}


def knob_axis_label(method: str) -> str:
    """One method's budget axis, named by its own knob and what it caps: ``compression.budget (KV entries per layer
    and KV head; caps the whole cache while decoding)`` for R-KV, ``compression.prompt_budget (...)`` for SnapKV."""
    cls = METHODS.get(method)
    knob = cls.budget_knob if cls is not None else "prompt_budget"
    cap = CAP_WORDS.get(method_cap(method), f"caps {method_cap(method)}")
    return f"compression.{knob} (KV entries per layer and KV head; {cap})"


def coinciding(series: dict[str, pd.DataFrame]) -> list[list[str]]:
    """Groups of two or more curves equal at every point (same budgets, values and intervals): drawn side by side,
    and named in the figure, since one would otherwise hide the other."""
    def key(line: pd.DataFrame) -> tuple:
        cols = line[["prompt_budget", "value", "ci_lo", "ci_hi"]].astype(float).round(9)
        return tuple(map(tuple, cols.fillna(-1e300).to_numpy()))

    groups: dict[tuple, list[str]] = {}
    for label, line in series.items():
        groups.setdefault(key(line), []).append(label)
    return [labels for labels in groups.values() if len(labels) > 1]


def offsets(n: int) -> list[float]:
    """Each curve's factor on the budget axis (log scale): curves spread sideways by at most ±6% of a budget around
    it, so that curves through the same points stay visible; 1.0 for a single curve."""
    if n < 2:
        return [1.0]
    step = min(0.04, 0.16 / (n - 1))  # in log2 units: the whole spread at most 0.16 (±6% of the budget)
    return [2.0 ** ((i - (n - 1) / 2) * step) for i in range(n)]


def by_budget(frame: pd.DataFrame, path: Path, plt) -> Path | None:
    """Metric vs each method's own budget for one (model, task): one curve per method variant across its budgets
    (:func:`budget_series`), the cap in its legend; None when no compressed run has a budget."""
    series = budget_series(frame)
    if not series:
        return None
    import textwrap

    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    _full_band(ax, frame[full_cache(frame)], None)
    for i, ((label, line), shift) in enumerate(zip(series.items(), offsets(len(series)))):
        method = str(line["method"].iloc[0])
        extra = (line["mean_kv_tokens_peak"] - line["prompt_budget"]).dropna()
        held = f"holds ≈ budget {'+' if extra.median() >= 0 else '−'} {abs(extra.median()):.0f} tokens" if len(
            extra) else "footprint not measured"
        shown = line.assign(x=line["prompt_budget"] * shift)
        ax.errorbar(shown["x"], shown["value"], yerr=_yerr(shown), label=f"{legend_label(label, method)}: {held}",
                    zorder=3 + i, **_style(i))
        _no_interval(ax, shown, "x")
    budgets = sorted({float(b) for line in series.values() for b in line["prompt_budget"]})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(budgets))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    ax.set_xlim(budgets[0] / 1.3, budgets[-1] * 1.3)
    notes = [f"coincide at every budget: {' = '.join(g)}" for g in coinciding(series)]
    if len(series) > 1:
        notes.append("curves offset sideways (at most ±6%) so that equal points stay visible; ticks at the budgets")
    caption = "\n".join(textwrap.fill(n, 110) for n in notes)
    ax.set_xlabel(budget_axis_label([str(m) for line in series.values() for m in line["method"]])
                  + (f"\n{caption}" if caption else ""), fontsize=9)
    _y_axis(ax, frame)
    ax.set_title(f"{_task_of(frame)} · {frame['model'].iloc[0]}: {frame['metric'].iloc[0]} vs budget")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path = _save(fig, path)
    plt.close(fig)
    return path


def plot(head: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Both figures for every (model, task) of ``head`` (:func:`evals.report.tables.headline`) under ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output_folder(out_dir)
    paths = []
    # names from the runs are text: a "$" in a model or method name is never read as TeX math (an error)
    with matplotlib.rc_context({"text.parse_math": False}):
        for (task, config, model), frame in with_config(head).groupby(["task", "task_config", "model"], sort=False):
            name = file_part(task) + (f"~{file_part(config)}" if config else "")
            for kind, draw in (("frontier", frontier), ("budget", by_budget)):
                path = draw(frame, out_dir / f"{kind}__{name}__{file_part(model)}.png", plt)
                if path is not None:
                    paths.append(path)
    return paths
