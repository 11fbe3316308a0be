"""``python -m evals.report [DIR]``: every ``summary.csv`` under DIR -> ``summary_all.csv``, ``report.md``, ``plots/``.

Plots show each task's primary metric against the KV budget (``prompt_budget``; for StreamingLLM the whole
``sinks + recent`` footprint), one line per method (and per variant of its other knobs), with the full cache as a
horizontal reference line.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pandas as pd

from evals.summary import IDENTITY_EXTRA

log = logging.getLogger("evals.report")

VARIANT_KNOBS = ["window", "kernel", "pooling", "gqa_agg", "sinks", "recent", "positions"]


def collect(root: Path) -> pd.DataFrame:
    """All summary rows under ``root`` (a run directory or a tree of them)."""
    files = sorted(p for p in root.rglob("summary.csv") if p.name == "summary.csv")
    if not files:
        raise ValueError(f"DIR: no summary.csv under {root}")
    frames = [pd.read_csv(f) for f in files]
    return pd.concat(frames, ignore_index=True)


def primary_metric(task: str, frame: pd.DataFrame) -> str:
    """The task module's ``PRIMARY_METRIC``, else the first metric it reports."""
    try:
        from tasks import get_task

        metric = getattr(get_task(task), "PRIMARY_METRIC", None)
    except (ValueError, ImportError, TypeError):
        metric = None
    metrics = list(dict.fromkeys(frame["metric"]))
    return metric if metric in metrics else metrics[0]


def _fmt(value) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _label(row: pd.Series, varying: list[str]) -> str:
    extra = ", ".join(f"{k}={_fmt(row[k])}" for k in varying)
    return f"{row['method']} ({extra})" if extra else str(row["method"])


def _variant_knobs(method: str) -> list[str]:
    """Knobs that tell lines of one method apart (StreamingLLM's `recent` follows its budget)."""
    return [k for k in VARIANT_KNOBS if not (method == "streaming_llm" and k == "recent")]


def headline(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its task's primary metric on the whole set, with the run's knobs."""
    rows = []
    for task, frame in summary.groupby("task", sort=False):
        metric = primary_metric(task, frame)
        sel = frame[(frame["metric"] == metric) & (frame["group"] == "all")]
        rows.append(sel.assign(metric=metric))
    out = pd.concat(rows, ignore_index=True)
    cols = ["model", "task", "method", "prompt_budget", "recent", *[k for k in IDENTITY_EXTRA if k != "run_id"]]
    out = out[[*cols, "metric", "value", "n", "run_id"]]
    return out.sort_values(["model", "task", "method", "prompt_budget"], na_position="first").reset_index(drop=True)


def plot(head: pd.DataFrame, out_dir: Path) -> list[Path]:
    """accuracy vs KV budget per (task, model): ``plots/<task>__<model>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for (task, model), frame in head.groupby(["task", "model"], sort=False):
        fig, ax = plt.subplots(figsize=(8, 4.2))
        full = frame[frame["method"] == "none"]["value"]
        compressed = frame[frame["method"] != "none"]
        styles = iter([("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--")] * 4)
        for method, part in compressed.groupby("method", sort=False):
            varying = [k for k in _variant_knobs(method) if part[k].nunique(dropna=False) > 1]
            keys = part[varying].astype(str).agg("|".join, axis=1) if varying else pd.Series("", index=part.index)
            for _, line in part.groupby(keys, sort=False):
                line = line.sort_values("prompt_budget")
                marker, style = next(styles)
                ax.plot(line["prompt_budget"], line["value"], marker=marker, linestyle=style, alpha=0.85,
                        label=_label(line.iloc[0], varying))
        if len(full):
            ax.axhline(full.mean(), color="black", linestyle="--", label="full cache (none)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("KV budget per layer and KV head\n(prompt_budget; StreamingLLM: sinks + recent)")
        ax.set_ylabel(frame["metric"].iloc[0])
        ax.set_title(f"{task} · {model}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        path = out_dir / f"{task}__{model}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def breakdown_tables(summary: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Per task and metric: one row per run (its knobs that vary), one column per group (all, difficulty=..., ...)."""
    tables = []
    for (task, metric), frame in summary.groupby(["task", "metric"], sort=False):
        if metric.startswith("mean_") or frame["group"].nunique() < 2:
            continue
        knobs = [k for k in VARIANT_KNOBS if k != "recent" and frame[k].nunique() > 1]
        keys = ["model", "method", "prompt_budget", "recent", *knobs]
        runs = frame.drop_duplicates("run_id").set_index("run_id")[keys]
        wide = frame.pivot_table(index="run_id", columns="group", values="value", aggfunc="first", sort=False)
        groups = [*[g for g in wide.columns if g == "all"], *[g for g in wide.columns if g != "all"]]
        table = runs.join(wide[groups]).sort_values(keys, na_position="first")
        tables.append((f"{task}: {metric}", table.reset_index(drop=True)))
    return tables


def per_problem_tables(root: Path) -> list[tuple[str, pd.DataFrame]]:
    """Tasks that provide ``per_problem(rows)`` (AIME): their per-problem table for each run."""
    from tasks import get_task

    tables = []
    for samples in sorted(root.rglob("samples.csv")):
        rows = pd.read_csv(samples)
        if rows.empty:
            continue
        try:
            task = get_task(str(rows["task"].iloc[0]))
        except (ValueError, ImportError):
            continue
        if hasattr(task, "per_problem"):
            tables.append((str(rows["run_id"].iloc[0]), task.per_problem(rows)))
    return tables


def _md(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False, floatfmt=".4g")


def write_report(root: Path) -> tuple[Path, pd.DataFrame]:
    """Write ``summary_all.csv``, ``plots/`` and ``report.md`` under ``root``; return the report's path and headline."""
    summary = collect(root)
    summary.to_csv(root / "summary_all.csv", index=False)
    head = headline(summary)
    plots = plot(head, root / "plots")
    lines = [f"# Report: {root}", "", f"{head['run_id'].nunique()} runs, {len(summary)} summary rows.", ""]
    lines += ["## Primary metric per run", "", _md(head.drop(columns=["run_id"])), ""]
    lines += ["## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    for title, table in breakdown_tables(summary):
        lines += [f"## {title}", "", _md(table), ""]
    for run_id, table in per_problem_tables(root):
        lines += [f"## Per problem: {run_id}", "", _md(table), ""]
    path = root / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path, head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default="results", help="a run directory or a tree of them")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = Path(args.dir)
    try:
        path, head = write_report(root)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 200):
        print(head[["model", "task", "method", "prompt_budget", "recent", "metric", "value", "n"]].to_string(index=False))
    print(f"\nreport: {path}\nsummary: {root / 'summary_all.csv'}\nplots: {root / 'plots'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
