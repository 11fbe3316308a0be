"""Our side of the kvpress cross-check (our environment): ``python -m bench.kvpress_check.ours FOLDER --rep R``.

Rep 0 also records our selection of every method with a kvpress twin (:data:`SCORED`): per layer, the sorted
positions each KV head keeps, into ``ours_selection.json``, and the scores each layer's selection ranked by, into
``ours_scores_<method>.pt`` (B dropped: (H_kv, T) per layer, ``+inf`` on what the method always keeps; SnapKV's divided
by its window, since kvpress averages over the window where SnapKV sums: the order is the same). Every rep times
every method of :func:`methods` (prefill + greedy decode, the same loop as kvpress's side) into ``ours_rep<R>.json``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

import snapstream_core as ss
from bench.kvpress_check.common import keep_ratio, load_model, read_job, timed_run
from snapstream_core.methods import AdaKV, PyramidKV
from snapstream_core.methods.base import PrefillView, Selection

# Our methods whose kept positions are compared with a kvpress press (compare.TWINS names the press).
SCORED = ("snapkv", "knorm", "tova", "keydiff", "expected_attention", "adakv", "pyramidkv")


def recording(cls: type[ss.CompressionMethod]) -> type[ss.CompressionMethod]:
    """``cls`` that keeps each layer's selection scores (in call order = layer order)."""

    @dataclass(frozen=True)
    class Recording(cls):
        record: list = field(default_factory=list, compare=False, repr=False)

        def select(self, view: PrefillView) -> Selection:
            sel = super().select(view)
            self.record.append(sel.scores[0].detach().clone())
            return sel

    return Recording


def _snapkv_knobs(job: dict) -> dict:
    return dict(prompt_budget=job["n_keep"], window=job["window"], kernel=job["kernel"], pooling="avg",
                gqa_agg="mean", sinks=0)  # fmt: skip


def _build(name: str, job: dict, record: bool = False) -> ss.CompressionMethod:
    """Our method ``name`` at kvpress's knobs: SnapKV with avg pooling, GQA mean, no sinks; the scorers with
    kvpress's defaults (no sinks, ExpectedAttention's 4 sinks and 512 future positions), the same number kept; AdaKV
    on that SnapKV (``alpha_safeguard`` 0.2, kvpress's default); PyramidKV on that SnapKV at kvpress's
    ``compression_ratio`` (its budgets read the float ``T * (1 - ratio)``) and the job's ``pyramid_beta``."""
    n = job["n_keep"]
    classes = {"snapkv": ss.SnapKV, "knorm": ss.Knorm, "tova": ss.TOVA, "keydiff": ss.KeyDiff,
               "expected_attention": ss.ExpectedAttention, "adakv": AdaKV, "pyramidkv": PyramidKV}  # fmt: skip
    if name == "snapstream":
        return ss.SnapStream(**_snapkv_knobs(job), recent=job["recent"])
    if name == "none":
        return ss.NoCompression()
    cls = recording(classes[name]) if record else classes[name]
    if name == "adakv":
        return cls(scorer="snapkv", alpha_safeguard=0.2, **_snapkv_knobs(job))
    if name == "pyramidkv":
        knobs = {**_snapkv_knobs(job), "prompt_budget": None}
        return cls(**knobs, ratio=keep_ratio(len(job["ids"]), n), beta=job["pyramid_beta"])
    return cls(**_snapkv_knobs(job)) if name == "snapkv" else cls(prompt_budget=n)


def methods(job: dict) -> dict[str, ss.CompressionMethod]:
    return {name: _build(name, job) for name in ("none", "snapkv", "snapstream", *SCORED[1:])}


def kept_positions(layer) -> list[list[int]]:
    """Sorted positions each KV head of row 0 of a prefilled layer holds (its valid slots: a ragged layer's padding
    left out)."""
    valid = layer.valid[0] if layer.valid is not None else torch.ones_like(layer.pos[0], dtype=torch.bool)
    return [sorted(p[v].tolist()) for p, v in zip(layer.pos[0], valid, strict=True)]


@torch.no_grad()
def record_selection(model, ids: torch.Tensor, job: dict, folder: Path) -> None:
    kept = {}
    for name in SCORED:
        method = _build(name, job, record=True)
        cache = ss.make_cache(model, method)
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        kept[name] = [kept_positions(layer) for layer in cache.layers]  # (L, H_kv, n)
        scale = job["window"] if name in ("snapkv", "adakv", "pyramidkv") else 1
        torch.save([(s / scale).cpu() for s in method.record], folder / f"ours_scores_{name}.pt")
    (folder / "ours_selection.json").write_text(json.dumps({"kept": kept}))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("folder", type=Path)
    p.add_argument("--rep", type=int, default=0)
    p.add_argument("--select-only", action="store_true", help="record the kept positions (rep 0) and time nothing")
    a = p.parse_args()
    job = read_job(a.folder)
    model = load_model(job["model_dir"])
    ss.attach(model)
    ids = torch.tensor([job["ids"]])
    if a.rep == 0:
        record_selection(model, ids, job, a.folder)
    if a.select_only:
        return
    named = list(methods(job).items())
    k = a.rep % len(named)
    out = {}
    timed_run(model, ids[:, :256], ss.make_cache(model, ss.NoCompression()), 2)  # warm-up
    for name, method in named[k:] + named[:k]:
        out[name] = timed_run(model, ids, ss.make_cache(model, method), job["steps"])
    (a.folder / f"ours_rep{a.rep}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
