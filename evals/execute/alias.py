"""Runs whose rows equal the full cache's by construction are not generated again: their rows are copied.

A compression method that keeps every prompt and new token of every item (:meth:`CompressionMethod.keeps_all`, the
rule :func:`evals.plan.job.alias_of` plans with) decodes the same tokens as ``compression=none`` (docs/architecture.md,
contract 1), greedy or sampled: the engine draws a sample's token from noise keyed on (seed, item, sample, step) and
the logits are the same when nothing is evicted. So before any weights load, the runner counts each pending item's
prompt tokens with the tokenizer alone (the task's prompt, cut as the task cuts it, encoded as the backend encodes it)
and, when every item is kept whole and the ``none`` run of the same model/task/generation/data is complete, copies its
rows (:func:`copy_rows`). The copied rows keep the source's measured columns (``kv_*``, ``latency_s``: the cache held
the same tokens, and no time was spent here) and say where they come from in ``same_as``; ``meta.json`` too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.config.encode import encode_prompt
from evals.config.models import load_tokenizer
from evals.execute.backends.prompts import prompt_record
from evals.execute.identity import fingerprint, sampler_of
from evals.record.rows import read_rows
from evals.record.rundir import META, SAMPLES, read_meta
from snapstream_core.methods import knob_names
from snapstream_core.methods.none import NoCompression
from tasks.base import Prompt
from tasks.protocol import hook

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    """The complete ``none`` run whose rows a run copies: its directory, its rows by (item_id, sample_idx), and the
    prompt records of the items copied (for this run's ``prompts.jsonl.gz``)."""

    run_dir: Path
    rows: dict[tuple[str, int], dict[str, Any]]
    prompts: list[dict[str, Any]]


def identity_with_method(identity: dict[str, Any], method_knobs: dict[str, Any]) -> dict[str, Any]:
    """The identity of the same run with another method (as :func:`evals.execute.identity.run_identity` builds it)."""
    gen = {k: v for k, v in identity["gen"].items() if k != "sampler"}
    sampler = sampler_of(gen, method_knobs)
    return {**identity, "compression": method_knobs, "gen": gen | ({"sampler": sampler} if sampler else {})}


def none_run_dir(run_dir: str, tag: str, fp: str) -> Path:
    """The ``none`` run's directory: the config's ``run_dir`` with the compression's directory name replaced by
    ``none`` (as :func:`evals.plan.job.alias_of` names it), in its ``fp-<fingerprint>`` folder."""
    return Path("/".join("none" if part == tag else part for part in run_dir.split("/"))) / f"fp-{fp}"


def _complete_rows(run_dir: Path, fp: str) -> dict[tuple[str, int], dict[str, Any]] | None:
    """The rows of a complete run of fingerprint ``fp`` in ``run_dir``, or None (absent, running, another identity,
    rows lost)."""
    meta = read_meta(run_dir / META)
    if meta is None or meta.get("status") != "complete" or meta.get("fingerprint") != fp or meta.get("same_as"):
        return None
    try:
        rows = read_rows(run_dir / SAMPLES, fp)  # every row that run's own
    except ValueError:
        return None
    if len(rows) != meta.get("n_rows"):
        return None
    return {(str(r["item_id"]), r["sample_idx"]): r for r in rows}


def find_source(p: Any, pending: list[tuple[Any, tuple[int, ...]]]) -> Source | None:
    """The complete ``none`` run this run's ``pending`` (item, sample indices) can be copied from, or None (with one
    INFO line saying why, when the method could keep everything). ``p``: the run's
    :class:`evals.execute.prepare.RunPlan`."""
    method = p.method
    if not method.compresses or method.positions != "original" or not pending:
        return None
    if hook(p.task, "followup") is not None:  # a second call (LongBench-v2 CoT) has prompts not counted here
        return None
    G = p.sampling.max_new_tokens
    if not method.keeps_all(1, G):  # cheapest test first: not even a one-token prompt is kept whole
        return None
    tokenizer = load_tokenizer(p.spec.model)  # the tokenizer alone: no weights load for a copied run
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    longest, records = 0, []
    system = None if p.spec.model.thinking else p.spec.model.system_prompt
    for item, _ in pending:
        prompt = p.task.prompt(item, p.spec.model, cfg=p.spec.task, tokenizer=tokenizer)
        prompt = prompt if isinstance(prompt, Prompt) else Prompt(prompt)
        T = len(encode_prompt(tokenizer, p.spec.model, prompt))
        new = int((prompt.gen or {}).get("max_new_tokens") or G)  # a task's protocol may fix it per request
        if not method.keeps_all(T, max(new, G)):
            return None
        longest = max(longest, T)
        records.append(prompt_record(prompt, system))
    fp = fingerprint(identity_with_method(p.identity, NoCompression().knobs()))
    source = none_run_dir(p.spec.run_dir, p.spec.compression_tag, fp)
    rows = _complete_rows(source, fp)
    keys = [(str(item.item_id), i) for item, idx in pending for i in idx]
    if rows is None or any(k not in rows or rows[k].get("generation_id") != p.generation_id for k in keys):
        log.info("%s keeps every token of its %d items (longest prompt %d + %d new tokens) but the full-cache run "
                 "%s is absent or incomplete: generating", p.run_id, len(pending), longest, G, source)
        return None
    log.info("%s keeps every token of its %d items (longest prompt %d + %d new tokens): copying %d rows of the "
             "full-cache run %s instead of generating them", p.run_id, len(pending), longest, G, len(keys), source)
    return Source(source, {k: rows[k] for k in keys}, records)


def copy_rows(p: Any, source: Source) -> list[dict[str, Any]]:
    """``source``'s rows as this run's: its ``run_id``, ``fingerprint``, method and knob columns, and ``same_as``
    (the source's ``run_id``); every other column (completions, scores, ``kv_*``, ``latency_s``) as the source's."""
    knobs = p.method.knobs()
    out = []
    for row in source.rows.values():
        row = {**row, "run_id": p.run_id, "fingerprint": p.fingerprint, "method": p.method.method,
               **{k: knobs.get(k) for k in knob_names()}, "same_as": row["run_id"]}
        out.append(row)
    return out
