"""The headline of one run: the lines a run ends with, and ``results.json`` beside its ``summary.csv``.

The headline is the task's report metrics (``REPORT_METRICS``, else its primary metric) on the whole set, each with
its 95% interval and ``ci_method``, the number of items and of samples, the KV cache held (mean peak per sequence,
MiB), the throughput as a system (generated tokens ÷ wall time of generation, with the rows held at once:
:mod:`evals.record.throughput`) beside the mean per-sample latency, and whether the method kept every token of every
sample (then it says "keeps every token (= full cache)": its outputs are the full cache's, whatever its budget;
:mod:`evals.record.geometry`). ``results.json`` has the shape of lm-eval's results file (``results`` -> task ->
``"<metric>,none"`` and ``"<metric>_stderr,none"``, ``n-samples``, ``config``) plus the interval bounds and the cost
figures. Imports no torch.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from evals.analysis.stats import SMALL_N
from evals.record.geometry import keeps_every_token
from evals.record.rundir import RESULTS
from evals.record.throughput import rate_text, throughput

log = logging.getLogger(__name__)

MIB = 1024 * 1024


def _num(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def run_results(run_dir: Path) -> dict[str, Any]:
    """The headline of the run in ``run_dir`` (its ``summary.csv``, ``samples.csv`` and ``meta.json``)."""
    import pandas as pd

    from evals.report.tables import report_metrics

    summary = pd.read_csv(run_dir / "summary.csv")
    meta = json.loads((run_dir / "meta.json").read_text())
    task = str(summary["task"].iloc[0])
    whole = summary[summary["group"] == "all"]
    values = {m: r for m, r in zip(whole["metric"], whole.to_dict("records"))}
    metrics = report_metrics(task, whole)
    samples_path = run_dir / "samples.csv"
    samples = pd.read_csv(samples_path) if samples_path.is_file() else pd.DataFrame()
    n_items = int(samples["item_id"].nunique()) if "item_id" in samples else int(meta.get("n_items") or 0)
    n_rows = len(samples)
    secs = pd.to_numeric(samples["latency_s"], errors="coerce") if "latency_s" in samples else None
    latency = _num(secs.mean()) if secs is not None and secs.notna().any() else None
    kv = _num(values.get("mean_kv_bytes_peak", {}).get("value"))
    config = meta.get("config", {})
    knobs = meta.get("identity", {}).get("compression", {})
    lengths = list(zip(samples["prompt_tokens"], samples["gen_tokens"])) if {"prompt_tokens", "gen_tokens"} <= set(
        samples.columns) else []
    keeps_all = keeps_every_token(knobs, lengths) if isinstance(knobs, dict) else None
    system = throughput(meta)
    entry: dict[str, Any] = {"alias": task}
    for m in metrics:
        r = values[m]
        entry[f"{m},none"] = _num(r["value"])
        entry[f"{m}_stderr,none"] = _num(r.get("stderr"))
        entry[f"{m}_ci_lo,none"] = _num(r.get("ci_lo"))
        entry[f"{m}_ci_hi,none"] = _num(r.get("ci_hi"))
    return {
        "results": {task: entry},
        "metrics": {m: {"value": _num(values[m]["value"]), "ci_lo": _num(values[m].get("ci_lo")),
                        "ci_hi": _num(values[m].get("ci_hi")), "unit": values[m].get("unit") or "",
                        "ci_method": values[m].get("ci_method") if isinstance(values[m].get("ci_method"), str) else "",
                        "n": int(values[m]["n"])} for m in metrics},
        "n-samples": {task: {"original": n_items, "effective": n_rows}},
        "small_n": n_items < SMALL_N,
        "kv_mib_mean_peak": None if kv is None else kv / MIB,
        "keeps_every_token": keeps_all,
        "gen_tokens_per_s": _num(system["tokens_per_s"]),
        "throughput": system,
        "latency_s_mean": latency,
        "config": {"model": config.get("model", {}).get("name"), "task": task, "compression": knobs,
                   "gen": config.get("gen", {}), "fingerprint": meta.get("fingerprint")},
        "run_dir": str(run_dir),
    }


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    return f"{value:.1f}" if unit == "%" else f"{value:.4g}"


def budget_text(method: str, knobs: dict[str, Any]) -> str:
    """`` (budget=512 (cache))``: the method's own budget knob with what it caps (the prompt, or the whole cache:
    ``CompressionMethod.budget_cap``), then ``recent`` and ``ratio`` when set; ``""`` for none of them."""
    from evals.report.references import method_cap  # lazy: pandas
    from snapstream_core.methods import METHODS

    cls = METHODS.get(method)
    own = cls.budget_knob if cls is not None else "prompt_budget"
    cap = method_cap(method)
    shown = [f"{k}={v}" + (f" ({cap})" if k == own and cap in ("prompt", "cache") else "")
             for k, v in knobs.items() if k in (own, "prompt_budget", "recent", "ratio")]
    return f" ({', '.join(shown)})" if shown else ""


def storage_text(knobs: dict[str, Any]) -> str:
    """`` · KV fp8_e4m3/one``: how the run stored K/V when not in the model's dtype (its identity's ``kv_dtype`` and
    ``kv_scale``, absent in the model's dtype); ``""`` otherwise."""
    dtype = knobs.get("kv_dtype")
    if dtype in (None, "auto"):
        return ""
    scale = knobs.get("kv_scale")
    return f" · KV {dtype}" + (f"/{scale}" if scale else "")


def headline_text(res: dict[str, Any]) -> str:
    """The lines a run ends with (see :func:`run_results`)."""
    cfg = res["config"]
    knobs = {k: v for k, v in cfg["compression"].items() if k != "method" and v is not None}
    method = cfg["compression"].get("method", "?")
    head = f"{cfg['task']} · {cfg['model']} · {method}" + budget_text(str(method), knobs) + storage_text(knobs)
    (counts,) = res["n-samples"].values()
    lines = [f"result: {head}"]
    for m, r in res["metrics"].items():
        unit = r["unit"]
        ci = "" if r["ci_lo"] is None else f" [{_fmt(r['ci_lo'], unit)}, {_fmt(r['ci_hi'], unit)}] 95% CI"
        how = f" ({r['ci_method']})" if r["ci_method"] else ""
        lines.append(f"  {m}{' (%)' if unit == '%' else ''}: {_fmt(r['value'], unit)}{ci}{how}")
    cost = [f"{counts['original']} items, {counts['effective']} samples"]
    if res["kv_mib_mean_peak"] is not None:
        cost.append(f"KV held {res['kv_mib_mean_peak']:.2f} MiB (mean peak)")
    if res.get("gen_tokens_per_s") is not None:
        rows = (res.get("throughput") or {}).get("rows")
        rate = rate_text(res["gen_tokens_per_s"])
        cost.append(f"throughput {rate} generated tokens/s (wall time of generation, prefill "
                    f"included, rows held {rows if rows is not None else '?'})")
    if res.get("latency_s_mean") is not None:
        cost.append(f"latency {res['latency_s_mean']:.3g} s per sample (mean)")
    lines.append("  " + " · ".join(cost))
    if res.get("keeps_every_token"):
        lines.append(f"  {method} keeps every token (= full cache): no sample's prompt and generation exceeded what "
                     "it holds, so its outputs are the full cache's")
    if res["small_n"]:
        lines.append(f"  fewer than {SMALL_N} items: a pipeline check, not a finding")
    return "\n".join(lines)


def show_headline(run_dir: Path) -> dict[str, Any] | None:
    """Write ``results.json`` in ``run_dir`` and log the headline; None (and a warning) if it cannot be built."""
    try:
        res = run_results(Path(run_dir))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        log.warning("no headline for %s: %s", run_dir, exc)
        return None
    from evals.record.rundir import write_atomic

    write_atomic(Path(run_dir) / RESULTS, json.dumps(res, indent=2))
    log.info("%s\n  run: %s", headline_text(res), run_dir)
    return res
