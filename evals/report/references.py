"""Published references beside our runs: does the setup reproduce the paper, before and after compression?

The figures live in one data file, ``evals/report/references.yaml``, one entry per number with its source. An entry is
set beside a summary row with the same ``model``, ``task``, ``metric``, ``group`` and ``method`` (default ``none``, the
full cache). A compressed entry states its ``budget`` (KV entries per layer and KV head; the key ``prompt_budget`` is
read as the same field) and its ``cap``, what that budget bounds (:data:`snapstream_core.methods.base.BUDGET_CAPS`:
``prompt``, the prompt's entries with every generated token appended; ``cache``, the whole cache while decoding); our
run's cap is its method's ``CompressionMethod.budget_cap``. Only the same budget and the same cap compare: otherwise the
row is **not comparable**, with the reason (a figure at 512 whole-cache entries says nothing about 512 prompt entries,
which on a short prompt keep every token). The published figures store K/V in the model's dtype: a run stored
quantized (``kv_dtype=fp8_e4m3``) is listed as not comparable, with its storage. Models are matched by their config
name, so the smoke models never match.
Rates are compared in percent: the unit ``evals.analysis.summary`` writes (``%``), or a row without a unit.

Protocol. An entry's ``protocol`` names settings that change *what* the figure measures (LongBench-v2 with or without
chain of thought), as dotted paths into the run's identity (``meta.json``). A run whose setting differs, or that has
no identity to say, is listed as **not comparable**, with the setting, and gets no Δ. An entry's ``setup`` names
settings that change the noise or the conditions (samples per problem, temperature, top-p, max new tokens, template,
how the budget applies); they are shown beside our interval as a diff, never used to drop a comparison.

Uncertainty. A published figure comes without its own error; we give it the largest standard error a mean over
``n_items`` per-item rates in 0..1 can have, ``sqrt(p (1 - p) / n_items)`` (exact for one sample per item; an upper
bound with several, which average the sampling noise out), and the Wilson 95% interval of a proportion ``p`` on
``n_items`` (:func:`evals.analysis.stats.bounded_rate_interval`: inside 0..100, of non-zero width at 0 and 100,
conservative for items averaged over samples). Ours is the run's ``stderr`` (over items). The two differ significantly
when ``|ours - published| > 1.96 * sqrt(se_ours^2 + se_published^2)``: such a row is flagged ``outside``. A run over
fewer items than the reference (``task.limit``, another window) is compared but marked ``subset``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from evals.analysis.stats import bounded_rate_interval

REFERENCES_FILE = Path(__file__).with_name("references.yaml")
Z95 = 1.959963984540054
KEYS = ("model", "task", "metric", "group")
# what evals.analysis.summary writes for a rate; "percent" and "" from older summaries
RATE_UNITS = ("%", "percent", "")
# setup key -> dotted path into the run's identity (meta.json); "template" is looked up by the model's family
SETUP_PATHS = {"samples": "gen.n_samples", "temperature": "gen.temperature", "top_p": "gen.top_p",
               "max_new_tokens": "gen.max_new_tokens"}
CAPS = ("none", "prompt", "cache")  # snapstream_core.methods.base.BUDGET_CAPS, as the yaml may spell them
COLUMNS = ["model", "task", "method", "prompt_budget", "cap", "ref_budget", "ref_cap", "metric", "group", "value",
           "stderr", "n", "reference",
           "ref_stderr", "ref_ci_lo", "ref_ci_hi", "ref_n_items", "ref_samples", "delta", "z", "outside", "subset",
           "comparable", "not_comparable", "setup_diff", "source", "run"]
MISSING = object()


def load_references(path: str | Path = REFERENCES_FILE) -> pd.DataFrame:
    """The reference entries as a frame (one row per published number); ``ValueError`` naming the file and entry
    when one lacks a field, has a value outside 0..100, a compressed entry without ``budget`` and ``cap`` (or an
    unknown cap), or a ``protocol``/``setup`` that is not a mapping."""
    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    entries = data.get("references")
    if not isinstance(entries, list):
        raise ValueError(f"{path}: a top-level 'references' list is required")
    fields = (*KEYS, "value", "n_items", "samples", "source")
    out = []
    for i, entry in enumerate(entries):
        missing = [f for f in fields if not isinstance(entry, dict) or f not in entry]
        if missing:
            raise ValueError(f"{path}: entry {i}: missing {', '.join(missing)}")
        if not 0 <= float(entry["value"]) <= 100 or int(entry["n_items"]) < 1:
            raise ValueError(f"{path}: entry {i}: value must be in 0..100 and n_items >= 1")
        for key in ("protocol", "setup"):
            if not isinstance(entry.get(key, {}), dict):
                raise ValueError(f"{path}: entry {i}: {key} must be a mapping")
        method = str(entry.get("method", "none"))
        budget, cap = entry.get("budget", entry.get("prompt_budget")), entry.get("cap", "none" if method == "none"
                                                                                 else None)
        if "budget" in entry and "prompt_budget" in entry and entry["budget"] != entry["prompt_budget"]:
            raise ValueError(f"{path}: entry {i}: budget and prompt_budget (the same field) differ")
        if method != "none" and (budget is None or cap not in CAPS[1:]):
            raise ValueError(f"{path}: entry {i}: a compressed entry needs budget (KV entries) and cap "
                             f"(prompt or cache: what the budget bounds), got budget {budget!r}, cap {cap!r}")
        if method == "none" and (cap != "none" or budget is not None):
            raise ValueError(f"{path}: entry {i}: a full-cache entry (method none) has no budget and cap none")
        out.append({**{f: entry[f] for f in fields}, "method": method,
                    "budget": math.nan if budget is None else float(budget), "cap": str(cap),
                    "protocol": dict(entry.get("protocol") or {}), "setup": dict(entry.get("setup") or {})})
    return pd.DataFrame(out, columns=[*fields, "method", "budget", "cap", "protocol", "setup"])


def method_cap(method: str) -> str:
    """What ``method``'s budget bounds (``CompressionMethod.budget_cap``); ``unknown`` for a method not in this
    code's registry (a summary written by other code)."""
    from snapstream_core.methods import METHODS

    cls = METHODS.get(str(method))
    return str(cls.budget_cap) if cls is not None else "unknown"


def budget_mismatch(budget: float, cap: str, ref_budget: float, ref_cap: str) -> str:
    """Empty when our budget and cap are the reference's; else why the two are not comparable."""
    if cap != ref_cap:
        return (f"budget caps {_cap_words(cap)} here, {_cap_words(ref_cap)} in the published figure "
                f"(ours {_budget(budget)}, published {_budget(ref_budget)})")
    if not (budget == ref_budget or (math.isnan(budget) and math.isnan(ref_budget))):
        return f"budget: ours {_budget(budget)}, published {_budget(ref_budget)}"
    return ""


def _cap_words(cap: str) -> str:
    return {"none": "nothing (full cache)", "prompt": "the prompt", "cache": "the whole cache while decoding"}.get(
        cap, f"{cap!r} (not a method of this code)")


def _budget(budget: float) -> str:
    return "none" if math.isnan(budget) else str(int(budget))


def budget_text(budget: float, method: str) -> str:
    """``512 (prompt)``: a budget with what it caps for ``method``; ``full`` without a budget."""
    return "full" if math.isnan(_float(budget)) else f"{int(budget)} ({method_cap(method)})"


def budget_label(method: str, budget: float, cap: str | None = None) -> str:
    """``snapkv @ 512 (prompt)``: a method with its budget and what the budget caps; ``none`` for the full cache."""
    if method == "none" or math.isnan(_float(budget)):
        return method
    return f"{method} @ {int(budget)} ({cap or method_cap(method)})"


def published_stderr(value: float, n_items: int) -> float:
    """The largest standard error (in points) of a percentage ``value`` averaged over ``n_items`` items."""
    p = min(max(value / 100.0, 0.0), 1.0)
    return 100.0 * math.sqrt(p * (1.0 - p) / n_items)


def lookup(identity: dict | None, path: str) -> Any:
    """The value at dotted ``path`` (``task.cot``) in ``identity``; :data:`MISSING` when absent."""
    node: Any = identity
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def protocol_mismatch(protocol: dict, identity: dict | None) -> str:
    """Empty when the run's identity has every ``protocol`` setting; else why it is not comparable."""
    if not protocol:
        return ""
    if not isinstance(identity, dict):
        return "protocol unknown (no meta.json): " + ", ".join(f"{k}={_show(v)}" for k, v in protocol.items())
    diffs = []
    for path, wanted in protocol.items():
        ours = lookup(identity, path)
        if ours is MISSING or ours != wanted:
            diffs.append(f"{path}: ours {'unknown' if ours is MISSING else _show(ours)}, published {_show(wanted)}")
    return "; ".join(diffs)


def setup_diff(setup: dict, identity: dict | None) -> str:
    """``key ours (published)`` for each ``setup`` setting that differs from the run's, ``=`` for those that agree;
    ``?`` where the source does not state it or the run has no identity."""
    parts = []
    for key, theirs in setup.items():
        ours = _setup_value(key, identity)
        if theirs is None:
            parts.append(f"{key} (not stated)" if key == "template" else f"{key} {_show(ours)} (not stated)")
        elif key == "template":
            same = isinstance(ours, str) and str(theirs) in ours
            parts.append("template =" if same else f"template differs (published: {theirs!r})")
        elif ours == theirs:
            parts.append(f"{key} =")
        else:
            parts.append(f"{key} {_show(ours)} ({_show(theirs)})")
    return "; ".join(parts)


def _setup_value(key: str, identity: dict | None) -> Any:
    if key == "template":
        family = lookup(identity, "model.family")
        return lookup(identity, f"task.templates.{family}") if isinstance(family, str) else MISSING
    if key == "budget":
        knobs = lookup(identity, "compression")
        if not isinstance(knobs, dict):
            return MISSING
        return ", ".join(f"{k}={v}" for k, v in knobs.items() if k != "method" and v is not None) or "full cache"
    path = SETUP_PATHS.get(key)
    return lookup(identity, path) if path else MISSING


def _show(value: Any) -> str:
    if value is MISSING:
        return "?"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def reference_rows(summary: pd.DataFrame, references: pd.DataFrame | None = None,
                   identities: dict[str, dict] | None = None) -> pd.DataFrame:
    """One row per (summary row, matching reference): our ``value``/``stderr``/``n`` beside the published
    ``reference`` with ``ref_stderr`` and its 95% interval, ``delta`` (ours - published, points), ``z``, the flags
    ``outside`` and ``subset``, ``comparable`` (False: ``not_comparable`` says which protocol setting differs, and
    ``delta``/``z`` are NaN), the ``setup_diff`` and the reference's ``source``.

    ``summary`` has the columns of ``summary_all.csv`` (``model, task, method, metric, group, value``; ``stderr``,
    ``n``, ``unit``, ``prompt_budget`` and ``run`` when present). ``identities``: ``run -> meta.json identity``
    (:func:`evals.report.load.identities`). Empty (with :data:`COLUMNS`) when nothing matches."""
    refs = load_references() if references is None else references
    identities = identities or {}
    if summary.empty or "method" not in summary.columns:
        return pd.DataFrame(columns=COLUMNS)
    ours = summary
    if "unit" in ours.columns:  # rates only: a fraction-valued or unit-less metric is not comparable
        ours = ours[ours["unit"].fillna("").astype(str).isin(RATE_UNITS)]
    if ours.empty:
        return pd.DataFrame(columns=COLUMNS)
    if "prompt_budget" not in ours.columns:
        ours = ours.assign(prompt_budget=math.nan)
    from evals.report.reference import AUTO, kv_dtype

    ours = ours.assign(**{k: ours[k].astype(str) for k in (*KEYS, "method")}, _kv_dtype=kv_dtype(ours))
    refs = refs.assign(**{k: refs[k].astype(str) for k in (*KEYS, "method")})
    merged = ours.merge(refs.rename(columns={"value": "reference", "n_items": "ref_n_items", "samples": "ref_samples",
                                             "budget": "ref_budget", "cap": "ref_cap"}),
                        on=[*KEYS, "method"], how="inner")
    rows = []
    for _, r in merged.iterrows():
        budget, ref_budget = _float(r.get("prompt_budget")), _float(r.get("ref_budget"))
        cap = method_cap(r["method"])
        identity = identities.get(str(r.get("run", "")))
        storage = (f"K/V stored as {r['_kv_dtype']} here, in the model's dtype in the published figure"
                   if r["_kv_dtype"] != AUTO else "")
        why = "; ".join(w for w in (budget_mismatch(budget, cap, ref_budget, str(r["ref_cap"])),
                                    protocol_mismatch(r["protocol"], identity), storage) if w)
        ref_n = int(r["ref_n_items"])
        ref_se = published_stderr(float(r["reference"]), ref_n)
        ref_lo, ref_hi = bounded_rate_interval(float(r["reference"]) / 100.0, ref_n)
        se = _float(r.get("stderr"))
        delta = float(r["value"]) - float(r["reference"]) if not why else math.nan
        spread = math.sqrt(ref_se ** 2 + (se if math.isfinite(se) else 0.0) ** 2)
        z = delta / spread if spread > 0 and not why else math.nan
        n = _float(r.get("n"))
        rows.append({
            **{k: r[k] for k in KEYS}, "method": r["method"], "prompt_budget": budget, "cap": cap,
            "ref_budget": ref_budget, "ref_cap": str(r["ref_cap"]),
            "value": float(r["value"]), "stderr": se, "n": n,
            "reference": float(r["reference"]), "ref_stderr": ref_se,
            "ref_ci_lo": 100.0 * ref_lo, "ref_ci_hi": 100.0 * ref_hi,
            "ref_n_items": ref_n, "ref_samples": int(r["ref_samples"]), "delta": delta, "z": z,
            "outside": bool(math.isfinite(z) and abs(z) > Z95),
            "subset": bool(math.isfinite(n) and n < ref_n),
            "comparable": not why, "not_comparable": why, "setup_diff": setup_diff(r["setup"], identity),
            "source": str(r["source"]), "run": r.get("run", ""),
        })
    return pd.DataFrame(rows, columns=COLUMNS)


def reference_table(summary: pd.DataFrame, identities: dict[str, dict] | None = None,
                    references: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`reference_rows` formatted for the report: ``ours ± se [95% CI]`` beside ``published [Wilson 95%] (n,
    budget (cap))``, Δ, a check (within / OUTSIDE / NOT COMPARABLE), the setup diff, the source. ``references``:
    the entries (default: :func:`load_references`)."""
    rows = reference_rows(summary, references, identities)
    if rows.empty:
        return pd.DataFrame()

    def check(r: Any) -> str:
        if not r["comparable"]:
            return f"NOT COMPARABLE: {r['not_comparable']}"
        marks = (["OUTSIDE the published interval"] if r["outside"] else ["within"]) + (
            [f"subset: {int(r['n'])} of {r['ref_n_items']} items"] if r["subset"] else [])
        return "; ".join(marks)

    ci = _our_interval(summary, rows)
    return pd.DataFrame({
        "model": rows["model"], "task": rows["task"],
        "method": [budget_label(m, b, c) for m, b, c in zip(rows["method"], rows["prompt_budget"], rows["cap"])],
        "metric": rows["metric"], "group": rows["group"],
        "ours": [_pm(v, s) + c for v, s, c in zip(rows["value"], rows["stderr"], ci)],
        "published": [f"{v:.1f} [{lo:.1f}, {hi:.1f}] (n {n}" + (f", {_budget(b)} ({c})" if c != "none" else "") + ")"
                      for v, lo, hi, n, b, c in zip(rows["reference"], rows["ref_ci_lo"], rows["ref_ci_hi"],
                                                    rows["ref_n_items"], rows["ref_budget"], rows["ref_cap"])],
        "Δ": ["—" if not math.isfinite(d) else f"{d:+.1f}" for d in rows["delta"]],
        "check": [check(r) for _, r in rows.iterrows()],
        "setup: ours (published)": rows["setup_diff"].replace("", "—"),
        "source": rows["source"], "run": rows["run"],
    })


def _our_interval(summary: pd.DataFrame, rows: pd.DataFrame) -> list[str]:
    """`` [lo, hi]`` of our value from the summary's ``ci_lo``/``ci_hi`` (empty when it has none)."""
    if not {"ci_lo", "ci_hi", "run"} <= set(summary.columns):
        return [""] * len(rows)
    key = summary.assign(**{k: summary[k].astype(str) for k in ("run", "metric", "group")})
    key = key.drop_duplicates(["run", "metric", "group"]).set_index(["run", "metric", "group"])
    out = []
    for run, metric, group in zip(rows["run"], rows["metric"], rows["group"]):
        try:
            lo, hi = _float(key.loc[(str(run), metric, group), "ci_lo"]), _float(key.loc[(str(run), metric, group),
                                                                                         "ci_hi"])
        except KeyError:
            lo = hi = math.nan
        out.append(f" [{lo:.1f}, {hi:.1f}]" if math.isfinite(lo) and math.isfinite(hi) else "")
    return out


def _pm(value: float, se: float) -> str:
    return f"{value:.1f}" if not math.isfinite(se) else f"{value:.1f} ± {se:.1f}"


def _float(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out
