"""The report's tables: one headline row per run, the method × budget pivot with ± and Δ vs the full cache, the
behaviour table that explains a drop, and per-benchmark breakdowns. Cells are strings: a dash where a value does
not apply, never ``nan``.
"""

from __future__ import annotations

import math

import pandas as pd

from evals.analysis.stats import SMALL_N
from evals.analysis.summary import identity_extra
from evals.record.throughput import rate_text
from evals.report.metrics import primary_metric, task_module
from snapstream_core.methods import METHODS, knob_names
from tasks.protocol import hook

BEHAVIOUR = {  # summary metric -> column title
    "mean_gen_tokens": "gen tokens (mean)",
    "share_gen_truncated": "cut at max_new_tokens (%)",
    "share_think_unclosed": "</think> never closed (%)",
    "share_prompt_truncated": "prompt cut (%)",
    "share_compressed": "compression acted (% samples)",
    "mean_kv_tokens_peak": "KV tokens held (mean peak)",
    "mean_kv_tokens_mean": "KV tokens held (mean over decoding)",
    "mean_kv_bytes_peak": "KV held (MiB, mean peak)",
    "mean_kv_slots_peak": "KV slots allocated (mean peak)",  # > tokens held: free ring slots, ragged padding
    "mean_kv_held_bytes_after_prefill": "KV held after prefill (MiB)",
    "mean_kv_bytes_after_prefill": "KV allocated after prefill (MiB)",
}
DASH = "—"
# The report's task order: the diagnostic that shows what compression does first, then the long-context benchmark,
# then the long-generation ones; other tasks after them, alphabetically.
TASK_ORDER = ("needle", "longbench_v2", "aime24", "livecodebench")
MIB = 1024 * 1024
NOT_MEANINGFUL = "n.m."  # Δ / p on fewer than SMALL_N paired items: shown, but marked not meaningful
KEEPS_ALL = "keeps every token (= full cache)"  # a compressing method that dropped no token of any sample
# One table, curve or paired comparison holds runs of one model, one task and one task configuration
# (evals.report.load.task_config_labels): runs whose task settings differ are never pooled.
GROUP = ["model", "task", "task_config"]
# which engine generated a run and which code generated and graded its rows (evals.report.likeness), and what two
# engines' full-cache runs share (evals.report.load.engine_key)
CODE_COLUMNS = ("backend", "generation_id", "grading_id", "engine_key")
# The storage knobs (CompressionMethod.kv_dtype, kv_scale): named in a label where they vary and are set (a run in the
# model's dtype has them empty and is labelled without them: ``none`` beside ``none (kv_dtype=fp8_e4m3, ...)``)
STORAGE_KNOBS = ("kv_dtype", "kv_scale")


def task_title(task: str, config: object) -> str:
    """``needle`` or, when the task has several configurations, ``needle (context_tokens=1024)``."""
    return f"{task} ({config})" if isinstance(config, str) and config else str(task)


def with_config(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a ``task_config`` column (empty where it had none: a summary built without meta.json)."""
    if "task_config" in frame.columns:
        return frame.assign(task_config=frame["task_config"].fillna("").astype(str))
    return frame.assign(task_config="")


def task_rank(task: str) -> int:
    """Position of ``task`` in :data:`TASK_ORDER` (others after it)."""
    return TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER)


def budget_knobs() -> set[str]:
    """Every method's budget knob (``CompressionMethod.budget_knob``: ``prompt_budget``, ``budget``): the report's one
    budget axis (:func:`evals.report.load.budget_axis` copies each run's own knob into ``prompt_budget``)."""
    return {cls.budget_knob for cls in METHODS.values()}


def variant_knobs(frame: pd.DataFrame) -> list[str]:
    """The method knobs (from the method dataclasses) that can tell lines of one method apart: all but the budget
    knobs (a run's own budget is the x axis / column, so R-KV's ``budget`` never splits its curve), and only those
    the summaries have."""
    axis = budget_knobs()
    return [k for k in knob_names() if k not in axis and k in frame.columns]


def report_metrics(task: str, frame: pd.DataFrame) -> list[str]:
    """The task's ``REPORT_METRICS`` that it reported (needle: accuracy and key_prefix), else its primary metric."""
    present = set(frame["metric"])
    wanted = [m for m in hook(task_module(task), "REPORT_METRICS") or () if m in present]
    return wanted or [primary_metric(task, frame)]


def fmt(value, unit: str = "") -> str:
    """A number for a table: a dash for missing, integers plain, percent with one decimal, else 4 significant."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if isinstance(value, str):
        return value
    value = float(value)
    if unit == "%":
        return f"{value:.1f}"
    if unit == "MiB":
        return f"{value:.2f}"
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}" if unit in ("tokens", "bytes") else str(int(value))
    return f"{value:.4g}"


def _label_knobs(method: str, frame: pd.DataFrame) -> list[str]:
    """Knobs that tell lines of one method apart: not those its class derives from the budget
    (``budget_derived``: StreamingLLM's ``recent``)."""
    cls = METHODS.get(method)
    derived = cls.budget_derived if cls is not None else ()
    return [k for k in variant_knobs(frame) if k not in derived]


def assign_labels(head: pd.DataFrame) -> pd.Series:
    """A label per run that tells apart every two runs of one (model, task) that would share a line or a cell:
    the method, then its knobs that vary (never its budget, the x axis; the storage knobs only where set), then its
    other settings that vary
    (``run_settings``: sampling, model; ``gen.max_new_tokens=8``), then the engine (``none · vllm``) where runs of
    several backends are side by side (never pooled), then (if two runs still collide) the run's fingerprint or
    directory. Runs of one label differ in their budget only: one curve of the budget plot."""
    from evals.report.load import differing_settings

    labels = pd.Series("", index=head.index, dtype=object)
    for _, frame in with_config(head).groupby(GROUP, sort=False):
        engines = frame["backend"].nunique() > 1 if "backend" in frame.columns else False
        for method, part in frame.groupby("method", sort=False):
            varying = [k for k in _label_knobs(method, part) if part[k].nunique(dropna=False) > 1]
            settings = (part["run_settings"].fillna("").astype(str) if "run_settings" in part.columns
                        else pd.Series("", index=part.index))
            named = differing_settings(settings.tolist())
            for idx, row in part.iterrows():
                shown = [k for k in varying if k not in STORAGE_KNOBS or not pd.isna(row[k])]  # bf16: no kv_dtype=—
                extra = ", ".join([*(f"{k}={fmt(row[k])}" for k in shown), *filter(None, [named.get(settings[idx])])])
                labels[idx] = f"{method} ({extra})" if extra else str(method)
                if engines:
                    labels[idx] += f" · {row['backend']}"
        budget = frame["prompt_budget"].astype(str)
        for _, clash in frame.groupby([labels[frame.index], budget], sort=False, dropna=False):  # full cache: NaN
            if len(clash) > 1:
                for idx, tag in _tags(clash).items():
                    labels[idx] += f" [{tag}]"
    return labels


def _tags(runs: pd.DataFrame) -> pd.Series:
    """The shortest fingerprint prefix (8 characters or more) that tells ``runs`` apart, else their directories."""
    fps = runs["fingerprint"]
    if fps.map(lambda f: isinstance(f, str) and bool(f)).all():
        for width in (8, 12, 16, 24, None):
            tags = fps.map(lambda f, w=width: f[:w])
            if tags.is_unique:
                return tags
    return runs["run"].astype(str)


def headline(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its task's primary metric on the whole set (with ``stderr``, ``ci_lo``, ``ci_hi``, ``unit``),
    the run's knobs, its behaviour figures and a ``label`` unique within its (model, task)."""
    rows = []
    summary = with_config(summary)
    for task, frame in summary.groupby("task", sort=False):
        metric = primary_metric(task, frame)
        rows.append(frame[(frame["metric"] == metric) & (frame["group"] == "all")])
    out = pd.concat(rows, ignore_index=True)
    knobs = [k for k in identity_extra() if k != "run_id" and k in out.columns]
    cols = ["model", "task", "task_config", "method", "prompt_budget", "recent", *knobs]
    keep = [*cols, "metric", "value", "stderr", "ci_lo", "ci_hi", "unit", "n", "run_id", "run", "run_dir",
            "fingerprint", "pair_key", *[c for c in (*CODE_COLUMNS, "run_settings") if c in out.columns]]
    out = out[keep].drop_duplicates("run")
    extra = summary[(summary["group"] == "all") & summary["metric"].isin(BEHAVIOUR)]
    wide = extra.pivot_table(index="run", columns="metric", values="value", aggfunc="first")
    out = out.join(wide, on="run")
    for metric in BEHAVIOUR:
        if metric not in out.columns:
            out[metric] = math.nan
    out["_task_rank"] = out["task"].map(task_rank)
    out = out.sort_values(["model", "_task_rank", "task", "task_config", "method", "prompt_budget", "run"],
                          na_position="first")
    out = out.drop(columns="_task_rank").reset_index(drop=True)
    out["label"] = assign_labels(out)
    return out


def _cell(value, lo, hi, n, unit: str) -> str:
    """``value [lo, hi] (n=N)``: the 95% interval (Wilson or bootstrap: ``ci_method``) and the items behind it."""
    text = fmt(value, unit)
    if text == DASH:
        return text
    ci = "" if fmt(lo, unit) == DASH else f" [{fmt(lo, unit)}, {fmt(hi, unit)}]"
    count = "" if n is None or pd.isna(n) else f" (n={int(n)})"
    return f"{text}{ci}{count}"


def _delta_cell(d: pd.Series | None, unit: str) -> str:
    if d is None or pd.isna(d["delta"]):
        return ""
    delta = f"{float(d['delta']):+.1f}" if unit == "%" else f"{float(d['delta']):+.3g}"
    if d["n_paired"] < SMALL_N:
        return f" (Δ {delta}, {NOT_MEANINGFUL}: {int(d['n_paired'])} items)"
    p = d["p_value"]
    ptext = DASH if pd.isna(p) else ("<0.001" if p < 0.001 else f"{p:.2f}")
    return f" (Δ {delta}, p {ptext})"


def pivots(summary: pd.DataFrame, head: pd.DataFrame, deltas: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Per (model, task) and report metric: rows = method variant, columns = ``full`` and each prompt budget; a
    cell is ``value ± stderr`` and, for the primary metric, ``(Δ vs full cache, paired p-value)``."""
    by_run = deltas.set_index("run") if len(deltas) else None
    tables = []
    for (model, task, config), frame in with_config(head).groupby(GROUP, sort=False):
        runs = frame.set_index("run")
        part = summary[(summary["run"].isin(runs.index)) & (summary["group"] == "all")]
        for metric in report_metrics(task, part):
            values = part[part["metric"] == metric].drop_duplicates("run").set_index("run")
            unit = str(values["unit"].iloc[0]) if len(values) else ""
            budgets = sorted({int(b) for b in runs["prompt_budget"].dropna()})
            columns = ["method", "full", *[str(b) for b in budgets]]
            lines: dict[str, dict[str, str]] = {}
            for run, info in runs.iterrows():
                if run not in values.index:
                    continue
                v = values.loc[run]
                col = "full" if info["method"] == "none" or pd.isna(info["prompt_budget"]) else str(
                    int(info["prompt_budget"]))
                line = lines.setdefault(info["label"], {c: DASH for c in columns} | {"method": info["label"]})
                if line[col] != DASH:
                    raise AssertionError(f"report: two runs in one cell ({info['label']}, {col})")
                d = by_run.loc[run] if by_run is not None and metric == info["metric"] and run in by_run.index else None
                kept = f" — {KEEPS_ALL}" if info.get("keeps_all") is True else ""
                line[col] = _cell(v["value"], v["ci_lo"], v["ci_hi"], v["n"], unit) + _delta_cell(d, unit) + kept
            table = pd.DataFrame(list(lines.values()), columns=columns)
            if (table["full"] == DASH).all():
                table = table.drop(columns=["full"])
            unit_text = f" ({unit})" if unit else ""
            tables.append((f"{task_title(task, config)} · {model}: {metric}{unit_text}, [95% CI] (n items)", table))
    return tables


def _delta_interval(d: float, lo: float, hi: float, unit: str) -> str:
    """``+Δ [lo, hi]``; the interval as ``[n.m.]`` where there is none (every paired difference equal)."""
    if pd.isna(d):
        return DASH
    num = (lambda v: f"{v:+.1f}") if unit == "%" else (lambda v: f"{v:+.3g}")
    return f"{num(d)} [{NOT_MEANINGFUL}]" if pd.isna(lo) or pd.isna(hi) else f"{num(d)} [{num(lo)}, {num(hi)}]"


def _paired_on(d: pd.Series) -> str:
    """`` (on k of n items)`` when the pairing covers fewer items than one of the runs scored."""
    if not bool(d.get("subset", False)) or pd.isna(d.get("n_paired")):
        return ""
    return f" (on {int(d['n_paired'])} of {int(max(d['n_run'], d['n_reference']))} items)"


def _marked(n_paired: float) -> str:
    return f" {NOT_MEANINGFUL}" if n_paired < SMALL_N else ""


def behaviour_table(head: pd.DataFrame, deltas: pd.DataFrame) -> pd.DataFrame:
    """One row per run: the headline with its 95% interval, Δ vs the full cache with its interval and p-value, and
    the behaviour columns; the budget with what it caps (``512 (prompt)``: ``CompressionMethod.budget_cap``)."""
    from evals.report.references import method_cap

    table = head.merge(deltas, on="run", how="left") if len(deltas) else head.assign(
        delta=math.nan, delta_ci_lo=math.nan, delta_ci_hi=math.nan, p_value=math.nan, n_paired=math.nan,
        mde_80=math.nan)
    out = pd.DataFrame({
        "model": table["model"], "task": [task_title(t, c) for t, c in zip(table["task"], with_config(table)[
            "task_config"])],
        "method": [f"{lab} — {KEEPS_ALL}" if k is True else lab for lab, k in zip(
            table["label"], table["keeps_all"] if "keeps_all" in table else [None] * len(table))],
        "budget": [fmt(b) if pd.isna(b) else f"{fmt(b)} ({method_cap(m)})"
                   for b, m in zip(table["prompt_budget"], table["method"])],
        "metric": table["metric"] + table["unit"].map(lambda u: f" ({u})" if u else ""),
        "value [95% CI]": [
            fmt(v, u) if pd.isna(lo) else f"{fmt(v, u)} [{fmt(lo, u)}, {fmt(hi, u)}]"
            for v, lo, hi, u in zip(table["value"], table["ci_lo"], table["ci_hi"], table["unit"])],
        "n": table["n"].map(fmt),
        "Δ vs full [95% CI]": [
            DASH if pd.isna(d) else _delta_interval(d, lo, hi, u) + _marked(n) + _paired_on(r)
            for d, lo, hi, u, n, (_, r) in zip(table["delta"], table["delta_ci_lo"], table["delta_ci_hi"],
                                               table["unit"], table["n_paired"].fillna(0), table.iterrows())],
        "p": [DASH if pd.isna(p) else (NOT_MEANINGFUL if n < SMALL_N else ("<0.001" if p < 0.001 else f"{p:.3f}"))
              for p, n in zip(table["p_value"], table["n_paired"].fillna(0))],
        "MDE 80%": [fmt(m, u) for m, u in zip(table["mde_80"], table["unit"])],
    })
    if "n_acted" in table and table["n_acted"].notna().any():
        out["Δ where compression acted (items)"] = [
            DASH if pd.isna(d) or not n else f"{_delta_interval(d, lo, hi, u)} ({int(n)})"
            for d, lo, hi, u, n in zip(table["delta_acted"], table["delta_acted_ci_lo"], table["delta_acted_ci_hi"],
                                       table["unit"], table["n_acted"].fillna(0))]
        out["gen tokens vs full (mean per item)"] = table["gen_tokens_change"].map(
            lambda v: DASH if pd.isna(v) else f"{v:+.1f}")
    if "tokens_per_s" in table and table["tokens_per_s"].notna().any():
        out["throughput (tok/s, wall; rows)"] = [
            DASH if pd.isna(v) else f"{rate_text(v)} ({r})" for v, r in zip(table["tokens_per_s"], table["rows_held"])]
        out["latency (s/sample)"] = table["latency_s_mean"].map(lambda v: DASH if pd.isna(v) else f"{v:.3g}")
    units = {"mean_gen_tokens": "tokens", "mean_kv_tokens_peak": "tokens", "mean_kv_tokens_mean": "tokens",
             "mean_kv_bytes_peak": "MiB", "mean_kv_slots_peak": "tokens", "mean_kv_held_bytes_after_prefill": "MiB",
             "mean_kv_bytes_after_prefill": "MiB"}
    # allocated beside held only where they differ (a ring's free slots, a ragged policy's padding)
    beside = {"mean_kv_slots_peak": "mean_kv_tokens_peak",
              "mean_kv_held_bytes_after_prefill": "mean_kv_bytes_after_prefill",
              "mean_kv_bytes_after_prefill": "mean_kv_held_bytes_after_prefill"}
    for metric, title in BEHAVIOUR.items():
        other = beside.get(metric)
        if other is not None and (other not in table or (table[metric] - table[other]).abs().fillna(0).max() == 0):
            continue
        if metric in table and table[metric].notna().any():
            scale = MIB if units.get(metric) == "MiB" else 1
            out[title] = table[metric].map(lambda v, u=units.get(metric, "%"), s=scale: fmt(v / s, u))
    if "compression acted (% samples)" in out:  # the full cache is the reference: it never compresses
        out.loc[table["method"].to_numpy() == "none", "compression acted (% samples)"] = DASH
    if "kv_mib_at_max_new" in table and table["kv_mib_at_max_new"].notna().any():
        out["KV at max_new_tokens (MiB, bound)"] = table["kv_mib_at_max_new"].map(lambda v: fmt(v, "MiB"))
    return out


def breakdown_tables(summary: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Per task and metric with groups (LongBench-v2 difficulty/length/domain, LCB difficulty, needle depth, AIME
    exam): one row per run (its knobs that vary), one column per group, ``value ± stderr``."""
    tables = []
    groups = sorted(with_config(summary).groupby(["task", "task_config", "metric"], sort=False),
                    key=lambda kv: task_rank(kv[0][0]))
    shares: dict[tuple, list[pd.DataFrame]] = {}
    for (task, config, metric), frame in groups:
        if metric.startswith("mean_") or frame["group"].nunique() < 2:
            continue
        if metric.startswith("share_"):  # outcome shares (LiveCodeBench's verdicts): one table per task, below
            shares.setdefault((task, config), []).append(frame)
            continue
        knobs = [k for k in variant_knobs(frame) if k != "recent" and frame[k].nunique() > 1]
        keys = ["model", "method", "prompt_budget", "recent", *knobs]
        runs = frame.drop_duplicates("run").set_index("run")[keys]
        unit = str(frame["unit"].iloc[0]) if "unit" in frame else ""
        frame = frame.assign(cell=[_cell(v, lo, hi, n, unit) for v, lo, hi, n in zip(
            frame["value"], frame["ci_lo"], frame["ci_hi"], frame["n"])])
        wide = frame.pivot_table(index="run", columns="group", values="cell", aggfunc="first", sort=False)
        groups = [*[g for g in wide.columns if g == "all"], *[g for g in wide.columns if g != "all"]]
        table = runs.join(wide[groups]).sort_values(keys, na_position="first").reset_index(drop=True)
        for key in keys:
            table[key] = table[key].map(fmt)
        unit_text = f" ({unit})" if unit else ""
        tables.append((f"{task_title(task, config)}: {metric}{unit_text} by group, [95% CI] (n per group)",
                       table.fillna(DASH)))
    for (task, config), frames in shares.items():
        tables.append((f"{task_title(task, config)}: outcomes (% of samples) by group", outcome_table(frames)))
    return tables


def outcome_table(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The ``share_<outcome>`` metrics of one task as one table: a row per (run, group), a column per outcome (its
    share of the samples, in percent), ``n`` the samples of the group."""
    frame = pd.concat(frames, ignore_index=True)
    knobs = [k for k in variant_knobs(frame) if k != "recent" and frame[k].nunique() > 1]
    keys = ["model", "method", "prompt_budget", "recent", *knobs]
    runs = frame.drop_duplicates("run").set_index("run")[keys]
    frame = frame.assign(outcome=frame["metric"].str.removeprefix("share_"))
    wide = frame.pivot_table(index=["run", "group"], columns="outcome", values="value", aggfunc="first", sort=False)
    count = frame.groupby(["run", "group"], sort=False)["n"].max()
    table = wide.map(lambda v: fmt(v, "%")).join(count.map(fmt)).reset_index()
    table = runs.join(table.set_index("run")).reset_index(drop=True)
    table["_all"] = table["group"] != "all"
    table = table.sort_values([*keys, "_all", "group"], na_position="first").drop(columns="_all")
    for key in keys:
        table[key] = table[key].map(fmt)
    return table.reset_index(drop=True).fillna(DASH)
