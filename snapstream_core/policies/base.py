"""What every storage policy answers: the geometry of one layer's KV storage for one prompt, from plain numbers.

A policy is built by a method (:meth:`CompressionMethod.storage`) for one prompt of ``prompt_len`` tokens, from
numbers only (entries kept, the frozen prefix, a ring, a budget...), never from the method object: so the geometry
imports nothing of the methods and no torch (the planner runs on a laptop). All counts are per layer and KV head of
one sequence:

- ``kept``: entries a layer holds right after its prefill selection (for ragged budgets: the mean over layers and
  heads); ``frozen``: the slots of the prefix a ring never overwrites; ``prefill_slots``: the slots allocated then.
- ``tokens_held(steps)`` / ``peak_tokens(steps)``: entries held after ``steps`` decoded tokens written, and the most
  held at once meanwhile; ``footprint(new_tokens)``: the bound at the end of a generation of ``new_tokens``.
- ``slots(max_new_tokens)``: slots one decode row allocates (what the bytes of a row are: free ring slots and ragged
  padding included); ``slot_bytes`` multiplies them into bytes.
- ``row_memory(slots)``: what a decode row holds beyond its K/V (the memory model's decode-time terms).
- ``layer_class()``: the eager cache layer that stores this policy (one class per policy, :mod:`snapstream_core.layer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

NO_ROW_MEMORY = {"compacts": 0, "query_ring": 0, "attn_sum": 0, "prefill_pairs": 0}


@dataclass(frozen=True)
class StoragePolicy:
    """Base: a cache that grows by one entry per decoded token until it stops growing (subclasses say when).

    ``prompt_len`` T; ``kept`` entries held after the prefill selection."""

    name: ClassVar[str] = "base"
    prompt_len: int
    kept: int

    @property
    def frozen(self) -> int:
        """Slots of the prefix decoding never overwrites (the kept prompt, unless a ring holds part of it)."""
        return self.kept

    @property
    def prefill_slots(self) -> int:
        """Slots a layer allocates when its selection is done."""
        return self.kept

    def tokens_held(self, steps: int) -> int:
        raise NotImplementedError

    def peak_tokens(self, steps: int) -> int:
        """The most entries held at once while ``steps`` tokens are written (a cache that never shrinks)."""
        return self.tokens_held(steps)

    def footprint(self, new_tokens: int) -> int:
        """Entries held at the end of a generation of ``new_tokens`` (the bound tests and rows check)."""
        return self.tokens_held(new_tokens)

    def slots(self, max_new_tokens: int) -> int:
        raise NotImplementedError

    def slot_bytes(self, max_new_tokens: int, bytes_per_slot: int) -> int:
        """Bytes one decode row allocates: its slots times ``bytes_per_slot`` (K and V of one slot in every layer
        and KV head: ``memory.Arch.kv_bytes_per_token``)."""
        return self.slots(max_new_tokens) * bytes_per_slot

    def row_memory(self, slots: int) -> dict[str, int]:
        """What a decode row holds beyond its K/V for the memory model (``memory.job_terms``): ``compacts`` (1: slot
        positions and a compaction), ``query_ring`` (queries per layer), ``attn_sum`` (1: each slot's accumulated
        attention, fp32), ``prefill_pairs`` (key pairs per KV head the prompt cut scores pairwise). None here."""
        return dict(NO_ROW_MEMORY)

    def mean_tokens_held(self, gen_tokens: int) -> float:
        """Mean of ``tokens_held(k)`` over decoding steps ``k = 1..gen_tokens`` (``tokens_held(0)`` when nothing was
        generated), for a cache that grows by one entry a step and then stays flat: found by bisection."""
        G = gen_tokens
        start = self.tokens_held(0)
        if G <= 0:
            return float(start)
        lo, hi = 0, G  # the largest k with tokens_held(k) == start + k
        if self.tokens_held(G) == start + G:
            lo = G
        else:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self.tokens_held(mid) == start + mid:
                    lo = mid
                else:
                    hi = mid
        growing = lo * start + lo * (lo + 1) // 2  # steps 1..lo: start + k
        flat = (G - lo) * self.tokens_held(lo)  # steps lo+1..G: as held after step lo
        return (growing + flat) / G

    @classmethod
    def layer_class(cls) -> type:
        """The eager cache layer of this policy (imported here: the geometry itself needs no torch)."""
        raise NotImplementedError
