"""H2O: heavy hitters by accumulated attention, plus a recent window, over the whole cache while decoding.

Zhang et al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language Models" (arXiv
2306.14048). We follow FMInference/H2O at ac75c2a, ``h2o_hf/utils_real_drop/modify_llama.py``
(``H2OKVCache_LayerWise``, called from ``H2OLlamaAttention.forward`` with each forward's softmax weights):

- ``_update_hh_score``: each held token's score is the sum of the attention weights every query gave it since it was
  written, the prompt's queries included (the prefill's call seeds it with the prompt's causal attention summed over
  the prompt's queries; each decode step adds its query's weights, and a new token starts at its own weight);
- ``__call__``: when the cache holds more than ``hh_size + recent_size`` tokens, keep the ``recent_size`` latest and
  the ``hh_size`` earlier tokens of highest score; the scores move with the kept tokens.

Here ``budget = hh_size + recent_size`` and ``window = recent_size``; the running sum is an engine buffer beside the
rows' K/V (``RowBatch.attn_sum``, (L, R, H_kv, S) float32) that the decode step adds to inside its attention and
the compaction permutes with the slots (``CompactView.attn_sum``). The reference evicts after every token; here the
cache is cut on the schedule of the other decode methods (``interval``; ``interval=1`` is the reference's schedule,
and the kept tokens are the reference's: ``tests/test_h2o_fidelity.py``). The reference is written for multi-head
attention (one score per query head); with grouped-query attention each KV head's score is the mean over its query
heads, as KVCache-Factory's ``H2OKVCluster`` reduces them (``pyramidkv/pyramidkv_utils.py``,
``_reduce_group_scores``, ``gqa_score_agg='mean'``). The reference sums in the model's dtype; we sum in float32.
R-KV's "H2O" (``rkv/compression/h2o.py``) is another rule: the last query's attention, nothing accumulated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snapstream_core.methods.decode_base import CompactView, DecodeMethod

if TYPE_CHECKING:
    import torch



@dataclass(frozen=True)
class H2O(DecodeMethod):
    """Knobs: ``budget`` entries per layer and KV head for the whole cache (the reference's ``hh_size +
    recent_size``), ``interval`` tokens between compactions (1: after every token, as the reference), ``window`` the
    recent entries always kept (``recent_size``), ``protect_prompt`` keep the prompt (:class:`DecodeMethod`)."""

    method: ClassVar[str] = "h2o"
    policy: ClassVar[str] = "compacting"
    accumulates_attention: ClassVar[bool] = True
    tag_order: ClassVar[tuple[str, ...]] = ("budget", "interval", "window", "protect_prompt", "positions")

    def score_buffers(self, prompt_len: int) -> tuple[int, int]:
        """The prompt's attention (``decode_scores.prompt_attention``): the keys in fp32, one (H_kv, T, D) buffer,
        and a block of :func:`prompt_block` query rows at a time, logits and weights, two (H, T) fp32 buffers per
        row of the block."""
        from snapstream_core.attention_sums import prompt_block

        return (1, 2 * prompt_block(prompt_len))

    def compact_scores(self, view: CompactView) -> torch.Tensor:
        """(R, H_kv, S) the accumulated attention of each slot."""
        if view.attn_sum is None:
            raise ValueError("compression=h2o: the compaction needs the accumulated attention (CompactView.attn_sum)")
        return view.attn_sum

    def select(self, view):
        """The prompt cut (``T >= budget``): the compaction's rule on the prompt, scored by the prompt's attention
        summed over all its queries (``PrefillView.attn_sum``; the reference's first ``__call__``)."""
        from snapstream_core.methods.decode_base import prefill_selection

        if view.attn_sum is None:
            raise ValueError("compression=h2o: the prompt cut needs the prompt's attention (PrefillView.attn_sum)")
        return prefill_selection(self, view, attn_sum=view.attn_sum)

    def compaction_scratch(self, arch, slots: int) -> int:
        """Bytes per engine row at a compaction's peak (``memory.compaction_bytes``): one layer's move with every
        layer's scores held (``memory.move_bytes``), and the accumulated attention read in fp32 and moved with the
        slots (gathered, then selected): 16 bytes per (KV head, slot), measured on CPU
        (``tests/test_compaction_memory.py``)."""
        from snapstream_core.memory import move_bytes

        return move_bytes(arch, slots) + 16 * arch.n_kv_heads * slots
