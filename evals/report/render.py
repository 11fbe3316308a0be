"""Writing the report: ``summary_all.csv``, ``plots/``, ``report.md`` and a self-contained ``report.html``."""

from __future__ import annotations

import argparse
import base64
import html
import logging
import sys
from pathlib import Path

import pandas as pd

from evals.report.escape import md_cell
from evals.report.load import collect
from evals.report.paired import paired_deltas
from evals.report.plots import plot
from evals.report.references import reference_table  # issue 29: published references
from evals.report.tables import behaviour_table, breakdown_tables, headline, pivots
from tasks.protocol import hook

log = logging.getLogger("evals.report")

UNITS_NOTE = ("Units: rates (accuracy, pass@k, cons@n, answered, key_prefix, shares) in percent for every task; "
              "± is the standard error and [ ] the 95% interval, both from a bootstrap over items (an item keeps all "
              "its samples); Δ is the paired difference to the full-cache run on the same items, in points, with a "
              "paired-bootstrap 95% interval and a two-sided sign-flip p-value. A dash: the value does not apply.")


def _per_problem_tables(head: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Tasks that provide ``per_problem(rows)`` (AIME): their per-problem table for each run."""
    from tasks import get_task

    tables = []
    for _, run in head.iterrows():
        samples = Path(run["run_dir"]) / "samples.csv"
        try:
            task = get_task(str(run["task"]))
        except (ValueError, ImportError):
            continue
        if hook(task, "per_problem") is not None and samples.is_file():
            rows = pd.read_csv(samples)
            if len(rows):
                budget = "full cache" if pd.isna(run["prompt_budget"]) else f"budget {int(run['prompt_budget'])}"
                tables.append((f"Per problem: {run['label']} @ {budget} ({run['run']})",
                               task.per_problem(rows).fillna("—")))
    return tables


def _sections(root: Path):
    """``(summary, head, [(title, table)], plots)``."""
    summary = collect(root)
    head = headline(summary)
    deltas = paired_deltas(head)
    tables = [*pivots(summary, head, deltas), ("Every run: headline, Δ vs full cache, behaviour",
                                               behaviour_table(head, deltas))]
    tables += breakdown_tables(summary)
    tables += _per_problem_tables(head)
    # issue 29 (begin): published references beside full-cache runs of the paper models (evals/report/references.py)
    references = reference_table(summary)
    if not references.empty:
        tables.insert(0, ("Published references for full-cache runs (ours ± se; published ± se [95% interval])",
                          references))
    # issue 29 (end)
    return summary, head, tables


def _md(df: pd.DataFrame) -> str:
    df = df.copy()
    df.columns = [md_cell(str(c)) for c in df.columns]
    for col in df.columns:
        if not pd.api.types.is_numeric_dtype(df[col]):
            df[col] = df[col].map(md_cell)
    return df.to_markdown(index=False, floatfmt=".4g")


def _html(root: Path, head: pd.DataFrame, tables, plots: list[Path]) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Report: {html.escape(str(root))}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
        "font-size:13px;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "th{background:#f2f2f2}img{max-width:100%;border:1px solid #eee}</style></head><body>",
        f"<h1>Report: {html.escape(str(root))}</h1>",
        f"<p>{head['run'].nunique()} runs.</p><p>{html.escape(UNITS_NOTE)}</p><h2>Figures</h2>",
    ]
    for path in plots:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f"<h3>{html.escape(path.stem)}</h3><img alt='{html.escape(path.stem)}' "
                     f"src='data:image/png;base64,{data}'>")
    for title, table in tables:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(table.to_html(index=False, na_rep="—", border=0))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(root: Path) -> tuple[Path, pd.DataFrame]:
    """Write ``summary_all.csv``, ``plots/``, ``report.md`` and ``report.html`` under ``root``; return the
    markdown report's path and the headline (one row per run)."""
    summary, head, tables = _sections(root)
    summary.drop(columns=["run_dir", "pair_key"]).to_csv(root / "summary_all.csv", index=False)
    plots = plot(head, root / "plots")
    lines = [f"# Report: {root}", "", f"{head['run'].nunique()} runs, {len(summary)} summary rows.", "",
             UNITS_NOTE, "", "## Figures", ""]
    lines += [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    for title, table in tables:
        lines += [f"## {title}", "", _md(table), ""]
    path = root / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    (root / "report.html").write_text(_html(root, head, tables, plots), encoding="utf-8")
    return path, head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("dir", nargs="?", default="results", help="a run directory or a tree of them")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = Path(args.dir)
    try:
        path, head = write_report(root)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cols = ["model", "task", "label", "prompt_budget", "metric", "value", "stderr", "n"]
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 200):
        print(head[cols].rename(columns={"label": "method"}).to_string(index=False, na_rep="—"))
    print(f"\nreport: {path}\nhtml: {root / 'report.html'}\nsummary: {root / 'summary_all.csv'}\nplots: "
          f"{root / 'plots'}")
    return 0
