"""Compaction of the engine's rows for the decode-time methods (``methods.decode_base.DecodeMethod``).

The keep rule (:func:`~snapstream_core.methods.decode_base.compact_order`) is the method's; here it is applied to
every row of the engine at once, at fixed shapes (:func:`compact_rows`), by the :class:`Compactor`, which holds the
compiled call. The per-row arrays a compaction reads and moves (slot positions, prompt lengths, the query ring, the
step) are the rows' own state (:class:`~snapstream_core.engine.batch.RowBatch`).
"""

from __future__ import annotations

import torch

from snapstream_core.engine.step import EngineError, is_oom, one_line
from snapstream_core.methods.decode_base import CompactView, DecodeMethod, compact_order
from snapstream_core.quant.fp8 import fp8_decode


def compact_rows(method: DecodeMethod, keys: list[torch.Tensor], values: list[torch.Tensor], visible: torch.Tensor,
                 pos: torch.Tensor, queries: torch.Tensor | None, prompt_len: torch.Tensor, now: torch.Tensor,
                 due: torch.Tensor, scaling: float, inv_freq: torch.Tensor | None, row_keys: torch.Tensor | None = None,
                 attn_sum: torch.Tensor | None = None, scales: tuple | None = None) -> torch.Tensor:
    """One compaction of the rows ``due`` (R,) bool, in place, at fixed shapes (the other rows are left as they are).

    Per layer l: ``keys[l]``, ``values[l]`` (R, H_kv, S, D); ``visible`` (L, R, H_kv, S) bool, each row's held
    prefix; ``pos`` (L, R, H_kv, S) long, each slot's position (slots past the held ones: the positions they will be
    written with); ``queries`` (L, R, H, Q, D) or None, the ring of the last Q queries at index ``position % Q``;
    ``prompt_len``, ``now`` (R,) long: prompt lengths and the position just written; ``row_keys`` (R,) long or None:
    each row's sample noise key; ``attn_sum`` (L, R, H_kv, S) float32 or None: attention accumulated per slot, moved
    with its slot (a freed slot starts at 0); ``scales``: ``(k_scale, v_scale, dtype)`` when the rows store FP8 codes
    (per layer (R, 1 or H_kv, 1, 1) fp32; :class:`~.fp8_rows.Fp8RowCache`): the method scores the dequantized K/V and
    the codes move. Returns ``kept`` (R,) long: entries each due row holds after it (the
    others: what they hold)."""
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
        k, v = keys[layer], values[layer]
        if scales is not None:
            k_scale, v_scale, dtype = scales
            k, v = fp8_decode(k, k_scale[layer], dtype), fp8_decode(v, v_scale[layer], dtype)
        views.append(CompactView(keys=k, values=v, positions=pos[layer], valid=visible[layer],
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
    """The engine's compaction call: one fixed-shape :func:`compact_rows` over every row (compiled once when the
    decode step is), applied to the rows' K/V (:class:`~.rows.RowCache`) and their per-row state
    (:class:`~.batch.RowBatch`, whose host counts say which rows are due: no device read).

    ``calls``: compactions run (the engine times them: ``EngineStats.compaction_s``)."""

    def __init__(self, method: DecodeMethod, model, head_dim: int, device: torch.device, compile: bool, backend: str):
        from snapstream_core.rope import rope_inv_freq

        self.method = method
        method.prepare(device)  # e.g. TriAttention's calibration, read here and never inside the compiled graph
        self.scaling = head_dim**-0.5
        self.inv_freq = rope_inv_freq(model)
        if self.inv_freq is not None:
            self.inv_freq = self.inv_freq.to(device)
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

    def __call__(self, cache, batch, busy: list[int]) -> dict[int, int]:
        """Compact the ``busy`` rows that their last step made due (``batch.due``), then move their slot schedule
        (``batch.compacted``). Returns {row: entries held} of the rows compacted (host figures)."""
        due = batch.due(busy, self.method)
        if not due:
            return {}
        mask = torch.zeros(batch.rows, dtype=torch.bool)
        mask[due] = True
        mask = mask.to(batch.pos.device, non_blocking=True)
        self.calls += 1
        try:
            self.fn(self.method, cache.keys, cache.values, cache.visible, batch.pos, batch.queries, batch.pos0,
                    batch.now(), mask, self.scaling, self.inv_freq, batch.keys, batch.attn_sum, fp8_scales(cache))
        except Exception as exc:
            if not self.compiled or is_oom(exc):
                raise
            raise EngineError(f"gen.compile: {self.stage()} failed ({one_line(exc)}); "
                              "run with gen.compile=false to decode eager") from exc
        held = {r: self.method.tokens_held(batch.host[r].prompt_len, batch.host[r].steps) for r in due}
        batch.compacted(held, self.method.interval)
        return held


def compactor_for(method, cache, batch, model, compile: bool, backend: str) -> Compactor | None:
    """The engine's compactor for a decode-time method, its arrays allocated in ``batch`` (None for the other
    methods, whose rows never compact)."""
    if not isinstance(method, DecodeMethod):
        return None
    L, _, H_kv, _ = cache.visible.shape
    D = cache.keys[0].shape[-1]
    H = model.config.get_text_config().num_attention_heads
    dtype = getattr(cache, "dtype", cache.keys[0].dtype)  # the model's (FP8 rows store codes)
    batch.track_compaction(L, H_kv, H, method.query_window, D, dtype, method.accumulates_attention)
    return Compactor(method, model, D, cache.visible.device, compile, backend)


def fp8_scales(cache) -> tuple | None:
    """``(k_scale, v_scale, dtype)`` of FP8 rows (:class:`~.fp8_rows.Fp8RowCache`), None for rows in the model's
    dtype."""
    k_scale = getattr(cache, "k_scale", None)
    return None if k_scale is None else (k_scale, cache.v_scale, cache.dtype)
