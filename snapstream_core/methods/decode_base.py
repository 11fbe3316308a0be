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
tokens written is a sawtooth that depends only on ``(T, k)``: the ``compacting`` storage policy
(:class:`~snapstream_core.policies.CompactingPolicy`) owns it; a method gives it its numbers.

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
from snapstream_core.policies import CompactingPolicy

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
    inverse frequencies (to un-rotate keys); ``layer_idx``: the layer;
    ``row_keys`` (R,) long or None: each row's sample noise key (``engine.noise.sample_key``: seed, item, sample), so
    a method's randomness follows the sample, not its row (``random``);
    ``attn_sum`` (R, H_kv, S) float32 or None: each slot's attention accumulated since its token was written (the
    prompt's from prefill; ``h2o``; None unless the method's ``accumulates_attention``).
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
    row_keys: torch.Tensor | None = None
    attn_sum: torch.Tensor | None = None


@dataclass(frozen=True)
class DecodeMethod(CompressionMethod):
    """Base of the decode-time methods. Knobs: ``budget`` KV entries per layer and KV head kept for the whole
    cache; ``interval`` decoded tokens between compactions (the references' ``divide_length``); ``window`` most
    recent entries always kept (the references' ``window_size``); ``protect_prompt`` keep every prompt token and
    score only the decode segment (TriAttention's ``protect_prefill``, ``R1KV._update_kv_protect_prefill``: the
    prompt out of the softmax and of the redundancy; ``methods/decode_scores.py``); False: the prompt competes for
    the budget, as in R-KV.

    A subclass sets ``method``, :attr:`query_window` and writes :meth:`compact_scores`."""

    method: ClassVar[str] = "decode_base"
    policy: ClassVar[str] = "compacting"
    compact_trigger: ClassVar[str] = "interval"  # CompactingPolicy.trigger: R-KV's schedule
    # Whether the engine keeps each slot's accumulated attention for it (CompactView.attn_sum: a running sum the
    # decode step adds to, seeded from the prompt's attention at prefill; ``h2o``).
    accumulates_attention: ClassVar[bool] = False
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

    # ------------------------------------------------------------------ storage (the compacting policy's numbers)
    @property
    def compresses(self) -> bool:
        return True

    def storage(self, prompt_len: int) -> CompactingPolicy:
        """The ``compacting`` policy of a ``prompt_len``-token prompt: the sawtooth, the slots and the row's
        compaction state are the policy's."""
        T = prompt_len
        return CompactingPolicy(T, self.kept(T), budget=self.budget, cap=self.cap(T), interval=self.interval,
                                trigger=self.compact_trigger, query_ring=self.query_window,
                                prompt_cut=self.needs_selection(T), attn_sum=self.accumulates_attention)

    def row_memory(self, prompt_len: int, slots: int) -> dict[str, int]:
        """The policy's (slot positions, a compaction, the query ring) and the scorer's key pairs."""
        cut = self.key_pairs(prompt_len) if self.needs_selection(prompt_len) else 0
        return {**self.storage(prompt_len).row_memory(slots), "prefill_pairs": cut}

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

    def needs_selection(self, prompt_len: int) -> bool:
        return not self.protect_prompt and prompt_len >= self.budget

    def query_rows(self, prompt_len: int) -> int:
        """The query window: scored with at prefill, and the seed of the decode query ring."""
        return min(max(self.window if self.needs_selection(prompt_len) else 0, self.query_window), prompt_len)

    def compacts(self, prompt_len: int, steps: int) -> bool:
        """Whether the ``steps``-th decoded token written (at position ``prompt_len + steps - 1``) compacts (the
        policy's schedule)."""
        return self.storage(prompt_len).compacts(steps)

    def keeps_all(self, prompt_len: int, new_tokens: int) -> bool:
        """Provably the full cache's tokens: no prefill cut and no compaction over the run (a compaction that keeps
        every entry still reorders the slots)."""
        return self.positions == "original" and self.storage(prompt_len).keeps_all(new_tokens)

    # ------------------------------------------------------------------ prefill
    def select(self, view: PrefillView) -> Selection:
        """The prompt cut (``T >= budget``): the compaction's rule on the prompt (its last ``window`` queries), the
        kept tokens stored in the compaction's order (R-KV runs ``update_kv`` on the prompt at prefill)."""
        return prefill_selection(self, view)


# ---------------------------------------------------------------------------------------------------- the keep rule
# :func:`compact_order` is a pure function of one layer's :class:`CompactView`: per (row, KV head) the protected
# prompt slots (slot order), the best ``kept - window - protected`` candidates by the method's ``compact_scores``
# (score order; ties: the lower slot first), then the last ``window`` held slots (slot order) -- the layout the
# references store (R-KV ``R1KV.update_kv``: ``cat([gather(topk), window])``). The rest follows, so the result is a
# permutation of the S slots and the first ``kept`` of it are what the row holds after the compaction. The engine
# applies it to its rows (``snapstream_core.engine.compact``); the prompt cut at prefill is the same rule. torch is
# imported inside each function: ``import snapstream_core.methods`` loads no torch (the config check needs none).


def slot_roles(method: DecodeMethod, view: CompactView) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(candidate, protected, window) (R, H_kv, S) bool each: the held slots that compete, the held prompt slots
    that never leave (``protect_prompt``), and the last ``window`` held slots."""
    import torch

    S = view.valid.shape[-1]
    slot = torch.arange(S, device=view.valid.device)
    held = view.held[:, None, None]
    window = view.valid & (slot >= held - method.window)
    if method.protect_prompt:
        protected = view.valid & ~window & (view.positions < view.prompt_len[:, None, None])
    else:
        protected = torch.zeros_like(view.valid)
    return view.valid & ~window & ~protected, protected, window


def compact_orders(method: DecodeMethod, views: list[CompactView]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`compact_order` of every layer, the scores from :meth:`DecodeMethod.compact_scores_layers` (a method
    may choose across layers)."""
    return [compact_order(method, view, scores) for view, scores in zip(views, method.compact_scores_layers(views))]


def compact_order(method: DecodeMethod, view: CompactView,
                  scores: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """-> ``order`` (R, H_kv, S) long, a permutation of the slots, and ``kept`` (R,) long: after the compaction
    row r's slot j holds what slot ``order[r, h, j]`` held, and its first ``kept[r]`` slots are held.

    ``kept = min(held, cap)`` with ``cap = max(budget, protected + window)`` (:meth:`DecodeMethod.cap`).
    ``scores`` (R, H_kv, S): the layer's priorities when already computed (:func:`compact_orders`)."""
    import torch

    candidate, protected, window = slot_roles(method, view)
    S = candidate.shape[-1]
    scores = (method.compact_scores(view) if scores is None else scores).float()
    rank = candidate_rank(method, scores.masked_fill(~candidate, float("-inf")), view.held)
    n_protected = protected.long().sum(-1)  # (R, H_kv)
    cap = torch.clamp(n_protected + method.window, min=method.budget)
    kept = torch.minimum(view.held[:, None], cap)  # (R, H_kv)
    n_top = (kept - method.window - n_protected)[..., None]
    slot = torch.arange(S, device=scores.device).expand_as(rank)
    key = torch.full_like(rank, 3 * S) + slot  # dropped and free slots last
    key = torch.where(window, 2 * S + slot, key)
    key = torch.where(candidate & (rank < n_top), S + rank, key)
    key = torch.where(protected, slot, key)
    order = torch.argsort(key, dim=-1)
    return order, kept[:, 0]


def topk_lengths(method: DecodeMethod, S: int) -> list[int]:
    """Lengths of the slot prefix the references run ``topk`` over, known before decoding: ``S - window`` for a
    full row (every compaction after a row's first), and for a prompt shorter than the budget the first compaction's
    ``held - window`` (that compaction is at the first position ``p = k * interval >= budget - 1``, with the
    ``p + 1`` tokens so far held)."""
    first = -(-(method.budget - 1) // method.interval) * method.interval + 1
    return sorted({S - method.window, min(first, S) - method.window})


def candidate_rank(method: DecodeMethod, scores: torch.Tensor, held: torch.Tensor) -> torch.Tensor:
    """(R, H_kv, S) long: each slot's place in the references' ``topk(budget - window)`` of ``scores`` (candidates
    only, the rest ``-inf``), ``S`` for slots outside it. ``topk`` breaks ties by its own algorithm, which depends on
    the input's length, so each row runs it over the slot prefix of the length the reference sees
    (:func:`topk_lengths`; a row whose length is not among them, the first compaction after a prompt cut, uses the
    full ``S - window``)."""
    import torch

    S = scores.shape[-1]
    *shorter, full = topk_lengths(method, S)

    def ranks(n: int) -> torch.Tensor:
        k = min(method.budget - method.window, n)
        top = torch.topk(scores[..., :n], k, dim=-1).indices
        return torch.full_like(scores, S, dtype=torch.long).scatter(
            -1, top, torch.arange(k, device=top.device).expand_as(top))

    rank = ranks(full)
    for n in shorter:
        rank = torch.where((held == n + method.window)[:, None, None], ranks(n), rank)
    return rank


def prefill_selection(method: DecodeMethod, view: PrefillView, attn_sum: torch.Tensor | None = None) -> Selection:
    """The prompt cut at prefill (``T >= budget``, batch 1 as the engine prefills): :func:`compact_order` over the
    prompt, scored with its last ``query_window`` post-RoPE queries (R-KV seeds its ``query_cache`` with them and
    runs ``update_kv`` on the prompt) and ``attn_sum`` (B, H_kv, T), the prompt's accumulated attention (H2O).
    ``scores``: minus each token's place in the kept order."""
    import torch

    B, H_kv, T, _ = view.keys.shape
    if not bool(view.key_valid.all()):
        raise ValueError(f"compression.method: {method.method} cuts the prompt of an unpadded row only")
    Q = method.query_window
    positions = torch.arange(T, device=view.keys.device).expand(B, H_kv, T)
    held = torch.full((B,), T, dtype=torch.long, device=view.keys.device)
    cv = CompactView(
        keys=view.keys, values=None, positions=positions, valid=torch.ones_like(positions, dtype=torch.bool),
        held=held, prompt_len=held, queries=view.query[:, :, -Q:] if Q else None, scaling=view.scaling,
        inv_freq=None, layer_idx=-1, attn_sum=attn_sum,
    )
    order, _ = compact_order(method, cv)
    place = torch.empty_like(order).scatter_(-1, order, torch.arange(T, device=order.device).expand_as(order))
    return Selection(-place.float(), n_keep=method.budget, n_frozen=method.budget, indices=order[..., : method.budget])
