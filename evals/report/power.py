"""The power table of ``python -m evals.power``: for every compressed run under a folder with a full-cache reference
(paired as ``python -m evals.report`` pairs them), sized from the pilot's own observed difference and spread:

- ``population`` rows: the items needed to show ``loss < margin`` per samples per item (the paired t-test's count,
  or the exact test's for one 0/1 sample per item), beside the benchmark's own size (``generated`` for a task whose
  items are made from a seed, such as needle) and the population limit (:func:`population_limit`);
- ``these_items`` rows: the benchmark's own items fixed, the simulated power of the test by betting in rounds per
  samples per item, each item's success rates those the pilot observed (per-sample 0/1 scores).

The true loss assumed is the pilot's observed loss (a gain is sized as no loss) unless ``true_loss`` is given; a run
whose pilot already shows the loss beyond the margin (:func:`evals.analysis.estimands.compare`'s other side) says so
in ``pilot``."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from evals.analysis.estimands import POPULATION, THESE_ITEMS, compare
from evals.analysis.power import ALPHA, POWER, SAMPLES, exact_items_needed, items_needed, variance_parts
from evals.analysis.simulate import p_values
from evals.analysis.these_items import population_limit
from evals.record.files import read_regular
from evals.report.load import collect, run_meta
from evals.report.paired import correct_values, paired_deltas
from evals.report.tables import headline

GENERATED = "generated"
SIMS = 200  # simulated searches per (run, samples per item) for the these_items rows


def _pilot_scores(run_dir: str, ref_dir: str, scale: float) -> tuple[np.ndarray, np.ndarray] | None:
    """``(a, b)`` each ``(n, k)``: per-sample scores of the full cache and the run over the items and sample indices
    both scored fully."""
    frames = []
    for d in (ref_dir, run_dir):
        data = io.BytesIO(read_regular(Path(d) / "samples.csv"))
        rows = pd.read_csv(data, usecols=["item_id", "sample_idx", "correct"])
        rows["score"] = correct_values(rows["correct"]) * scale
        frames.append(rows.assign(item_id=rows["item_id"].astype(str)).set_index(["item_id", "sample_idx"])["score"])
    both = pd.concat(frames, axis=1, keys=["a", "b"], join="inner")
    if both.empty:
        return None
    wide_a, wide_b = both["a"].unstack("sample_idx"), both["b"].unstack("sample_idx")
    keep = wide_a.columns[wide_a.notna().all() & wide_b.notna().all()]
    return (wide_a[keep].to_numpy(), wide_b[keep].to_numpy()) if len(keep) else None


def these_items_power(p: np.ndarray, q: np.ndarray, items: int, samples: int, margin: float, alpha: float,
                      sims: int = SIMS, seed: int = 0) -> float:
    """The simulated power of the ``these_items`` test (shown safe) on ``items`` problems of ``samples`` Bernoulli
    samples each, the full cache's and the run's success rates ``p, q`` (fractions, shape ``(m,)``; cycled to
    ``items``); ``margin`` a fraction."""
    rng = np.random.default_rng([seed, items, samples])
    reps = -(-items // len(p))
    p, q = np.tile(p, reps)[:items], np.tile(q, reps)[:items]
    x = rng.random((sims, items, samples)) < p[:, None]
    y = rng.random((sims, items, samples)) < q[:, None]
    return float((p_values(x.astype(float) - y, margin, alpha, THESE_ITEMS) <= alpha).mean())


def power_table(root: Path, margin: float, alpha: float = ALPHA, power: float = POWER,
                true_loss: float | None = None, estimand: str | None = None) -> list[dict]:
    """Rows per compressed run under ``root`` with a full-cache reference (module docstring): ``estimand`` one of
    ``population``, ``these_items`` or None (both)."""
    head = headline(collect(root))
    pairs = paired_deltas(head)
    out = []
    for _, pair in pairs.iterrows():
        run = head[head["run"] == pair["run"]].iloc[0]
        ref = head[head["run"] == pair["reference"]].iloc[0]
        scale = 100.0 if run["unit"] == "%" else 1.0
        scores = _pilot_scores(run["run_dir"], ref["run_dir"], scale)
        if scores is None or len(scores[0]) < 2:
            continue
        a, b = scores
        diffs = b - a
        parts = variance_parts(diffs)
        seen = compare(a, b, margin, alpha, scale)  # the pilot's own verdict on these items
        observed = float(-diffs.mean())
        loss = max(0.0, observed) if true_loss is None else true_loss
        budget = None if pd.isna(run["prompt_budget"]) else int(run["prompt_budget"])
        size = benchmark_size(run["run_dir"])
        pilot = ("shows a loss beyond the margin" if seen.lose else "shown safe" if seen.safe else "not shown")
        base = {"model": run["model"], "task": run["task"], "method": run["label"], "budget": budget,
                "pilot_items": parts.n, "pilot_samples": parts.k, "pilot_delta": -observed, "pilot": pilot,
                "benchmark_items": size}
        if estimand in (None, POPULATION):
            out.extend(_population_rows(base, diffs, parts, scale, margin, alpha, power, loss))
        if estimand in (None, THESE_ITEMS):
            out.extend(_these_items_rows(base, a, b, scale, margin, alpha, size))
    return out


def _population_rows(base: dict, diffs: np.ndarray, parts, scale: float, margin: float, alpha: float,
                     power: float, loss: float) -> list[dict]:
    base = {**base, "estimand": POPULATION, "true_loss": loss,
            "population_limit": population_limit(margin / scale, alpha)}
    if loss >= margin:
        return [{**base, "samples": parts.k, "sd": float(diffs.std(ddof=1)), "test": "-", "items_needed": None,
                 "power": None}]
    if parts.k == 1 and np.isin(diffs, (-scale, 0.0, scale)).all():  # one 0/1 verdict per item: the exact test
        share = float((diffs != 0).mean())  # discordant items; the true loss splits them
        p10, p01 = (share + loss / scale) / 2, (share - loss / scale) / 2
        need = exact_items_needed(min(1.0, p10), max(0.0, p01), margin / scale, alpha, power) if p01 >= 0 else None
        return [{**base, "samples": 1, "sd": float(diffs.std(ddof=1)), "test": "exact discordant",
                 "items_needed": need, "power": None}]
    out = []
    for k in sorted({*SAMPLES, parts.k}):
        if parts.k == 1 and k > 1:
            continue  # one sample per item: no within-item variance to extrapolate from
        sd = parts.sd(k)
        need = items_needed(sd, margin, alpha, power, loss) if sd > 0 else None
        out.append({**base, "samples": k, "sd": sd, "test": "paired t", "items_needed": need, "power": None})
    return out


def _these_items_rows(base: dict, a: np.ndarray, b: np.ndarray, scale: float, margin: float, alpha: float,
                      size: int | str | None) -> list[dict]:
    """Per samples per item, the simulated power on the benchmark's items (the pilot's items when the benchmark is
    generated or its size unknown) at the pilot's per-item success rates; only for 0/1 per-sample scores."""
    if not (np.isin(a, (0.0, scale)).all() and np.isin(b, (0.0, scale)).all()):
        return []
    items = size if isinstance(size, int) else len(a)
    p, q = a.mean(axis=1) / scale, b.mean(axis=1) / scale
    base = {**base, "estimand": THESE_ITEMS, "true_loss": float((p - q).mean()) * scale, "population_limit": None}
    return [{**base, "samples": k, "sd": float((b - a).std(ddof=1)), "test": "betting in rounds",
             "items_needed": items, "power": these_items_power(p, q, items, k, margin / scale, alpha)}
            for k in SAMPLES if margin / scale < 1]


def benchmark_size(run_dir: str) -> int | str | None:
    """The benchmark's item count (``task.plan.n_items`` of the run's config, the full set), ``generated`` for a task
    whose items are made from a seed (its module's ``GENERATED``: there is no fixed size), None if unknown."""
    from tasks import get_task
    from tasks.protocol import hook

    try:
        task = run_meta(Path(run_dir))["config"]["task"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        if hook(get_task(str(task.get("module") or task.get("name"))), "GENERATED"):
            return GENERATED
    except (ValueError, TypeError, ImportError):
        pass
    try:
        return int(task["plan"]["n_items"])
    except (KeyError, TypeError, ValueError):
        return None
