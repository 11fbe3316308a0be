"""Reading run directories: every ``summary.csv`` under a root, one run per directory, with its identity.

Each summary row gets ``run`` (the run directory relative to the root: one directory is one line of a plot and one
row or cell of a table, whatever its knobs), ``fingerprint`` (from the row or from ``meta.json``) and ``pair_key``:
the fingerprint of the run's identity without its compression (model, task and data, sampling, backend), which is
what a compressed run and its full-cache run share (:mod:`evals.report.paired`), and ``same_as``: the full-cache run
whose rows the run copied instead of generating them (evals/execute/alias.py), else empty.

``task_config`` labels the run's task configuration (its identity's ``task`` part: the task's settings and its data)
by the settings that differ between runs of the same task, ``context_tokens=1024`` (empty when every run of the
task has the same): runs of two configurations are never in one table, curve or paired comparison.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from evals.record.files import NotReadable, read_json, read_regular, why_not_regular
from evals.report.likeness import run_code
from evals.report.likeness import text as id_text

log = logging.getLogger(__name__)

UNCERTAINTY = ("stderr", "ci_lo", "ci_hi")
COUNTS = ("n", "prompt_budget")  # never negative
REQUIRED = ("model", "task", "method", "metric", "value")  # what every table of the report reads
# A value this large is no measurement, and the arithmetic of a table or plot (a mean, a band, a log axis, x 100:
# 1e299 on a log axis overflowed) takes it past the largest float: it is left out as an infinity is
TOO_LARGE = 1e100


def read_meta(run_dir: Path) -> dict:
    """The run's ``meta.json`` as a dict; ``{}`` when there is none; ``ValueError`` naming the file when it is not
    a regular file, not JSON, nested too deeply (:mod:`evals.record.files`) or not a JSON object."""
    path = Path(run_dir) / "meta.json"
    if not path.exists() and not path.is_symlink():
        return {}
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise NotReadable(path, "not a JSON object")
    return meta


def run_meta(run_dir: Path) -> dict:
    """:func:`read_meta`, ``{}`` where it cannot be read (:func:`collect` has already left such a run out, with one
    line)."""
    try:
        return read_meta(run_dir)
    except ValueError:
        return {}


def _key(meta: dict, leave_out: tuple[str, ...]) -> str | None:
    identity = meta.get("identity")
    if not isinstance(identity, dict):
        return None
    rest = {k: v for k, v in identity.items() if k not in leave_out}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()[:16]


def pair_key(meta: dict) -> str | None:
    """A hash of the identity in ``meta.json`` less its ``compression``; None when there is no identity."""
    return _key(meta, ("compression",))


def engine_key(meta: dict) -> str | None:
    """A hash of the identity less its ``compression`` and ``backend``: what the full cache of two engines shares
    (same model, task and data, sampling) when they are compared (:mod:`evals.report.engines`)."""
    return _key(meta, ("compression", "backend"))


# What a run's settings beyond its method are (a curve's series key): the identity less what other columns carry
# (compression: the method and its knobs; task: task_config; backend: the engine, in every label where it varies)
NOT_SETTINGS = ("compression", "task", "backend")


def run_settings(meta: dict) -> str:
    """The run's identity less :data:`NOT_SETTINGS` as sorted JSON (model, weights, sampling, harness); empty when
    there is no identity. Two runs of one method and task configuration are one curve only when these are equal."""
    identity = meta.get("identity")
    if not isinstance(identity, dict):
        return ""
    return json.dumps({k: v for k, v in identity.items() if k not in NOT_SETTINGS}, sort_keys=True, default=str)


def differing_settings(texts: list[str]) -> dict[str, str]:
    """``settings JSON -> name`` for runs that must not share a curve: the flattened keys whose values differ among
    ``texts`` (``gen.max_new_tokens=8``), ``settings <hash>`` when no key names the difference, ``settings unknown``
    for an empty text among others; empty when all are equal."""
    unique = list(dict.fromkeys(texts))
    if len(unique) < 2:
        return {}
    flats = {t: _flat(json.loads(t)) for t in unique if t}
    keys = sorted({k for f in flats.values() for k in f})
    differ = [k for k in keys if len({_text(f.get(k)) for f in flats.values()}) > 1]
    named = {"": "settings unknown"} if "" in unique else {}
    for text, flat in flats.items():
        named[text] = (", ".join(f"{k}={_text(flat.get(k))}" for k in differ) if differ
                       else f"settings {hashlib.sha256(text.encode()).hexdigest()[:8]}")
    return named


def _relative(run_dir: str | None, root: Path) -> str | None:
    """A run directory named in ``meta.json`` (``same_as``: the full-cache run whose rows a run copied), relative
    to the report's root when it lies under it."""
    if not run_dir:
        return None
    try:
        return Path(run_dir).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(run_dir)


def read_summary(path: Path) -> pd.DataFrame | str:
    """The table of one ``summary.csv``, or why it cannot be read (then the report skips it, with one line).

    Opened without blocking and checked as it is opened: a FIFO (which would block forever), a device, a folder
    or a socket of that name is not a file; an empty file, one that is not a CSV table or that lacks a column of
    :data:`REQUIRED` is not a run's summary."""
    try:
        data = read_regular(path)
    except ValueError as exc:
        return str(exc).removeprefix(f"{path}: ")
    if not data.strip():
        return "empty"
    try:
        frame = pd.read_csv(io.BytesIO(data))
    except (ValueError, UnicodeDecodeError) as exc:  # pandas' ParserError and EmptyDataError are ValueErrors
        return f"not a CSV table: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        return f"no column {', '.join(missing)}"
    if frame.empty:
        return "no rows"
    return bad_numbers(frame) or frame


def bad_numbers(frame: pd.DataFrame) -> str:
    """Why a summary's numbers cannot be a run's, naming the column (empty when they can): an infinity, or a finite
    value beyond :data:`TOO_LARGE` (no measurement: a log axis overflowed from 1e299), in any numeric column, a count
    (:data:`COUNTS`) that is negative or not a number, a ``value`` that is not a number, or
    a headline (the task's primary metric, group ``all``) that is NaN. Other NaNs are what a summary holds where a
    value does not exist (a standard error of one item, a rate of an empty group)."""
    from evals.report.metrics import primary_metric

    for col in ("value", *UNCERTAINTY, *COUNTS):
        if col not in frame.columns:
            continue
        raw = frame[col]
        num = pd.to_numeric(raw, errors="coerce")
        text = raw[num.isna() & raw.notna()]
        if len(text):
            return f"column {col}: not a number ({str(text.iloc[0])[:40]!r}{_where(frame, text.index[0])})"
        for what, hit in (("infinite", np.isinf(num)), ("too large", np.isfinite(num) & (num.abs() > TOO_LARGE)),
                          ("negative", (num < 0) if col in COUNTS else None)):
            if hit is not None and hit.any():
                first = hit[hit].index[0]
                return f"column {col}: {what} ({num[first]:g}{_where(frame, first)})"
    for task, part in frame.groupby(frame["task"].astype(str), sort=False):
        metric = primary_metric(task, part)
        head = part[(part["metric"] == metric) & (part.get("group", "all") == "all")]
        if len(head) and pd.to_numeric(head["value"], errors="coerce").isna().any():
            return f"column value: nan for the headline {metric}{_where(frame, head.index[0])}"
    return ""


def _where(frame: pd.DataFrame, index) -> str:
    row = frame.loc[index]
    group = f", group {row['group']}" if "group" in frame.columns else ""
    return f": metric {row['metric']}{group}"


def unfinished_shards(root: Path) -> list[Path]:
    """Run directories under ``root`` whose shards (``shard=K/N``, docs/sharding.md) have not finished the run: not in
    the report (no ``summary.csv`` yet), each said in one warning naming the shards that have ended."""
    out = []
    for path in sorted(root.rglob("meta.json")):
        meta = run_meta(path.parent)
        shards = meta.get("shards")
        if isinstance(shards, dict) and shards and meta.get("status") != "complete":
            out.append(path.parent)
            log.warning("%s: not in the report: a sharded run not finished (shards %s ended; the other shards, or the "
                        "plain command without shard=, finish it)", path.parent, ", ".join(sorted(shards)))
    return out


def collect(root: Path) -> pd.DataFrame:
    """All summary rows under ``root`` (a run directory or a tree of them); a run whose ``summary.csv`` cannot be
    read (:func:`read_summary`), whose ``meta.json`` cannot (:func:`read_meta`) or whose ``samples.csv`` is not a
    regular file or not a table is skipped with one warning naming the file.

    Each row gets its run's ``backend``, ``generation_id`` and ``grading_id`` (from its rows,
    :mod:`evals.report.likeness`; several joined by `` + ``) and ``engine_key`` (:func:`engine_key`)."""
    files = sorted(p for p in root.rglob("summary.csv") if p.name == "summary.csv")
    unfinished_shards(root)
    if not files:
        raise ValueError(f"DIR: no summary.csv under {root}")
    frames = []
    for path in files:
        frame = read_summary(path)
        if isinstance(frame, str):
            log.warning("%s: skipped (%s)", path, frame)
            continue
        try:
            meta = read_meta(path.parent)
            samples = path.parent / "samples.csv"
            why = why_not_regular(samples)
            if why:
                raise NotReadable(samples, why)
            code = run_code(path.parent)
        except NotReadable as exc:  # the file named, the run left out
            log.warning("%s: skipped (%s)", exc.path, exc.why)
            continue
        rel = path.parent.relative_to(root).as_posix()
        frame["run"] = rel if rel != "." else root.name
        if "fingerprint" not in frame.columns:
            frame["fingerprint"] = meta.get("fingerprint")
        frame["pair_key"] = pair_key(meta)
        frame["engine_key"] = engine_key(meta)
        frame["run_settings"] = run_settings(meta)
        frame["backend"] = id_text(code.backend)
        frame["generation_id"] = id_text(code.generation)
        frame["grading_id"] = id_text(code.grading)
        frame["same_as"] = _relative(meta.get("same_as"), root)
        frame["run_dir"] = str(path.parent)
        task = meta.get("identity", {}).get("task") if isinstance(meta.get("identity"), dict) else None
        frame["task_settings"] = json.dumps(task, sort_keys=True, default=str) if isinstance(task, dict) else ""
        frames.append(frame)
    if not frames:
        raise ValueError(f"DIR: no readable summary.csv under {root} ({len(files)} skipped)")
    out = pd.concat(frames, ignore_index=True)
    for col in UNCERTAINTY:
        if col not in out.columns:
            out[col] = np.nan
    if "unit" not in out.columns:
        out["unit"] = ""
    out["unit"] = out["unit"].fillna("")
    out["prompt_budget"] = budget_axis(out)
    out["task_config"] = task_config_labels(out)
    return out


def budget_axis(summary: pd.DataFrame) -> pd.Series:
    """Each row's budget on the report's one budget axis (the ``prompt_budget`` column): the value of its method's
    own budget knob (``CompressionMethod.budget_knob``: ``prompt_budget``, or ``budget`` for the whole-cache
    methods). What the budget caps is shown beside it wherever it is printed (``references.budget_text``), so a
    prompt budget and a whole-cache budget are never read as one quantity."""
    from snapstream_core.methods import METHODS

    out = pd.to_numeric(summary["prompt_budget"], errors="coerce") if "prompt_budget" in summary else pd.Series(
        np.nan, index=summary.index)
    for name, cls in METHODS.items():
        knob = cls.budget_knob
        if knob != "prompt_budget" and knob in summary.columns:
            mine = summary["method"] == name
            out = out.where(~mine, pd.to_numeric(summary.loc[mine, knob], errors="coerce"))
    return out


DERIVED = ("data_sha256", "items_read")  # follow from the other settings and the data: shown only when alone


def _flat(settings: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value
    return out


def _text(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    return str(value) if not isinstance(value, list) else ",".join(map(str, value))


def task_config_labels(summary: pd.DataFrame) -> pd.Series:
    """Per summary row, its run's task configuration named by the settings that differ from the other runs of the
    same task (``context_tokens=1024, limit=3``); ``data=<sha>`` when only the data differ; ``settings unknown``
    for a run without ``meta.json`` among runs with one; empty when the task has one configuration."""
    labels = pd.Series("", index=summary.index, dtype=object)
    settings = summary["task_settings"] if "task_settings" in summary.columns else pd.Series("", index=summary.index)
    for _, frame in summary.groupby("task", sort=False):
        configs = {s: _flat(json.loads(s)) for s in dict.fromkeys(settings[frame.index]) if s}
        unknown = (settings[frame.index] == "").any()
        if len(configs) + int(unknown) < 2:
            continue
        keys = sorted({k for c in configs.values() for k in c})
        differ = [k for k in keys if len({_text(c.get(k)) for c in configs.values()}) > 1]
        shown = [k for k in differ if k.split(".")[-1] not in DERIVED]
        named: dict[str, str] = {}
        for text, flat in configs.items():
            if shown:
                named[text] = ", ".join(f"{k}={_text(flat.get(k))}" for k in shown)
            elif differ:
                named[text] = f"data={str(flat.get('data_sha256', ''))[:8]}"
            else:
                named[text] = "settings known"
        for idx in frame.index:
            labels[idx] = named.get(settings[idx], "settings unknown")
    return labels


def identities(summary: pd.DataFrame) -> dict[str, dict]:
    """``run -> identity`` (``meta.json``'s) for every run of ``summary`` that has one."""
    out = {}
    for run, run_dir in summary[["run", "run_dir"]].drop_duplicates().itertuples(index=False):
        identity = run_meta(Path(run_dir)).get("identity")
        if isinstance(identity, dict):
            out[str(run)] = identity
    return out
