"""Decode-time (whole-cache) methods: a budget of KV entries per layer and KV head for the whole cache, kept by
compacting it every ``interval`` decoded tokens.

The schedule follows R-KV (Zefan-Cai/R-KV ``rkv/modeling.py``, ``CausalLM_forward`` and ``LlamaAttention_forward``)
and TriAttention's baselines (WeianMao/triattention ``triattention/methods/baselines/``):

- prefill: full attention over the prompt, then a prompt of ``T >= budget`` tokens is cut to ``budget`` entries by
  the method's own scores (``update_kv`` on the prompt; with ``protect_prompt`` the prompt is kept whole);
- decode: the token at position ``p`` is written, attends over everything held, and when ``p % interval == 0`` and
  the cache then holds at least ``budget`` entries, the cache is compacted to :meth:`DecodeMethod.cap` entries
  (R-KV sets its compression flag when ``length % divide_length == 0``, ``length`` counting prompt and decoded
  tokens, and compresses at the next forward, after appending, whenever ``kv_cache_len >= budget``).

So a row never holds more than ``cap + interval`` entries (``slots``), and the entries held after ``k`` decoded
tokens written (:meth:`DecodeMethod.tokens_held`) is a sawtooth that depends only on ``(T, k)``.

A compaction keeps, per (row, layer, KV head): the protected prompt slots (in slot order), then the best of the
other candidates by :meth:`DecodeMethod.compact_scores` (in score order, as the references' ``topk`` stores them),
then the last ``window`` slots held (in slot order): the references' ``cat([k_past_compress, k_cur])``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snapstream_core.methods.base import (
    CompressionMethod,
    PrefillView,
    Selection,
    check_at_most,
    check_positive,
)

if TYPE_CHECKING:
    import torch

    from snapstream_core.memory import Arch


@dataclass(frozen=True)
class CompactView:
    """What one layer exposes to a method at a compaction, for every row of the engine (fixed shapes).

    Shapes (R rows, H query heads, H_kv KV heads, S slots, D head dim, Q query ring):
    ``keys``, ``values`` (R, H_kv, S, D): the slots' post-RoPE keys and values, in slot order (``values`` is None
    at the prefill cut: no reference scores with values);
    ``positions`` (R, H_kv, S) long: each slot's original token position (slots past ``held`` hold junk);
    ``valid`` (R, H_kv, S) bool: the slots held, always the prefix ``[0, held)`` of each row;
    ``held`` (R,) long: entries held per row (the same for every layer and head);
    ``prompt_len`` (R,) long: each row's prompt length (tokens at positions below it are the prompt);
    ``queries`` (R, H, Q, D) or None: the post-RoPE queries of the row's last Q tokens, oldest first (None when
    the method's ``query_window`` is 0);
    ``scaling``: the attention scale (1/sqrt(D) for Llama); ``inv_freq`` (D/2,) float32 or None: the model's RoPE
    inverse frequencies (to un-rotate keys); ``layer_idx``: the layer.
    """

    keys: torch.Tensor
    values: torch.Tensor | None
    positions: torch.Tensor
    valid: torch.Tensor
    held: torch.Tensor
    prompt_len: torch.Tensor
    queries: torch.Tensor | None
    scaling: float
    inv_freq: torch.Tensor | None
    layer_idx: int


@dataclass(frozen=True)
class DecodeMethod(CompressionMethod):
    """Base of the decode-time methods. Knobs: ``budget`` KV entries per layer and KV head kept for the whole
    cache; ``interval`` decoded tokens between compactions (the references' ``divide_length``); ``window`` most
    recent entries always kept (the references' ``window_size``); ``protect_prompt`` keep every prompt token
    (TriAttention's ``protect_prefill``; False: the prompt competes for the budget, as in R-KV).

    A subclass sets ``method``, :attr:`query_window` and writes :meth:`compact_scores`."""

    method: ClassVar[str] = "decode_base"
    budget_cap: ClassVar[str] = "cache"
    budget_knob: ClassVar[str] = "budget"
    budget: int = 512
    interval: int = 128
    window: int = 8
    protect_prompt: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.interval, int) or isinstance(self.interval, bool) or self.interval <= 0:
            raise ValueError(f"compression.interval: must be an integer > 0, got {self.interval!r}")
        check_at_most("interval", self.interval)
        check_positive("window", self.window)
        check_positive("budget", self.budget)
        if self.budget <= self.window:
            raise ValueError(f"compression.budget: must exceed window ({self.window}), got {self.budget}")
        if not isinstance(self.protect_prompt, bool):
            raise ValueError(f"compression.protect_prompt: must be true or false, got {self.protect_prompt!r}")
        if self.positions != "original":
            raise ValueError(f"compression.positions: {self.method} compacts in the engine, which keeps original "
                             f"positions; got {self.positions!r}")

    def check_engine(self, where: str) -> None:
        """Refuse a decoding path other than the engine: it would never compact (``where`` names that path)."""
        raise ValueError(f"compression.method: {self.method} compacts the cache while decoding, which only the engine "
                         f"does (backend=hf); {where} would never compact")

    # ------------------------------------------------------------------ what a subclass says
    @property
    def query_window(self) -> int:
        """Q, the post-RoPE queries of its last tokens a row keeps per layer for :meth:`compact_scores` (0: none)."""
        return 0

    def compact_scores(self, view: CompactView) -> torch.Tensor:
        """(R, H_kv, S) priority of each slot at a compaction (higher is kept first). Only the candidates are read:
        held slots that are neither protected nor in the last ``window``; the others may hold anything."""
        raise NotImplementedError

    def prepare(self, device: torch.device) -> None:
        """Load what :meth:`compact_scores` reads onto ``device`` (a file, say), before the compaction is traced
        or compiled; called once per engine. Default: nothing."""

    def compact_scores_layers(self, views: list[CompactView]) -> list[torch.Tensor]:
        """Every layer's (R, H_kv, S) priorities at one compaction, ``views`` in layer order. Default: each layer's
        :meth:`compact_scores`; a method whose choice spans layers (TriAttention's per-head pruning keeps one set of
        tokens per KV head in every layer) overrides this."""
        return [self.compact_scores(view) for view in views]

    def key_pairs(self, n: int) -> int:
        """Key pairs per KV head :meth:`compact_scores` scores pairwise over ``n`` slots (0: none; R-KV: n^2)."""
        return 0

    # ------------------------------------------------------------------ geometry
    @property
    def compresses(self) -> bool:
        return True

    def row_memory(self, prompt_len: int, slots: int) -> dict[str, int]:
        cut = self.key_pairs(prompt_len) if self.needs_selection(prompt_len) else 0
        return {"compacts": 1, "query_ring": self.query_window, "prefill_pairs": cut}

    def compaction_scratch(self, arch: Arch, slots: int) -> int:
        """Bytes per engine row at the peak of :meth:`compact_scores_layers` over rows of ``slots`` slots (every
        layer's scores so far and one layer's temporaries), for the memory model (``memory.compaction_bytes``;
        ``tests/test_compaction_memory.py`` checks it against tracked allocations for every registered method).
        Default, for a method without its own figure: every layer's scores in fp32 and one layer scoring with an fp32
        copy of its keys and fp32 scores per query head (``4*D + 8*G`` per KV head and slot)."""
        per_slot = 4 * arch.n_layers + 4 * arch.head_dim + 8 * (arch.n_heads // arch.n_kv_heads)
        return arch.n_kv_heads * slots * per_slot

    def protected(self, prompt_len: int) -> int:
        """Prompt tokens never evicted."""
        return prompt_len if self.protect_prompt else 0

    def cap(self, prompt_len: int) -> int:
        """Entries a compaction keeps: ``budget``, or the protected prompt and the window when they need more."""
        return max(self.budget, self.protected(prompt_len) + self.window)

    def kept(self, prompt_len: int) -> int:
        """Entries after prefill: ``budget`` when the prompt is cut (``T >= budget``, prompt not protected)."""
        return self.budget if self.needs_selection(prompt_len) else prompt_len

    def frozen(self, prompt_len: int) -> int:
        return self.kept(prompt_len)

    def needs_selection(self, prompt_len: int) -> bool:
        return not self.protect_prompt and prompt_len >= self.budget

    def query_rows(self, prompt_len: int) -> int:
        """The query window: scored with at prefill, and the seed of the decode query ring."""
        return min(max(self.window if self.needs_selection(prompt_len) else 0, self.query_window), prompt_len)

    def compacts(self, prompt_len: int, steps: int) -> bool:
        """Whether the ``steps``-th decoded token written (at position ``prompt_len + steps - 1``) compacts."""
        p = prompt_len + steps - 1
        return steps >= 1 and p % self.interval == 0 and self._before(prompt_len, steps) >= self.budget

    def _before(self, prompt_len: int, steps: int) -> int:
        """Entries held right after writing the ``steps``-th token, before its compaction."""
        return self.tokens_held(prompt_len, steps - 1) + 1

    def tokens_held(self, prompt_len: int, steps: int) -> int:
        """Entries held after ``steps`` decoded tokens written and compacted (the sawtooth)."""
        held, T, first = self.kept(prompt_len), prompt_len, prompt_len
        # compaction points: positions p >= T with p % interval == 0, at write number p - T + 1
        p = -(-first // self.interval) * self.interval
        done = 0
        while p <= T + steps - 1:
            k = p - T + 1
            before = held + (k - done)
            held, done = (min(before, self.cap(T)) if before >= self.budget else before), k
            p += self.interval
        return held + (steps - done)

    def peak_tokens(self, prompt_len: int, steps: int) -> int:
        """Most entries held at once while ``steps`` tokens are written (a step attends before it compacts)."""
        peak = self.kept(prompt_len)
        T = prompt_len
        p = -(-T // self.interval) * self.interval
        while p <= T + steps - 1:
            peak = max(peak, self._before(T, p - T + 1))
            p += self.interval
        return max(peak, self.tokens_held(T, steps))

    def mean_tokens_held(self, prompt_len: int, gen_tokens: int) -> float:
        """Mean of the sawtooth over steps ``1..gen_tokens``: summed a segment (between compactions) at a time."""
        T, G = prompt_len, gen_tokens
        if G <= 0:
            return float(self.tokens_held(T, 0))
        total, k = 0, 1
        for point in [*self._points(T, G), G + 1]:  # steps k..point-1 grow by one from tokens_held(T, k)
            if point > k:
                n, first = point - k, self.tokens_held(T, k)
                total += n * first + n * (n - 1) // 2
            if point <= G:
                total += self.tokens_held(T, point)
            k = point + 1
        return total / G

    def footprint(self, prompt_len: int, new_tokens: int) -> int:
        """The most entries held at once over a generation of ``new_tokens`` (a bound: the cache shrinks)."""
        return self.peak_tokens(prompt_len, max(new_tokens - 1, 0))

    def slots(self, prompt_len: int, max_new_tokens: int) -> int:
        """Slots of one decode row: the most entries held at once (at most ``cap + interval``)."""
        return self.peak_tokens(prompt_len, max(max_new_tokens - 1, 0))

    def prefill_slots(self, prompt_len: int) -> int:
        return self.kept(prompt_len)

    def keeps_all(self, prompt_len: int, new_tokens: int) -> bool:
        """Provably the full cache's tokens: no prefill cut and no compaction over the run (a compaction that keeps
        every entry still reorders the slots)."""
        steps = max(new_tokens - 1, 0)
        return (self.positions == "original" and not self.needs_selection(prompt_len)
                and not any(self.compacts(prompt_len, k) for k in self._points(prompt_len, steps)))

    def _points(self, prompt_len: int, steps: int) -> range:
        """Write numbers k in [1, steps] at compaction positions."""
        first = -(-prompt_len // self.interval) * self.interval - prompt_len + 1
        return range(first, steps + 1, self.interval)

    # ------------------------------------------------------------------ prefill
    def select(self, view: PrefillView) -> Selection:
        """The prompt cut (``T >= budget``): the compaction's rule on the prompt (its last ``window`` queries), the
        kept tokens stored in the compaction's order (R-KV runs ``update_kv`` on the prompt at prefill)."""
        from snapstream_core.engine.compact import prefill_selection

        return prefill_selection(self, view)
