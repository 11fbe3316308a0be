"""The KV footprint at the configured generation length, and the note that explains an inverted frontier.

A method with a ring (StreamingLLM, SnapStream) allocates its ``recent`` slots when decoding starts. On short
generations the full cache then holds *less* than the compressed method (a 96-token AIME completion after a 100-token
prompt holds ~200 entries; a 1024-slot ring holds 1024), which reads as "compression costs memory". The bound that
matters is the footprint at ``gen.max_new_tokens``: ``method.footprint(prompt_tokens, max_new_tokens)`` entries per
layer and KV head (``snapstream_core.methods``), times the bytes one entry costs in all layers (measured on the run:
``kv_bytes_peak / kv_tokens_peak`` of the full cache of the same model in the model's dtype, else, and for a run
stored quantized, of the run itself).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd

from evals.record.files import read_regular
from evals.report.reference import full_cache

MIB = 1024 * 1024


def _quantized(knobs: dict) -> bool:
    """Whether a run's identity knobs store K/V quantized (``kv_dtype`` other than the model's dtype)."""
    return knobs.get("kv_dtype") not in (None, "auto")


def _bytes_per_entry(rows: pd.DataFrame) -> float:
    if not {"kv_tokens_peak", "kv_bytes_peak"} <= set(rows.columns):
        return math.nan
    tokens = pd.to_numeric(rows.get("kv_tokens_peak"), errors="coerce")
    size = pd.to_numeric(rows.get("kv_bytes_peak"), errors="coerce")
    ok = (tokens > 0) & size.notna()
    return float((size[ok] / tokens[ok]).median()) if ok.any() else math.nan


def _run_info(run_dir: Path) -> tuple[dict, int | None, pd.DataFrame] | None:
    from evals.report.load import run_meta

    meta = run_meta(run_dir)
    try:
        rows = pd.read_csv(io.BytesIO(read_regular(run_dir / "samples.csv")))
    except (OSError, ValueError):
        return None
    knobs = meta.get("identity", {}).get("compression")
    max_new = meta.get("config", {}).get("gen", {}).get("max_new_tokens")
    if not isinstance(knobs, dict) or rows.empty or "prompt_tokens" not in rows:
        return None
    return knobs, int(max_new) if max_new is not None else None, rows


def kv_at_max_new(head: pd.DataFrame) -> pd.Series:
    """MiB per sequence each run of ``head`` would hold at ``gen.max_new_tokens`` (mean over its prompts); NaN
    where it cannot be known (no ``meta.json``/``samples.csv``, a method this install does not register)."""
    from snapstream_core.api import compression_from_config

    infos = {run: _run_info(Path(d)) for run, d in zip(head["run"], head["run_dir"])}
    per_entry_full: dict[str, float] = {}
    for run, model, method in zip(head["run"], head["model"], head["method"]):
        if method == "none" and infos.get(run) is not None and not _quantized(infos[run][0]):
            per_entry_full.setdefault(model, _bytes_per_entry(infos[run][2]))
    out = []
    for run, model in zip(head["run"], head["model"]):
        info = infos.get(run)
        if info is None or info[1] is None:
            out.append(math.nan)
            continue
        knobs, max_new, rows = info
        try:
            method = compression_from_config(knobs)
        except (ValueError, TypeError):
            out.append(math.nan)
            continue
        per_entry = math.nan if method.kv_format.quantized else per_entry_full.get(model, math.nan)
        if math.isnan(per_entry):  # no full cache, or a quantized storage: the run's own bytes per entry
            per_entry = _bytes_per_entry(rows)
        prompts = pd.to_numeric(rows["prompt_tokens"], errors="coerce").dropna().astype(int)
        entries = [method.footprint(int(p), max_new) for p in prompts]
        out.append(float(sum(entries) / len(entries)) * per_entry / MIB if entries else math.nan)
    return pd.Series(out, index=head.index, dtype=float)


def inversion_notes(head: pd.DataFrame) -> list[str]:
    """One sentence per compressed run whose measured KV peak exceeds its full cache's (same model and task)."""
    from evals.report.tables import GROUP, task_title, with_config

    notes = []
    for (model, task, config), frame in with_config(head).groupby(GROUP, sort=False):
        ref = full_cache(frame)
        full = frame[ref]
        if full.empty or full["mean_kv_bytes_peak"].isna().all():
            continue
        full_mib = float(full["mean_kv_bytes_peak"].iloc[0]) / MIB
        full_bound = float(full["kv_mib_at_max_new"].iloc[0]) if "kv_mib_at_max_new" in full else math.nan
        for _, run in frame[~ref].iterrows():
            held = float(run["mean_kv_bytes_peak"]) / MIB if pd.notna(run["mean_kv_bytes_peak"]) else math.nan
            if not held > full_mib * 1.001:
                continue
            budget = "" if pd.isna(run["prompt_budget"]) else f" @ {int(run['prompt_budget'])}"
            gen = run.get("mean_gen_tokens")
            gen_text = f"{gen:.0f} tokens on average" if pd.notna(gen) else "few tokens"
            bound = run.get("kv_mib_at_max_new", math.nan)
            at_max = (f" The entries it uses at gen.max_new_tokens come to {bound:.2f} MiB (full cache: "
                      f"{full_bound:.2f} MiB); the rest are slots reserved for longer generations, over which the full "
                      "cache keeps growing and the method does not." if pd.notna(bound) and pd.notna(full_bound)
                      else "")
            where = task_title(task, config)
            notes.append(f"{where} · {model}: {run['label']}{budget} held {held:.2f} MiB, more than the full cache's "
                         f"{full_mib:.2f} MiB, because the generations were short ({gen_text}): the full cache grows "
                         f"with what it holds, while the method allocates its budget and ring slots when decoding "
                         f"starts.{at_max}")
    return notes
