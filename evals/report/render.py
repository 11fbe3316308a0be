"""Writing the report: ``summary_all.csv``, ``plots/``, ``report.md`` and a self-contained ``report.html``."""

from __future__ import annotations

import argparse
import base64
import html
import logging
import sys
from pathlib import Path

import pandas as pd

from evals.analysis.stats import SMALL_N
from evals.record.rundir import os_error_line
from evals.report.engines import engine_deltas, engine_table
from evals.report.escape import md_cell, md_text
from evals.report.footprint import inversion_notes, kv_at_max_new
from evals.report.load import collect, identities
from evals.report.output import Batch
from evals.report.paired import paired_deltas, subset_notes
from evals.report.plots import plot
from evals.report.references import budget_text, reference_table
from evals.report.system import system_columns, throughput_table
from evals.report.tables import NOT_MEANINGFUL, behaviour_table, breakdown_tables, headline, pivots, task_title
from tasks.protocol import hook

log = logging.getLogger("evals.report")

UNITS_NOTE = ("Units: rates (accuracy, pass@k, cons@n, answered, key_prefix, shares) in percent for every task, KV "
              "memory in MiB per sequence. [ ] is the 95% interval and n the number of items behind a value: a Wilson "
              "score interval for a rate whose items each score 0 or 100 % (right at 0 and at n); for another rate on "
              "fewer than {small} items, or whose bootstrap collapses to a point, the Wilson interval of its mean over "
              "the items (conservative for items in 0..100 %); else a percentile bootstrap over items (an item keeps "
              "all its samples); summary.csv's ci_method says which, and no interval is ever of zero width "
              f"({NOT_MEANINGFUL} where none can be given). Δ is the "
              "paired difference to the full-cache run on the same items (the values beside it too), in points, with "
              "a paired-bootstrap 95% interval and a two-sided sign-flip p-value; MDE 80% is the smallest true Δ "
              "that a comparison of this paired spread and n detects with 80% power (paired t, two-sided 5%); on "
              "fewer than {small} paired items "
              f"Δ and p are marked {NOT_MEANINGFUL} (not meaningful). Runs of different task configurations are never "
              "in one table, curve or comparison: a task with several is titled with the settings that differ. "
              "Throughput is generated tokens per wall second of generation, with the rows held at once; latency is "
              "per sample. A dash: the value does not apply.").replace("{small}", str(SMALL_N))
UNITS_TITLE = "How to read the numbers"
FIGURES_NOTE = ("Budget plots: one curve per method across its own budget knob (compression.prompt_budget, or "
                "compression.budget for the decode-time methods), with what that budget caps in the legend "
                "(caps prompt: the prompt kept, generated tokens appended; caps cache: the whole cache while "
                "decoding); the full cache is the dashed line with its 95% band. Memory plots: the same runs against "
                "the KV memory they held.")
DELTAS_COLUMNS = ["model", "task", "task_config", "method", "label", "budget", "metric", "unit", "value",
                  "reference", "delta", "ci_low", "ci_high", "p_value", "n_items", "n_run", "n_reference", "subset",
                  "meaningful", "n_acted", "value_acted", "reference_acted", "delta_acted",
                  "gen_tokens_change", "mde_80", "comparison", "run", "reference_run"]
UNLIKE_TITLE = "Not compared: made or graded by different code"
UNLIKE_NOTE = ("A Δ compares two runs only when the same code generated and graded both (each row's generation_id "
               "and grading_id); these pairs are left out of every Δ, and their values stand alone in the tables.")
ENGINES_TITLE = ("Engines side by side (full cache): an engine comparison, other backend − hf, paired on the same "
                 "items; its generating code differs by design, so it is not a method's Δ")


def engine_rows(head: pd.DataFrame, engines: pd.DataFrame) -> list[dict]:
    """``deltas.csv`` rows of the engine comparison (:mod:`evals.report.engines`): ``comparison`` is
    ``engine: <backend> − <backend>``, ``method`` the full cache's."""
    values = head.set_index("run")
    return [{**_pair_row(values.loc[e["run"]], e), "comparison": f"engine: {e['backend']} − {e['ref_backend']}"}
            for _, e in engines.iterrows()]


def _pair_row(run: pd.Series, d: pd.Series) -> dict:
    """The columns of a ``deltas.csv`` row that every comparison has: the run's settings (``run``: its headline
    row), the paired values, Δ with its interval and p, the counts and the two run directories."""
    return {"model": run["model"], "task": run["task"], "task_config": run.get("task_config", ""),
            "method": run["method"], "label": run["label"], "budget": run["prompt_budget"],
            "metric": run["metric"], "unit": run["unit"], "value": d["value_paired"],
            "reference": d["reference_paired"], "delta": d["delta"], "ci_low": d["delta_ci_lo"],
            "ci_high": d["delta_ci_hi"], "p_value": d["p_value"], "n_items": int(d["n_paired"]),
            "n_run": int(d["n_run"]), "n_reference": int(d["n_reference"]), "subset": bool(d["subset"]),
            "meaningful": bool(d["n_paired"] >= SMALL_N), "run": d["run"], "reference_run": d["reference"]}


def deltas_table(head: pd.DataFrame, deltas: pd.DataFrame, engines: pd.DataFrame | None = None) -> pd.DataFrame:
    """``deltas.csv``: one row per compressed run with a full-cache reference, i.e. per (model, task, task
    configuration, method, budget, metric) of the headline. ``value``, ``reference`` and Δ (with its paired 95%
    interval and sign-flip p-value) are on the same ``n_items`` paired items; ``n_run`` and ``n_reference`` are
    each run's own items and ``subset`` says the pairing has fewer than either; ``meaningful``: n reaches SMALL_N;
    ``delta_acted`` is Δ on the ``n_acted`` items where the method dropped a token (``value_acted`` and
    ``reference_acted`` the two runs' scores on them); ``gen_tokens_change`` the mean
    generated tokens per item, run − full cache; ``mde_80`` the smallest true difference the comparison
    detects with 80% power (:func:`evals.analysis.power.mde_80`); ``comparison`` is ``method`` (run − its
    full cache) or, for the rows of ``engines``, ``engine: vllm − hf`` (:func:`engine_rows`); ``run`` and
    ``reference_run`` the two run directories."""
    extra = engine_rows(head, engines) if engines is not None and len(engines) else []
    if deltas.empty and not extra:
        return pd.DataFrame(columns=DELTAS_COLUMNS)
    values = head.set_index("run")
    rows = [{**_pair_row(values.loc[d["run"]], d), "n_acted": int(d["n_acted"]), "value_acted": d["value_acted"],
             "reference_acted": d["reference_acted"], "delta_acted": d["delta_acted"],
             "gen_tokens_change": d["gen_tokens_change"], "mde_80": d["mde_80"], "comparison": "method"}
            for _, d in deltas.iterrows()]
    return pd.DataFrame(rows + extra, columns=DELTAS_COLUMNS)


def _runs_by_n(ns: pd.Series) -> str:
    """``1 run at n=6`` or ``3 runs at n=6, 1 at n=2``: every small run's n, not one per task."""
    counts = pd.to_numeric(ns, errors="coerce").fillna(0).astype(int).value_counts().sort_index(ascending=False)
    parts = [f"{c} at n={n}" for n, c in counts.items()]
    first_count = int(counts.iloc[0])
    parts[0] = f"{first_count} run{'s' if first_count != 1 else ''} at n={counts.index[0]}"
    return ", ".join(parts)


def small_n_banner(head: pd.DataFrame) -> str | None:
    """The pipeline-check banner when some run has fewer than SMALL_N items (None otherwise)."""
    small = head[pd.to_numeric(head["n"], errors="coerce").fillna(0) < SMALL_N]
    if small.empty:
        return None
    tasks = ", ".join(f"{t} ({_runs_by_n(small[small['task'] == t]['n'])})" for t in dict.fromkeys(small["task"]))
    return (f"> **Pipeline check.** {len(small)} of {len(head)} runs have fewer than {SMALL_N} items: {tasks}. "
            "Their numbers show that the pipeline runs end to end, not how compression performs; read their "
            f"intervals; their Δ and p are marked {NOT_MEANINGFUL} (not meaningful)")


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
                budget = ("full cache" if pd.isna(run["prompt_budget"])
                          else f"budget {budget_text(run['prompt_budget'], run['method'])}")
                tables.append((f"Per problem: {run['label']} @ {budget} ({run['run']})",
                               task.per_problem(rows).fillna("—")))
    return tables


def _sections(root: Path):
    """``(summary, head, [(title, table)], deltas, engines, unlike, n_answer)``: ``unlike`` one line per pair of runs
    left out of Δ because different code made or graded them (:mod:`evals.report.likeness`); the first ``n_answer``
    tables are the answer (the published references, then each method × budget table with Δ vs the full cache),
    shown before the units note."""
    summary = collect(root)
    head = headline(summary)
    head["kv_mib_at_max_new"] = kv_at_max_new(head)
    head = head.join(system_columns(head))
    unlike: list[str] = []
    deltas = paired_deltas(head, notes=unlike)
    engines = engine_deltas(head, notes=unlike)
    answer = pivots(summary, head, deltas)
    tables = [*answer, ("Every run: headline, Δ vs full cache (on all items and where "
                                               "compression acted), behaviour, throughput",
                                               behaviour_table(head, deltas))]
    if not engines.empty:
        tables.insert(len(tables) - 1, (ENGINES_TITLE, engine_table(head, engines)))
    speed = throughput_table(head)
    if not speed.empty:
        tables.append(("Throughput at equal memory: generated tokens per wall second of generation, with the rows "
                       "held, beside the latency of one sample", speed))
    tables += breakdown_tables(summary)
    tables += _per_problem_tables(head)
    references = reference_table(summary, identities(summary))  # published figures of the paper models
    if not references.empty:
        tables.insert(0, ("Published references (ours ± se [95% CI]; published ± se [95% interval]; "
                          "setup: ours (published))", references))
    n_answer = len(answer) + int(not references.empty)
    return summary, head, tables, deltas, engines, unlike, n_answer


def _md(df: pd.DataFrame) -> str:
    df = df.copy()
    df.columns = [md_cell(str(c)) for c in df.columns]
    for col in df.columns:
        if not pd.api.types.is_numeric_dtype(df[col]):
            df[col] = df[col].map(md_cell)
    return df.to_markdown(index=False, floatfmt=".4g")


def figure_title(path: Path) -> str:
    """``frontier__needle__smollm2_135m.png`` -> ``needle · smollm2_135m: accuracy vs KV memory held``."""
    kind, _, rest = path.stem.partition("__")
    task, _, model = rest.partition("__")
    task = task.replace("~", " ")
    what = {"frontier": "accuracy vs KV memory held", "budget": "accuracy vs each method's budget"}.get(kind, kind)
    return f"{task} · {model}: {what}"


def _html(root: Path, head: pd.DataFrame, tables, plots: list[Path], notes: list[str] = (), n_answer: int = 0) -> str:
    """The report as one page: the figures and the answer tables first, then the units note, then the rest."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Report: {html.escape(str(root))}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
        "font-size:13px;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "th{background:#f2f2f2}img{max-width:100%;border:1px solid #eee}.scroll{overflow-x:auto;max-width:100%}"
        "</style></head><body>",
        f"<h1>Report: {html.escape(str(root))}</h1>",
        f"<p>{head['run'].nunique()} runs.</p>",
        *[f"<p><b>{html.escape(n.lstrip('> ').replace('**', ''))}</b></p>" for n in notes if n],
        "<h2>Figures</h2>",
    ]
    for path in plots:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        title = html.escape(figure_title(path))
        parts.append(f"<h3>{title}</h3><img alt='{title}' src='data:image/png;base64,{data}'>")
    for i, (title, table) in enumerate(tables):
        if i == n_answer:
            parts.append(f"<h2>{UNITS_TITLE}</h2><p>{html.escape(UNITS_NOTE)}</p>")
        parts.append(f"<h2>{html.escape(title)}</h2>")
        # a wide table (the "Every run" one has 22 columns) scrolls inside its own box, the page keeps its width
        parts.append(f"<div class='scroll'>{table.to_html(index=False, na_rep='—', border=0)}</div>")
    if n_answer >= len(tables):
        parts.append(f"<h2>{UNITS_TITLE}</h2><p>{html.escape(UNITS_NOTE)}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


COPIED_NOTE = ("Their method kept every prompt and new token of every item, so its tokens are the full cache's by "
               "construction: the run's rows are the full-cache run's (measured columns included), not a second "
               "measurement.")


def copied_notes(summary: pd.DataFrame) -> list[str]:
    """One line per run whose rows were copied from its full-cache run (``same_as``, evals/execute/alias.py)."""
    if "same_as" not in summary.columns:
        return []
    pairs = summary.dropna(subset=["same_as"])[["run", "same_as"]].drop_duplicates()
    return [f"{run} = {src}" for run, src in pairs.itertuples(index=False)]


def write_report(root: Path) -> tuple[Path, pd.DataFrame]:
    """Write ``summary_all.csv``, ``plots/``, ``report.md`` and ``report.html`` under ``root``; return the
    markdown report's path and the headline (one row per run)."""
    summary, head, tables, deltas, engines, unlike, n_answer = _sections(root)
    plots = plot(head, root / "plots")
    banner = small_n_banner(head)
    notes = inversion_notes(head)
    copied = copied_notes(summary)
    subsets = subset_notes(deltas, head)
    lines = [f"# Report: {md_text(root)}", "", f"{head['run'].nunique()} runs, {len(summary)} summary rows.", ""]
    lines += [banner, ""] if banner else []
    lines += ["## Figures", "", FIGURES_NOTE, ""]
    lines += [f"![{md_text(figure_title(p))}](plots/{p.name})" for p in plots] + [""]
    for title, table in tables[:n_answer]:  # the answer: each method at each budget, Δ vs the full cache
        lines += [f"## {md_text(title)}", "", _md(table), ""]
    lines += [f"## {UNITS_TITLE}", "", UNITS_NOTE, ""]
    if unlike:
        lines += [f"## {UNLIKE_TITLE}", "", UNLIKE_NOTE, ""]
        lines += [f"- {md_text(n)}" for n in unlike] + [""]
    if notes:
        lines += ["## Why a compressed run can hold more KV than the full cache", ""]
        lines += [f"- {md_text(n)}" for n in notes] + [""]
    if copied:
        lines += ["## Runs not generated: rows copied from the full cache", "", COPIED_NOTE, ""]
        lines += [f"- {md_text(n)}" for n in copied] + [""]
    if subsets:
        lines += ["## Paired on fewer items than a run scored", ""]
        lines += [f"- {md_text(n)}" for n in subsets] + [""]
    for title, table in tables[n_answer:]:
        lines += [f"## {md_text(title)}", "", _md(table), ""]
    path = root / "report.md"
    page = _html(root, head, tables, plots, [banner or "", *unlike, *notes, *copied, *subsets], n_answer)
    internal = ["run_dir", "pair_key", "engine_key", "task_settings", "run_settings"]
    summary_all = summary.drop(columns=internal, errors="ignore").to_csv(index=False)
    with Batch() as batch:  # all four in place, or (a full disk) the earlier four as they were
        batch.write(root / "summary_all.csv", summary_all)
        batch.write(root / "deltas.csv", deltas_table(head, deltas, engines).to_csv(index=False))
        batch.write(path, "\n".join(lines))
        batch.write(root / "report.html", page)
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
    except OSError as exc:  # a full or read-only disk, a folder not ours: one line, the earlier report kept whole
        print(f"error: {os_error_line(exc, root)}", file=sys.stderr)
        return 2
    table = pd.DataFrame({
        "model": head["model"], "task": [task_title(t, c) for t, c in zip(head["task"], head["task_config"])],
        "method": head["label"],
        "budget": [budget_text(b, m) for b, m in zip(head["prompt_budget"], head["method"])],
        "metric": head["metric"] + head["unit"].map(lambda u: f" ({u})" if u else ""),
        "value [95% CI]": [f"{v:.1f} [{lo:.1f}, {hi:.1f}]" if u == "%" and pd.notna(lo) else f"{v:.4g}"
                           for v, lo, hi, u in zip(head["value"], head["ci_lo"], head["ci_hi"], head["unit"])],
        "n": head["n"].map(lambda n: str(int(n))),
    })
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 200):
        print(table.to_string(index=False))
    banner = small_n_banner(head)
    if banner:
        print("\n" + banner.lstrip("> ").replace("**", ""))
    print(f"\nreport: {path}\nhtml: {root / 'report.html'}\nsummary: {root / 'summary_all.csv'}\ndeltas: "
          f"{root / 'deltas.csv'}\nplots: {root / 'plots'}")
    return 0
