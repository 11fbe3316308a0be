"""What a search leaves: ``<out_root>/search.csv`` (one row per budget), a plot per search and the answer line."""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import logging
import math
import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from evals.analysis.sequential import ABOUT, LOSE, NOT_TESTED, Step, answer
from evals.record.files import read_regular, why_not_regular

log = logging.getLogger(__name__)

COLUMNS = ["search_id", "model", "task", "method", "budget", "kv_ratio", "n_items", "value", "reference", "delta",
           "ci_low", "ci_high", "verdict", "p_noninferiority", "test", "max_loss", "alpha", "budgets", "overrides",
           "run_dir", "estimand", "p_lose", "against"]
CSV = "search.csv"
LOCK = ".search.csv.lock"


def search_id(overrides: list[str], max_loss: float, alpha: float, budgets: list[int],
              estimand: str = "these_items", reference: str = "full_cache") -> str:
    """12 hex digits naming one search: every override of its job (sorted: their order does not change the job),
    the margin, alpha, the budgets tested, the estimand and (when not the full cache) what each budget is compared
    with. The same search run again has the same id and replaces its rows."""
    ident = {"overrides": sorted(overrides), "max_loss": float(max_loss), "alpha": float(alpha),
             "budgets": [int(b) for b in budgets], "estimand": estimand}
    if reference != "full_cache":  # the ids of earlier searches unchanged
        ident["reference"] = reference
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def rows(model: str, task: str, method: str, steps: list[Step], max_loss: float, alpha: float,
         ratios: dict[int, float], overrides: list[str] | None = None, estimand: str = "these_items",
         reference: str = "full_cache") -> pd.DataFrame:
    """``search.csv``'s rows of one search: its ``search_id`` and identity (``overrides``, ``max_loss``, ``alpha``,
    ``budgets``, ``estimand``), value, reference, delta and its interval as ``deltas.csv`` gives them (paired
    bootstrap 95%), the verdict of the search (``safe``, ``shown_to_lose``, ``not_shown``, ``not_tested``), the
    p-value of its one-sided test of ``loss >= max_loss`` and (``p_lose``) that of ``loss <= max_loss``; ``against``:
    ``full_cache`` (the full cache in the model's dtype) or ``storage`` (the same run in the model's dtype)."""
    overrides = list(overrides or [])
    budgets = [s.budget for s in steps]
    sid = search_id(overrides, max_loss, alpha, budgets, estimand, reference)
    out = []
    for s in steps:
        m = s.measured
        out.append({"search_id": sid, "model": model, "task": task, "method": method, "budget": s.budget,
                    "kv_ratio": ratios.get(s.budget, math.nan), "n_items": m.n_items if m else math.nan,
                    "value": m.run.value if m else math.nan, "reference": m.reference.value if m else math.nan,
                    "delta": m.delta if m else math.nan, "ci_low": m.ci_low if m else math.nan,
                    "ci_high": m.ci_high if m else math.nan, "verdict": s.verdict,
                    "p_noninferiority": m.test.p_value if m else math.nan, "test": m.test.test if m else "",
                    "max_loss": max_loss, "alpha": alpha, "budgets": " ".join(map(str, budgets)),
                    "overrides": " ".join(sorted(overrides)), "run_dir": str(m.run.run_dir) if m else "",
                    "estimand": estimand, "p_lose": m.test.p_lose if m else math.nan, "against": reference})
    return pd.DataFrame(out, columns=COLUMNS)


def write_csv(out_root: Path, frame: pd.DataFrame) -> Path:
    """Add ``frame`` (one search's rows) to ``<out_root>/search.csv``, keeping every other search's rows and
    replacing only those of the same ``search_id`` (the same search run again). Read, merge and write happen under an
    exclusive ``flock`` on ``<out_root>/.search.csv.lock`` (two searches ending together both keep their rows), and
    the file is replaced atomically (a reader never sees half of it). Rows of an older file without ``search_id``
    are kept as they are; an empty ``search.csv`` holds no earlier search (one warning line).

    ``ValueError`` (one line naming the file, nothing written) when the lock or ``search.csv`` is a symbolic link,
    a folder, a FIFO or another non-regular file, or ``search.csv`` is not a CSV table (its rows are never
    dropped); ``OSError`` from a full or read-only disk."""
    from evals.record.rundir import write_atomic

    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    path = out_root / CSV
    for target in (out_root / LOCK, path):  # lstat only: nothing is opened or followed
        why = why_not_regular(target, follow=False)
        if why:
            raise ValueError(f"{target}: {why}; the search writes only a regular file there (remove it)")
    fd = os.open(out_root / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        merged = frame
        old = _earlier(path)
        if old is not None:
            if "search_id" in old.columns:
                old = old[~old["search_id"].astype(str).isin(set(frame["search_id"].astype(str)))]
            merged = pd.concat([old, frame], ignore_index=True)
        write_atomic(path, merged.to_csv(index=False))
    finally:
        os.close(fd)  # releases the lock
    return path


def _earlier(path: Path) -> pd.DataFrame | None:
    """The rows of an existing ``search.csv`` (None when there is none, or it is empty: one warning)."""
    if not path.exists():
        return None
    data = read_regular(path)  # refuses a FIFO or folder put there since the check, never waits on it
    if not data.strip():
        log.warning("%s: empty; read as holding no earlier search", path)
        return None
    try:
        return pd.read_csv(io.BytesIO(data), dtype={"search_id": str})
    except (ValueError, UnicodeDecodeError) as exc:  # pandas' ParserError is a ValueError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not a CSV table ({first}); left as it is (move it away to keep this search's "
                         "rows)") from None


def record(out_root: Path, title: str, table: pd.DataFrame, steps: list[Step], max_loss: float, alpha: float,
           say: Callable[[str], None], method: str | None = None, draw: bool = True) -> None:
    """Write ``search.csv`` (:func:`write_csv`) and (``draw``) the plot (:func:`plot`, its axis named by ``method``'s
    budget knob; none for ``search.reference=storage``, whose reference changes with the budget), saying what was
    written; a file that cannot be written is one line saying why, never an exception: the search's answer line
    follows either way."""
    from evals.record.rundir import os_error_line

    wrote = []
    writers = [("search.csv", lambda: write_csv(out_root, table))]
    if draw:
        writers.append(("the plot", lambda: plot(out_root, title, steps, max_loss, alpha, method)))
    for name, write in writers:
        try:
            path = write()
        except ValueError as exc:
            say(f"search: {title}: {name} not written: {str(exc).splitlines()[0]}")
            continue
        except OSError as exc:  # a full or read-only disk, a file where a folder belongs
            say(f"search: {title}: {name} not written: {os_error_line(exc, out_root)}")
            continue
        if path is not None:
            wrote.append(str(path))
    if wrote:
        say(f"search: {title}: wrote {' and '.join(wrote)}")


def answer_line(steps: list[Step], max_loss: float, alpha: float, unit: str, ratios: dict[int, float],
                estimand: str = "these_items") -> str:
    """The one line a search ends with, naming the estimand its verdicts are about."""
    points = "points" if unit == "%" else (unit or "units")
    about = ABOUT.get(estimand, estimand)
    best = answer(steps)
    if best is not None:
        return (f"smallest budget with loss ≤ {max_loss:g} {points} at {1 - alpha:.0%}: {best.budget}, KV "
                f"{ratios[best.budget]:.1f}× smaller than the full cache at the longest prompt ({about})")
    first = next(s for s in reversed(steps) if s.verdict != NOT_TESTED)
    m = first.measured
    interval = ci_text(m)
    head = (f"no tested budget is shown safe: the largest, {first.budget}, has Δ {m.delta:+.3g} [{interval}] "
            f"{points} on {m.n_items} items")
    if first.verdict == LOSE:
        return (f"{head}: shown to lose more than {max_loss:g} {points} {about} (one-sided p {m.test.p_lose:.3g} "
                f"≤ {alpha:g})")
    return (f"{head}, one-sided p {m.test.p_value:.3g} > {alpha:g} for a loss below {max_loss:g} {about} "
            "(more items or samples, or a larger margin or budget)")


def ci_text(m) -> str:
    """A measurement's interval, ``lo, hi`` (``n.m.``: not measured)."""
    return "n.m." if math.isnan(m.ci_low) or math.isnan(m.ci_high) else f"{m.ci_low:+.3g}, {m.ci_high:+.3g}"


def storage_line(steps: list[Step], label: str, max_loss: float, alpha: float, unit: str,
                 estimand: str = "these_items") -> str:
    """The answer of a ``search.reference=storage`` search: the storage ``label`` (``fp8_e4m3/one``) shown
    non-inferior to the same run in the model's dtype (down to the smallest budget of the sequence; the full cache:
    its one test), or that it cannot be shown, with the delta, its interval and the one-sided p-value."""
    points = "points" if unit == "%" else (unit or "units")
    about = ABOUT.get(estimand, estimand)
    best = answer(steps)
    single = [s.budget for s in steps] == [0]  # the full cache: no budget
    if best is not None:
        m = best.measured
        where = "" if single else f" at every budget down to {best.budget}"
        return (f"{label} is non-inferior to the model's dtype{where}: loss ≤ {max_loss:g} {points} at "
                f"{1 - alpha:.0%} ({about}; Δ {m.delta:+.3g}, one-sided p {m.test.p_value:.3g} ≤ {alpha:g})")
    first = next(s for s in reversed(steps) if s.verdict != NOT_TESTED)
    m = first.measured
    interval = ci_text(m)
    at = "" if single else f" at budget {first.budget}"
    head = (f"{label} is not shown non-inferior to the model's dtype{at}: Δ {m.delta:+.3g} [{interval}] {points} "
            f"on {m.n_items} items")
    if first.verdict == LOSE:
        return (f"{head}, shown to lose more than {max_loss:g} {points} {about} (one-sided p {m.test.p_lose:.3g} "
                f"≤ {alpha:g})")
    return (f"{head}, one-sided p {m.test.p_value:.3g} > {alpha:g} for a loss below {max_loss:g} {about} "
            "(cannot say: more items or samples, or a larger margin)")


def plot(out_root: Path, title: str, steps: list[Step], max_loss: float, alpha: float,
         method: str | None = None) -> Path | None:
    """``<out_root>/plots/search__<title>.png``: the headline of each tested budget with its 95% interval against
    the budget, the full cache as a band (its interval), the margin below it, the chosen budget marked. The x axis
    is the method's own budget knob (:func:`evals.report.plots.knob_axis_label`; ``method`` default: the last part of
    ``title``, ``task · model · method``)."""
    tested = [s for s in steps if s.measured is not None]
    if not tested:
        return None
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context({"text.parse_math": False}):  # a "$" in a name is text, never TeX math
        return _draw(out_root, title, steps, tested, max_loss, alpha, method or title.rsplit(" · ", 1)[-1])


def _draw(out_root: Path, title: str, steps: list[Step], tested: list[Step], max_loss: float, alpha: float,
          method: str) -> Path:
    import matplotlib.pyplot as plt

    from evals.report.plots import knob_axis_label

    ref = tested[0].measured.reference
    unit = f" ({ref.unit})" if ref.unit else ""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if not math.isnan(ref.ci_lo):
        ax.axhspan(ref.ci_lo, ref.ci_hi, color="0.85", label="full cache, 95% CI")
    ax.axhline(ref.value, color="0.4", lw=1, label=f"full cache: {ref.value:.3g}")
    ax.axhline(ref.value - max_loss, color="tab:red", ls="--", lw=1, label=f"margin: full − {max_loss:g}")
    for verdict, color in (("safe", "tab:green"), ("not_shown", "tab:orange"), (LOSE, "tab:red")):
        part = [s for s in tested if s.verdict == verdict]
        if part:
            x = [s.budget for s in part]
            y = [s.measured.run.value for s in part]
            err = [[max(0.0, v - s.measured.run.ci_lo) for v, s in zip(y, part)],
                   [max(0.0, s.measured.run.ci_hi - v) for v, s in zip(y, part)]]
            ax.errorbar(x, y, yerr=None if any(math.isnan(e) for e in err[0]) else err, fmt="o", color=color,
                        capsize=3, label=verdict.replace("_", " "))
    best = answer(steps)
    if best is not None:
        ax.axvline(best.budget, color="tab:green", ls=":", lw=1.5, label=f"chosen: {best.budget}")
    ax.set_xscale("log", base=2)
    ax.set_xticks([s.budget for s in steps], [str(s.budget) for s in steps])
    ax.set_xlabel(textwrap.fill(knob_axis_label(method), 80))
    ax.set_ylabel(f"{ref.metric}{unit}")
    ax.set_title(f"{title}: loss ≤ {max_loss:g} at {1 - alpha:.0%} (fixed sequence)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: it never hides a point
    fig.tight_layout()
    from evals.report.escape import file_part
    from evals.report.output import output_folder, save_figure

    try:  # the plots folder never a link, the file written whole and never through one
        folder = output_folder(Path(out_root) / "plots")
        return save_figure(fig, folder / f"search__{'__'.join(file_part(p) for p in title.split(' · '))}.png",
                           dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
