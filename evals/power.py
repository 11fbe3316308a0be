"""Power of paired comparisons, and ``python -m evals.power DIR power.max_loss=M``: how many items would show it.

- :func:`t_power`: the power of the paired t-test on ``n`` per-item differences with standardised effect
  ``effect = true difference / sd(d)``, from the noncentral t (noncentrality ``effect * sqrt(n)``, ``n - 1``
  degrees of freedom), as statsmodels' ``TTestPower`` computes it (checked against it in ``tests/test_power.py``).
- :func:`mde`: the smallest true difference a comparison of ``n`` items with paired spread ``sd`` detects with the
  given power, two-sided at ``alpha`` (the report's test); :func:`mde_80` is that at 80% from the differences
  themselves (the report's ``mde_80`` column).
- :func:`items_needed`: the items a one-sided non-inferiority test at ``alpha`` needs to show ``loss < margin``
  with the given power when the true loss is ``true_loss``.
- :func:`exact_power`, :func:`exact_items_needed`: the same for 0/1 items under the search's exact test (an exact
  multinomial computation over every outcome), from the pilot's share of discordant items.
- :func:`variance_parts`: a pilot's paired variance split into the part between items and the part from sampling
  within an item (per-sample differences paired by ``sample_idx``: the same seeds), so that the variance of a mean
  over ``k`` samples per item is ``between + within / k``.

The command reads the paired comparisons of every run under DIR (as ``python -m evals.report``) and prints, per
compressed run and samples per item, the items needed, saying when the benchmark has fewer.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("evals.power")

ALPHA = 0.05
POWER = 0.8
MAX_ITEMS = 10**7
SAMPLES = (1, 2, 4, 8, 16, 32, 64)


def t_power(effect: float, n: int, alpha: float = ALPHA, alternative: str = "two-sided") -> float:
    """Power of the paired (one-sample) t-test of ``n`` differences at standardised effect ``effect``;
    ``alternative``: ``two-sided`` or ``larger`` (one-sided, effect in the tested direction)."""
    from scipy.stats import nct, t

    if n < 2:
        return math.nan
    df, ncp = n - 1, effect * math.sqrt(n)
    if alternative == "two-sided":
        crit = t.isf(alpha / 2, df)
        far = float(nct.cdf(-crit, df, ncp))  # the opposite tail: negligible, and NaN where scipy underflows
        return float(nct.sf(crit, df, ncp)) + (0.0 if math.isnan(far) else far)
    if alternative == "larger":
        return float(nct.sf(t.isf(alpha, df), df, ncp))
    raise ValueError(f"alternative: two-sided or larger, got {alternative!r}")


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER, alternative: str = "two-sided") -> float:
    """The smallest true difference detected with ``power`` by the paired t-test of ``n`` items whose differences
    have standard deviation ``sd``; NaN when ``sd`` is 0 or unknown or ``n < 2``."""
    from scipy.optimize import brentq

    if not (n >= 2 and sd > 0 and math.isfinite(sd)):
        return math.nan
    hi = 1.0
    while t_power(hi, n, alpha, alternative) < power:
        hi *= 2
    effect = brentq(lambda e: t_power(e, n, alpha, alternative) - power, 0.0, hi, xtol=1e-10)
    return float(effect * sd)


def mde_80(d: Sequence[float], alpha: float = ALPHA) -> float:
    """The report's ``mde_80``: :func:`mde` at 80% power from paired differences ``d`` (shape ``(n,)``)."""
    x = np.asarray(d, dtype=float)
    return mde(float(x.std(ddof=1)) if len(x) > 1 else math.nan, len(x), alpha)


def items_needed(sd: float, margin: float, alpha: float = ALPHA, power: float = POWER,
                 true_loss: float = 0.0) -> int | None:
    """The fewest items whose one-sided non-inferiority t-test (margin ``margin``) reaches ``power`` when the true
    loss is ``true_loss < margin``; None beyond ``MAX_ITEMS``. ``sd``: the paired spread of per-item differences."""
    if not margin > true_loss:
        raise ValueError(f"margin: must exceed the true loss ({true_loss}), got {margin}")
    if sd <= 0:
        return 2
    effect = (margin - true_loss) / sd
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    guess = max(2, int(((z(1 - alpha) + z(power)) / effect) ** 2))  # the normal approximation, then exact
    if guess > MAX_ITEMS:
        return None
    n = guess
    while n > 2 and t_power(effect, n - 1, alpha, "larger") >= power:
        n -= 1
    while t_power(effect, n, alpha, "larger") < power:
        n += 1
        if n > MAX_ITEMS:
            return None
    return n


def exact_power(n: int, p10: float, p01: float, margin: float, alpha: float = ALPHA) -> float:
    """The exact power of the search's test for 0/1 items (:func:`evals.noninferiority.p_discordant`) on ``n``
    items whose discordance is ``p10`` (full cache right, compressed wrong) and ``p01``: the sum of the
    multinomial probabilities of every ``(n10, n01)`` the test rejects. ``margin``: a fraction."""
    from scipy.stats import multinomial

    from evals.noninferiority import p_discordant

    n10, n01 = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    ok = n10 + n01 <= n
    n10, n01 = n10[ok], n01[ok]
    reject = p_discordant(n10, n01, n, margin, alpha) <= alpha
    prob = multinomial.pmf(np.stack([n10, n01, n - n10 - n01], axis=-1), n, [p10, p01, 1.0 - p10 - p01])
    return float(prob[reject].sum())


def exact_items_needed(p10: float, p01: float, margin: float, alpha: float = ALPHA, power: float = POWER,
                       most: int = 3000) -> int | None:
    """The fewest items (up to ``most``) at which :func:`exact_power` reaches ``power`` (the first such n: power is
    not monotone in n for a discrete test, so a few more items can dip below it); None beyond ``most``."""
    lo, hi = 1, 2
    while exact_power(hi, p10, p01, margin, alpha) < power:
        lo, hi = hi, hi * 2
        if hi > most:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if exact_power(mid, p10, p01, margin, alpha) >= power else (mid, hi)
    return hi


@dataclass(frozen=True)
class VarianceParts:
    """A pilot's paired differences: ``n`` items, ``k`` samples per item, ``total`` = var of the per-item mean
    differences (ddof=1), split into ``between`` items and ``within`` (one sample's variance; the mean of ``k``
    contributes ``within / k``)."""

    n: int
    k: int
    total: float
    between: float
    within: float

    def sd(self, samples: int) -> float:
        """The paired spread of per-item means over ``samples`` samples per item."""
        return math.sqrt(self.between + self.within / samples)


def variance_parts(diffs: np.ndarray) -> VarianceParts:
    """``diffs`` ``(n, k)``: per item and sample index, compressed minus full-cache score (the same seeds)."""
    n, k = diffs.shape
    means = diffs.mean(axis=1)
    total = float(means.var(ddof=1)) if n > 1 else math.nan
    within = float(diffs.var(axis=1, ddof=1).mean()) if k > 1 else 0.0
    between = max(0.0, total - within / k) if k > 1 else total
    return VarianceParts(n, k, total, between, within)


def _pilot_diffs(run_dir: str, ref_dir: str, scale: float) -> np.ndarray | None:
    """``(n, k)`` per-sample differences of two runs over the items and sample indices both scored fully."""
    import pandas as pd

    from evals.report.paired import correct_values

    frames = []
    for d in (ref_dir, run_dir):
        rows = pd.read_csv(Path(d) / "samples.csv", usecols=["item_id", "sample_idx", "correct"])
        rows["score"] = correct_values(rows["correct"]) * scale
        frames.append(rows.assign(item_id=rows["item_id"].astype(str)).set_index(["item_id", "sample_idx"])["score"])
    both = pd.concat(frames, axis=1, keys=["a", "b"], join="inner")
    if both.empty:
        return None
    wide = (both["b"] - both["a"]).unstack("sample_idx").dropna(axis=1)
    return wide.to_numpy() if wide.shape[1] else None


def power_table(root: Path, margin: float, alpha: float = ALPHA, power: float = POWER,
                true_loss: float = 0.0) -> list[dict]:
    """One row per compressed run under ``root`` with a full-cache reference and samples per item: the items
    needed at each ``k`` of ``SAMPLES`` (and the pilot's own k), beside the benchmark's size."""
    import pandas as pd

    from evals.report.load import collect
    from evals.report.paired import paired_deltas
    from evals.report.tables import headline

    head = headline(collect(root))
    pairs = paired_deltas(head)
    out = []
    for _, pair in pairs.iterrows():
        run = head[head["run"] == pair["run"]].iloc[0]
        ref = head[head["run"] == pair["reference"]].iloc[0]
        diffs = _pilot_diffs(run["run_dir"], ref["run_dir"], 100.0 if run["unit"] == "%" else 1.0)
        if diffs is None or len(diffs) < 2:
            continue
        parts = variance_parts(diffs)
        budget = None if pd.isna(run["prompt_budget"]) else int(run["prompt_budget"])
        base = {"model": run["model"], "task": run["task"], "method": run["label"], "budget": budget,
                "pilot_items": parts.n, "pilot_samples": parts.k, "benchmark_items": benchmark_size(run["run_dir"])}
        scale = 100.0 if run["unit"] == "%" else 1.0
        if parts.k == 1 and np.isin(diffs, (-scale, 0.0, scale)).all():  # one 0/1 verdict per item: the exact test
            share = float((diffs != 0).mean())  # discordant items; the true loss splits them
            p10, p01 = (share + true_loss / scale) / 2, (share - true_loss / scale) / 2
            need = exact_items_needed(min(1.0, p10), max(0.0, p01), margin / scale, alpha, power) if p01 >= 0 else None
            out.append({**base, "samples": 1, "sd": float(diffs.std(ddof=1)), "test": "exact discordant",
                        "items_needed": need})
            continue
        for k in sorted({*SAMPLES, parts.k}):
            if parts.k == 1 and k > 1:
                continue  # one sample per item: no within-item variance to extrapolate from
            sd = parts.sd(k)
            need = items_needed(sd, margin, alpha, power, true_loss) if sd > 0 else None
            out.append({**base, "samples": k, "sd": sd, "test": "paired t", "items_needed": need})
    return out


def benchmark_size(run_dir: str) -> int | None:
    """The benchmark's item count (``task.plan.n_items`` of the run's config, the full set), if known."""
    import json

    try:
        meta = json.loads((Path(run_dir) / "meta.json").read_text())
        return int(meta["config"]["task"]["plan"]["n_items"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


POWER_KEYS = {"max_loss": None, "alpha": ALPHA, "power": POWER, "true_loss": 0.0}
USAGE = ("python -m evals.power DIR power.max_loss=2 [power.alpha=0.05] [power.power=0.8] [power.true_loss=0]: "
         "items (and samples per item) needed to show loss < max_loss, from a pilot's paired variance")


def parse_args(argv: list[str]) -> tuple[str, dict[str, float]]:
    """``(DIR, {knob: value})`` from ``DIR power.KEY=VALUE ...``: the ``key=value`` style of ``evals.search`` and
    ``evals.run``. Raises ``ValueError`` naming the knob; the old ``--max-loss`` flags get a one-line hint."""
    folder, knobs = None, dict(POWER_KEYS)
    for arg in argv:
        if arg.startswith("--"):
            name = arg[2:].split("=", 1)[0].replace("-", "_")
            hint = f"power.{name}=VALUE" if name in POWER_KEYS else "power.KEY=VALUE"
            raise ValueError(f"{arg}: evals.power takes key=value arguments, as evals.search does: {hint}")
        if "=" not in arg:
            if folder is not None:
                raise ValueError(f"{arg}: one DIR only (already {folder})")
            folder = arg
            continue
        key, value = arg.split("=", 1)
        name = key.removeprefix("power.")
        if not key.startswith("power.") or name not in POWER_KEYS:
            raise ValueError(f"{key}: no such power knob ({', '.join('power.' + k for k in POWER_KEYS)})")
        try:
            knobs[name] = float(value)
        except ValueError:
            raise ValueError(f"{key}: expected a number, got {value!r}") from None
    if folder is None:
        raise ValueError(f"DIR: required: {USAGE}")
    if knobs["max_loss"] is None:
        raise ValueError("power.max_loss: required (the margin, in headline points), e.g. power.max_loss=2")
    for name, ok in (("max_loss", knobs["max_loss"] > knobs["true_loss"]), ("alpha", 0 < knobs["alpha"] < 0.5),
                     ("power", 0 < knobs["power"] < 1)):
        if not ok:
            raise ValueError(f"power.{name}: out of range, got {knobs[name]:g}")
    return folder, knobs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    try:
        folder, knobs = parse_args(argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args = argparse.Namespace(dir=folder, **knobs)
    try:
        rows = power_table(Path(args.dir), args.max_loss, args.alpha, args.power, args.true_loss)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: DIR: no compressed run with a full-cache reference under {args.dir}", file=sys.stderr)
        return 2
    import pandas as pd

    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 500):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"\nitems for a one-sided non-inferiority test (loss < {args.max_loss:g}) at alpha {args.alpha:g} with "
          f"{args.power:.0%} power if the true loss is {args.true_loss:g}; sd from the pilot's paired differences")
    if any(r["test"] == "paired t" for r in rows):
        print("paired t rows: the paired t-test's count, a lower bound: the search tests per-item means by betting "
              "(valid at every n), which needs more items (about twice at 4-8 samples per item: docs/search.md)")
    for r in rows:
        need, have = r["items_needed"], r["benchmark_items"]
        if have is not None and (need is None or need > have):
            print(f"{r['task']} has {have} items, fewer than the {need or 'more than can be sized'} needed for "
                  f"{r['method']} @ {r['budget']} with {r['samples']} samples per item")
    return 0


if __name__ == "__main__":
    sys.exit(main())
