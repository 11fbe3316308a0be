"""Compaction of the engine's rows for the decode-time methods (``methods.decode_base.DecodeMethod``).

:func:`compact_order` is the keep rule, a pure function of one layer's :class:`CompactView`: per (row, KV head) the
protected prompt slots (slot order), the best ``kept - window - protected`` candidates by the method's
``compact_scores`` (score order; ties: the lower slot first), then the last ``window`` held slots (slot order) -- the
layout the references store (R-KV ``R1KV.update_kv``: ``cat([gather(topk), window])``). The rest follows, so the
result is a permutation of the S slots and the first ``kept`` of it are what the row holds after the compaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from snapstream_core.engine.step import EngineError, is_oom, one_line
from snapstream_core.methods.base import Selection
from snapstream_core.methods.decode_base import CompactView, DecodeMethod

if TYPE_CHECKING:
    from snapstream_core.methods.base import PrefillView


def slot_roles(method: DecodeMethod, view: CompactView) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(candidate, protected, window) (R, H_kv, S) bool each: the held slots that compete, the held prompt slots
    that never leave (``protect_prompt``), and the last ``window`` held slots."""
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


def compact_rows(method: DecodeMethod, keys: list[torch.Tensor], values: list[torch.Tensor], visible: torch.Tensor,
                 pos: torch.Tensor, queries: torch.Tensor | None, prompt_len: torch.Tensor, now: torch.Tensor,
                 due: torch.Tensor, scaling: float, inv_freq: torch.Tensor | None,
                 row_keys: torch.Tensor | None = None, attn_sum: torch.Tensor | None = None) -> torch.Tensor:
    """One compaction of the rows ``due`` (R,) bool, in place, at fixed shapes (the other rows are left as they are).

    Per layer l: ``keys[l]``, ``values[l]`` (R, H_kv, S, D); ``visible`` (L, R, H_kv, S) bool, each row's held
    prefix; ``pos`` (L, R, H_kv, S) long, each slot's position (slots past the held ones: the positions they will be
    written with); ``queries`` (L, R, H, Q, D) or None, the ring of the last Q queries at index ``position % Q``;
    ``prompt_len``, ``now`` (R,) long: prompt lengths and the position just written; ``row_keys`` (R,) long or None,
    each row's sample key; ``attn_sum`` (L, R, H_kv, S) float32 or None, each slot's accumulated attention, moved
    with its slot (the freed slots zeroed: a token written there starts from its own weight). Returns ``kept`` (R,)
    long: entries each due row holds after it (the others: what they hold)."""
    L, R, H_kv, S = visible.shape
    slot = torch.arange(S, device=visible.device)
    held = visible[0, :, 0].long().sum(-1)  # (R,)
    if queries is not None:
        Q = queries.shape[3]
        ring = (now[:, None] - Q + 1 + torch.arange(Q, device=now.device)) % Q  # (R, Q): oldest first
    kept_all = held
    views = []
    for layer in range(L):
        q = None
        if queries is not None:
            _, _, H, _, D = queries.shape
            q = queries[layer].gather(2, ring[:, None, :, None].expand(R, H, Q, D))
        views.append(CompactView(keys=keys[layer], values=values[layer], positions=pos[layer], valid=visible[layer],
                                 held=held, prompt_len=prompt_len, queries=q, scaling=scaling, inv_freq=inv_freq,
                                 layer_idx=layer, row_keys=row_keys,
                                 attn_sum=None if attn_sum is None else attn_sum[layer]))
    scores = method.compact_scores_layers(views)  # every layer's, before any layer moves (a choice may span layers)
    for layer, view in enumerate(views):
        order, kept = compact_order(method, view, scores[layer])
        kept = torch.where(due, kept, held)
        k4, k3 = due[:, None, None, None], due[:, None, None]
        for store in (keys[layer], values[layer]):
            store.copy_(torch.where(k4, store.gather(2, order[..., None].expand_as(store)), store))
        below = slot < kept[:, None, None]  # (R, 1, S)
        upcoming = now[:, None, None] + 1 + slot - kept[:, None, None]  # positions the next writes get
        moved = torch.where(below, pos[layer].gather(2, order), upcoming)
        pos[layer].copy_(torch.where(k3, moved, pos[layer]))
        visible[layer].copy_(torch.where(k3, below.expand(R, H_kv, S), visible[layer]))
        if attn_sum is not None:
            summed = torch.where(below, attn_sum[layer].gather(2, order), 0.0)
            attn_sum[layer].copy_(torch.where(k3, summed, attn_sum[layer]))
        kept_all = kept
    return kept_all


class Compactor:
    """The engine's compaction: per-row slot positions and query ring beside the rows' K/V, the host's schedule
    (which rows are due after a step: a pure function of each row's prompt length and step, no device read) and
    the one fixed-shape compaction call over every row (compiled once when the decode step is).

    ``pos`` (L, R, H_kv, S) long; ``queries`` (L, R, H, Q, D) in the K/V dtype, written by the decode step
    (``RowCache.queries``) at index ``position % Q``; ``prompt_len`` (R,) long; ``row_keys`` (R,) long, each row's
    sample noise key; ``attn_sum`` (L, R, H_kv, S) float32 when the method ``accumulates_attention`` (else None),
    added to by the decode step (``RowCache.attn_sum``) and seeded from the prefix's prompt attention."""

    def __init__(self, method: DecodeMethod, cache, model, compile: bool, backend: str):
        from snapstream_core.rope import rope_inv_freq

        self.method = method
        self.cache = cache
        L, R, H_kv, S = cache.visible.shape
        dev = cache.visible.device
        method.prepare(dev)  # e.g. TriAttention's calibration, read here and never inside the compiled graph
        self.pos = torch.zeros(L, R, H_kv, S, dtype=torch.long, device=dev)
        self.prompt_len = torch.zeros(R, dtype=torch.long, device=dev)
        Q = method.query_window
        cfg = model.config.get_text_config()
        H = cfg.num_attention_heads
        D = cache.keys[0].shape[-1]
        self.queries = None if Q == 0 else cache.keys[0].new_zeros(L, R, H, Q, D)
        cache.queries = self.queries
        self.row_keys = torch.zeros(R, dtype=torch.long, device=dev)
        self.attn_sum = None
        if method.accumulates_attention:
            self.attn_sum = torch.zeros(L, R, H_kv, S, dtype=torch.float32, device=dev)
        cache.attn_sum = self.attn_sum
        self.scaling = D**-0.5
        self.inv_freq = rope_inv_freq(model)
        if self.inv_freq is not None:
            self.inv_freq = self.inv_freq.to(dev)
        self.steps: list[tuple[int, int]] = [(0, 0)] * R  # host: (prompt length, decoded tokens written) per row
        self.calls = 0
        self.compiled = compile
        fn = compact_rows
        if compile:
            fn = torch.compile(compact_rows, backend=backend, fullgraph=True)
        self.fn = fn

    def stage(self) -> str:
        if not self.compiled:
            return "compaction (eager)"
        return "compaction (compile)" if self.calls <= 1 else "compaction (compiled)"

    def start(self, row: int, prompt_len: int, prefix, key: int = 0) -> None:
        """Row ``row`` takes a sample of a ``prompt_len``-token prompt whose compressed ``prefix`` it just loaded:
        its slots' positions, the prompt's last queries (the ring's seed), the sample's noise ``key`` and the kept
        prompt tokens' accumulated attention (``attn_sum``; the other slots zeroed)."""
        S = self.pos.shape[-1]
        self.row_keys[row] = key
        for i, layer in enumerate(prefix.layers):
            n = layer.keys.shape[-2] if layer.ring is None else layer.tokens_held()
            seed = torch.arange(n, device=self.pos.device) if layer.pos is None else layer.pos[0, :, :n]
            self.pos[i, row, :, :n] = seed
            if self.attn_sum is not None:
                prompt = layer.prompt_attention[0]  # (H_kv, T) float32, summed over the prompt's queries
                self.attn_sum[i, row] = 0
                self.attn_sum[i, row, :, :n] = prompt.gather(-1, seed.expand(prompt.shape[0], n))
            self.pos[i, row, :, n:] = prompt_len + torch.arange(S - n, device=self.pos.device)
            if self.queries is not None:
                tail = layer.query_tail  # (1, H, <=Q, D)
                q = tail.shape[2]
                idx = (torch.arange(prompt_len - q, prompt_len, device=self.pos.device)) % self.queries.shape[3]
                self.queries[i, row].index_copy_(1, idx, tail[0].to(self.queries.dtype))
        self.prompt_len[row] = prompt_len
        self.steps[row] = (prompt_len, 0)

    def after_step(self, busy: list[int], now: torch.Tensor) -> dict[int, int]:
        """Count a step of the ``busy`` rows; compact the rows it makes due. ``now`` (R,) long: the position each
        row just wrote. Returns {row: entries held} of the rows compacted (the host knows them: no device read)."""
        due = []
        for r in busy:
            T, k = self.steps[r]
            self.steps[r] = (T, k + 1)
            if self.method.compacts(T, k + 1):
                due.append(r)
        if not due:
            return {}
        mask = torch.zeros(self.prompt_len.shape[0], dtype=torch.bool)
        mask[due] = True
        mask = mask.to(self.pos.device, non_blocking=True)
        self.calls += 1
        c = self.cache
        try:
            self.fn(self.method, c.keys, c.values, c.visible, self.pos, self.queries, self.prompt_len, now, mask,
                    self.scaling, self.inv_freq, self.row_keys, self.attn_sum)
        except Exception as exc:
            if not self.compiled or is_oom(exc):
                raise
            raise EngineError(f"gen.compile: {self.stage()} failed ({one_line(exc)}); "
                              "run with gen.compile=false to decode eager") from exc
        return {r: self.method.tokens_held(*self.steps[r]) for r in due}


def compactor_for(method, cache, model, compile: bool, backend: str) -> Compactor | None:
    """The engine's compactor for a decode-time method (None for the others, whose rows never compact)."""
    if not isinstance(method, DecodeMethod):
        return None
    compactor = Compactor(method, cache, model, compile, backend)
    if compactor.pos.is_cuda:
        extra = tuple(t for t in (compactor.queries, compactor.attn_sum) if t is not None)
        for t in (compactor.pos, compactor.prompt_len, compactor.row_keys, *extra):
            torch._dynamo.mark_static_address(t)  # mutated in place by the graphs
    return compactor
