"""kvpress's side of the cross-check, run in ``.venv-kvpress``: ``python bench/kvpress_check/theirs.py FOLDER --rep R``.

Imports kvpress, transformers < 5.3 and torch only (never our packages). Rep 0 also records, for every press with a
twin of ours (:data:`SCORED`), per layer, the sorted positions each KV head keeps into ``theirs_selection.json``: the
top-``n_kept`` of its scores, exactly as ``ScorerPress.compress`` takes them; for ``PyramidKVPress`` the top of the
layer's own ``get_layer_budget``; for ``AdaKVPress`` (on ``SnapKVPress``) every position its ``compress`` does not
put in ``module.masked_key_indices``. Its scores (H_kv, T) per layer go into ``theirs_scores_<method>.pt`` (AdaKV's:
its SnapKV's, before the safeguard). Every rep times: no press; each press at prefill; and ``SnapKVPress`` + its
``DecodingPress`` (``StreamingLLMPress`` every ``decode_interval`` steps back to ``n_keep`` entries) into
``theirs_rep<R>.json``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from common import keep_ratio, load_model, read_job, selected_positions, timed_run
from kvpress import (
    AdaKVPress,
    DecodingPress,
    ExpectedAttentionPress,
    KeyDiffPress,
    KnormPress,
    PrefillDecodingPress,
    PyramidKVPress,
    SnapKVPress,
    StreamingLLMPress,
    TOVAPress,
)
from kvpress.utils import compute_n_kept
from transformers import DynamicCache

# Our method name -> its kvpress twin (the same names as ours.SCORED).
SCORED = {"snapkv": SnapKVPress, "knorm": KnormPress, "tova": TOVAPress, "keydiff": KeyDiffPress,
          "expected_attention": ExpectedAttentionPress, "adakv": AdaKVPress,
          "pyramidkv": PyramidKVPress}  # fmt: skip


def recording(cls):
    """``cls`` that keeps each layer's scores (B dropped: (H_kv, T)), in call order = layer order, and for
    PyramidKV each layer's budget."""

    @dataclass
    class Recording(cls):
        record: list = field(default_factory=list)
        budgets: list = field(default_factory=list)

        def score(self, module, hidden_states, keys, values, attentions, kwargs):
            scores = super().score(module, hidden_states, keys, values, attentions, kwargs)
            self.record.append(scores[0].detach().clone())
            return scores

        def get_layer_budget(self, module, q_len):
            n = super().get_layer_budget(module, q_len)
            self.budgets.append(n)
            return n

    return Recording


@dataclass
class RecordingAdaKV(AdaKVPress):
    """``AdaKVPress`` that keeps, per layer, the sorted positions each KV head of row 0 keeps: those its
    ``compress`` leaves out of ``module.masked_key_indices``."""

    kept: list = field(default_factory=list)

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        out = super().compress(module, hidden_states, keys, values, attentions, kwargs)
        batch, head, seq = module.masked_key_indices
        keep = torch.ones(keys.shape[1], keys.shape[2], dtype=torch.bool)
        keep[head[batch == 0].cpu(), seq[batch == 0].cpu()] = False
        self.kept.append([row.nonzero().flatten().tolist() for row in keep])
        return out

    @property
    def record(self):
        return self.press.record


def ratio_for(n_tokens: int, n_keep: int) -> float:
    """A ``compression_ratio`` for which kvpress keeps exactly ``n_keep`` of ``n_tokens``."""
    ratio = keep_ratio(n_tokens, n_keep)
    if compute_n_kept(n_tokens, ratio) != n_keep:
        raise ValueError(f"no compression_ratio keeps exactly {n_keep} of {n_tokens} tokens")
    return ratio


def _press(name: str, job: dict, ratio: float, record: bool = False):
    """The press twin of our method ``name``, at kvpress's defaults but ``compression_ratio`` (and SnapKV's window
    and kernel from the job; AdaKV on that SnapKV at its default ``alpha_safeguard``; PyramidKV with the job's
    window, kernel and ``pyramid_beta``)."""
    if name == "adakv":
        inner = _press("snapkv", job, ratio, record)
        return RecordingAdaKV(press=inner) if record else AdaKVPress(press=inner)
    cls = SCORED[name]
    cls = recording(cls) if record else cls
    if name == "snapkv":
        return cls(compression_ratio=ratio, window_size=job["window"], kernel_size=job["kernel"])
    if name == "pyramidkv":
        return cls(compression_ratio=ratio, window_size=job["window"], kernel_size=job["kernel"],
                   beta=job["pyramid_beta"])
    return cls(compression_ratio=ratio)


def kept_positions(name: str, press, n_kept: int) -> list[list[list[int]]]:
    """(L, H_kv, kept) sorted positions a recording press kept on row 0 of its last forward."""
    if name == "adakv":
        return press.kept
    if name == "pyramidkv":
        return [selected_positions(s, n) for s, n in zip(press.record, press.budgets, strict=True)]
    return [selected_positions(scores, n_kept) for scores in press.record]


def presses(job: dict, ratio: float) -> dict:
    decoding = DecodingPress(
        base_press=StreamingLLMPress(n_sink=4),
        compression_interval=job["decode_interval"],
        target_size=job["n_keep"],
    )
    out = {"none": None, "snapkv": _press("snapkv", job, ratio)}
    out["snapkv+decoding"] = PrefillDecodingPress(prefilling_press=_press("snapkv", job, ratio),
                                                  decoding_press=decoding)
    out.update({name: _press(name, job, ratio) for name in SCORED if name != "snapkv"})
    return out


@torch.no_grad()
def record_selection(model, ids: torch.Tensor, job: dict, ratio: float, folder: Path) -> None:
    n_kept = compute_n_kept(ids.shape[-1], ratio)
    kept = {}
    for name in SCORED:
        press = _press(name, job, ratio, record=True)
        cache = DynamicCache()
        with press(model):
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        kept[name] = kept_positions(name, press, n_kept)
        torch.save([s.cpu() for s in press.record], folder / f"theirs_scores_{name}.pt")
    (folder / "theirs_selection.json").write_text(json.dumps({"kept": kept, "compression_ratio": ratio}))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("folder", type=Path)
    p.add_argument("--rep", type=int, default=0)
    p.add_argument("--select-only", action="store_true", help="record the kept positions (rep 0) and time nothing")
    a = p.parse_args()
    job = read_job(a.folder)
    model = load_model(job["model_dir"])
    ids = torch.tensor([job["ids"]])
    ratio = ratio_for(ids.shape[-1], job["n_keep"])
    if a.rep == 0:
        record_selection(model, ids, job, ratio, a.folder)
    if a.select_only:
        return
    named = list(presses(job, ratio).items())
    k = a.rep % len(named)
    out = {}
    timed_run(model, ids[:, :256], DynamicCache(), 2)  # warm-up
    for name, press in named[k:] + named[:k]:
        prefill_ctx = press(model) if press is not None else None
        decode_ctx = press(model) if isinstance(press, PrefillDecodingPress) else None
        out[name] = timed_run(model, ids, DynamicCache(), job["steps"], prefill_ctx, decode_ctx)
    (a.folder / f"theirs_rep{a.rep}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main()
