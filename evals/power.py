"""``python -m evals.power DIR power.max_loss=M``: how many items (and samples per item) a paired comparison needs to
show ``loss < M``, from a pilot's observed difference and paired variance, for both estimands (the table:
:mod:`evals.report.power`; the statistics: :mod:`evals.analysis.power`, :mod:`evals.analysis.these_items`). It reads
the paired comparisons of every run under DIR (as ``python -m evals.report``) and prints, per compressed run and
samples per item, the items needed (``population``) and the power on the benchmark's own items (``these_items``),
saying when the benchmark has fewer items, when it is generated, and when the pilot already shows a loss beyond M.

``python -m evals.power power.simulate=true power.items=30 power.samples=64 power.max_loss=5
power.estimand=these_items [power.sims=2000]``: no DIR; the simulated type-I error of the search's test at the null
boundary over a battery of designs and its power at no loss (:mod:`evals.analysis.simulate`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from evals.analysis.estimands import ESTIMANDS
from evals.analysis.power import ALPHA, POWER
from evals.analysis.these_items import population_limit

NUMBERS = {"max_loss": None, "alpha": ALPHA, "power": POWER, "true_loss": None, "items": None, "samples": None,
           "sims": 2000}
WORDS = {"estimand": None, "simulate": "false"}
POWER_KEYS = {**NUMBERS, **WORDS}
USAGE = ("python -m evals.power DIR power.max_loss=2 [power.alpha=0.05] [power.power=0.8] [power.true_loss=L] "
         "[power.estimand=these_items|population]: items (and samples per item) needed to show loss < max_loss, "
         "from a pilot's observed difference and paired variance\n"
         "python -m evals.power power.simulate=true power.items=30 power.samples=64 power.max_loss=5 "
         "power.estimand=these_items [power.sims=2000]: the simulated type-I error and power of the search's test")


def parse_args(argv: list[str]) -> tuple[str | None, dict]:
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
        if name in WORDS:
            knobs[name] = value
            continue
        try:
            knobs[name] = float(value)
        except ValueError:
            raise ValueError(f"{key}: expected a number, got {value!r}") from None
    if knobs["simulate"] not in ("true", "false"):
        raise ValueError(f"power.simulate: true or false, got {knobs['simulate']!r}")
    simulate = knobs["simulate"] == "true"
    knobs["simulate"] = simulate
    if knobs["estimand"] is not None and knobs["estimand"] not in ESTIMANDS:
        raise ValueError(f"power.estimand: {' or '.join(ESTIMANDS)}, got {knobs['estimand']!r}")
    if folder is None and not simulate:
        raise ValueError(f"DIR: required (or power.simulate=true): {USAGE.splitlines()[0]}")
    if folder is not None and simulate:
        raise ValueError(f"{folder}: power.simulate=true reads no DIR")
    if knobs["max_loss"] is None:
        raise ValueError("power.max_loss: required (the margin, in headline points), e.g. power.max_loss=2")
    true = 0.0 if knobs["true_loss"] is None else knobs["true_loss"]
    checks = [("max_loss", knobs["max_loss"] > true), ("alpha", 0 < knobs["alpha"] < 0.5),
              ("power", 0 < knobs["power"] < 1)]
    if simulate:
        for name in ("items", "samples"):
            if knobs[name] is None:
                raise ValueError(f"power.{name}: required with power.simulate=true, e.g. power.{name}=30")
        checks += [(n, knobs[n] >= 1 and float(knobs[n]).is_integer()) for n in ("items", "samples", "sims")]
        checks.append(("max_loss", knobs["max_loss"] < 100))
    elif knobs["items"] is not None or knobs["samples"] is not None:
        raise ValueError("power.items/power.samples: only with power.simulate=true (a pilot sizes them itself)")
    for name, ok in checks:
        if not ok:
            raise ValueError(f"power.{name}: out of range, got {knobs[name]:g}")
    return folder, knobs


def simulate(knobs: dict) -> list[str]:
    """The lines of ``power.simulate=true``: per estimand (both when not given), the battery of
    :func:`evals.analysis.simulate.battery` at ``items`` x ``samples`` and margin ``max_loss`` points of a percent
    headline."""
    from evals.analysis.simulate import battery

    n, k, sims, alpha = int(knobs["items"]), int(knobs["samples"]), int(knobs["sims"]), knobs["alpha"]
    margin = knobs["max_loss"] / 100.0
    lines = []
    for est in [knobs["estimand"]] if knobs["estimand"] else list(ESTIMANDS):
        lines.append(f"{est}: {n} items x {k} samples, margin {knobs['max_loss']:g} points, alpha {alpha:g}, "
                     f"{sims} simulated searches per design")
        for r in battery(est, n, k, margin, alpha, sims):
            lines.append(f"  {r.kind:40s} {r.design:26s} {r.rate:.4f} (s.e. {r.se:.4f})")
        if est == "population" and n < population_limit(margin, alpha):
            lines.append(f"  population limit: {n} items < {population_limit(margin, alpha)} "
                         f"(log(alpha)/log(1 - margin)): no valid population test shows this margin here")
    return lines


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
    if knobs["simulate"]:
        print("\n".join(simulate(knobs)))
        return 0
    from evals.report.power import GENERATED, power_table

    loss, alpha, power, true = knobs["max_loss"], knobs["alpha"], knobs["power"], knobs["true_loss"]
    try:
        rows = power_table(Path(folder), loss, alpha, power, true, knobs["estimand"])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: DIR: no compressed run with a full-cache reference under {folder}", file=sys.stderr)
        return 2
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_rows", 500):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    assumed = "each run's observed loss (a gain as no loss)" if true is None else f"a true loss of {true:g}"
    print(f"\npopulation rows: items for a one-sided non-inferiority test (loss < {loss:g}) at alpha {alpha:g} with "
          f"{power:.0%} power, assuming {assumed}; sd from the pilot's paired differences")
    print("these_items rows: the simulated power of the test by betting in rounds on the benchmark's own items "
          "(items_needed: those items), each item at the success rates its pilot observed")
    if any(r["test"] == "paired t" for r in rows):
        print("paired t rows: the paired t-test's count, a lower bound: the search tests per-item means by betting "
              "(valid at every n), which needs more items (about twice at 4-8 samples per item: docs/search.md)")
    said = set()
    for r in rows:
        name = f"{r['method']} @ {r['budget']}"
        if r["pilot"] == "shows a loss beyond the margin" and (name, "lose") not in said:
            said.add((name, "lose"))
            print(f"{name}: the pilot already shows a loss beyond {loss:g} on its items (Δ {r['pilot_delta']:+.3g}; "
                  "shown to lose): more items or samples will not show it safe")
        if r["estimand"] != "population":
            continue
        need, have = r["items_needed"], r["benchmark_items"]
        if r["true_loss"] >= loss and (name, "loss") not in said:
            said.add((name, "loss"))
            print(f"{name}: assumed loss {r['true_loss']:.3g} ≥ the margin {loss:g}: no number of items shows it "
                  "safe")
            continue
        if have == GENERATED and (r["task"], "gen") not in said:
            said.add((r["task"], "gen"))
            print(f"{r['task']}: generated (no fixed number of items): generate the items needed")
        elif isinstance(have, int) and (need is None or need > have):
            print(f"{r['task']} has {have} items, fewer than the {need or 'more than can be sized'} needed for "
                  f"{name} with {r['samples']} samples per item")
        if isinstance(have, int) and have < r["population_limit"] and (r["task"], "limit") not in said:
            said.add((r["task"], "limit"))
            print(f"{r['task']}: {have} items are fewer than the population limit {r['population_limit']} "
                  f"(log(alpha)/log(1 - margin) unchanged items): no valid population test shows {loss:g} there; "
                  "the these_items rows ask about these items")
    return 0


if __name__ == "__main__":
    sys.exit(main())
