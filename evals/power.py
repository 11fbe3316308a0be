"""``python -m evals.power DIR power.max_loss=M``: how many items (and samples per item) a paired comparison needs to
show ``loss < M``, from a pilot's paired variance (the table: :mod:`evals.report.power`; the statistics:
:mod:`evals.analysis.power`). It reads the paired comparisons of every run under DIR (as ``python -m evals.report``)
and prints, per compressed run and samples per item, the items needed, saying when the benchmark has fewer."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from evals.analysis.power import ALPHA, POWER
from evals.report.power import power_table

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
    try:
        rows = power_table(Path(folder), knobs["max_loss"], knobs["alpha"], knobs["power"], knobs["true_loss"])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: DIR: no compressed run with a full-cache reference under {folder}", file=sys.stderr)
        return 2
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 500):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    loss, alpha, power, true = knobs["max_loss"], knobs["alpha"], knobs["power"], knobs["true_loss"]
    print(f"\nitems for a one-sided non-inferiority test (loss < {loss:g}) at alpha {alpha:g} with {power:.0%} power "
          f"if the true loss is {true:g}; sd from the pilot's paired differences")
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
