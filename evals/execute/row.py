"""The ``samples.jsonl`` row of one graded outcome (docs/architecture.md, "Result rows")."""

from __future__ import annotations

from typing import Any

from evals.execute.code_identity import commit
from evals.execute.prepare import RunPlan
from evals.execute.work import Outcome
from evals.record.geometry import row_geometry
from snapstream_core.methods import knob_names


def build_row(p: RunPlan, o: Outcome) -> dict[str, Any]:
    """The row of ``o``: the run's labels, the method's knobs, what was measured, the verdict, the completion."""
    req, s = o.request, o.sample
    knobs = p.method.knobs()
    row: dict[str, Any] = {
        "run_id": p.run_id,
        "fingerprint": p.fingerprint,
        "model": p.spec.model.name,
        "weights": p.weights,
        "task": p.spec.task.name,
        "item_id": str(req.item.item_id),
        "sample_idx": s.sample_idx,
        "method": p.method.method,
        "backend": p.spec.backend.name,
        **{k: knobs.get(k) for k in knob_names()},
        "seed": p.seed,
        "prompt_tokens": s.prompt_tokens,
        "truncated": bool(req.prompt.truncated) if req.prompt is not None else None,
        "gen_tokens": s.gen_tokens,
        "finish_reason": s.finish_reason,
        "thinking_closed": o.thinking_closed,
        "kv_tokens_peak": s.kv.get("kv_tokens_peak"),
        "kv_bytes_peak": s.kv.get("kv_bytes_peak"),
        "latency_s": s.latency_s,
        "device": p.device,
        "prompt_hash": req.prompt_hash,
        "generation_id": p.generation_id,
        "generation_commit": commit() if p.generation_id is not None else None,
        "grading_id": p.grading_id,
        **row_geometry(p.method, s.prompt_tokens, s.gen_tokens),  # compressed, kv_tokens_mean, kv_slots_peak
        # measured after the prefill: entries held over layers and KV heads, and their bytes (allocated: above)
        "kv_tokens_total_after_prefill": s.kv.get("kv_tokens_total_after_prefill"),
        "kv_held_bytes_after_prefill": s.kv.get("kv_held_bytes_after_prefill"),
    }
    row.update({k: v for k, v in {**s.kv, **s.measured}.items() if k not in row})
    row.update({"prediction": None, "answer": None, "correct": None})
    row.update(o.scored)
    row.update({k: v for k, v in req.item.breakdown.items() if k not in row})
    row["completion"] = s.completion
    if s.stages:
        row["completions"] = s.stages
    return row
