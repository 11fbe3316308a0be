"""One layer of a compressed KV cache: the full prompt during prefill, then what the method's storage policy keeps
(:mod:`snapstream_core.policies`), one class per policy: :class:`AppendLayer` (a selected prefix plus appended
tokens: ``none``, ``snapkv``, and the prefill of the compacting methods), ``RingLayer`` (a frozen prefix plus a fixed
ring of the latest tokens: ``streaming_llm``, ``snapstream``; :mod:`snapstream_core.ring_layer`) and
:class:`RaggedLayer` (a count of prompt tokens per head, padded, plus appended tokens). :func:`layer_for` picks the
class of a method's policy.

Life of a layer, driven by ``generate``:

1. ``update`` receives the whole prompt (B, H_kv, T, D) and returns it: prefill attention is exact.
2. Right after that layer's attention, the registered attention function calls :meth:`CompressedLayer.finish_prefill`
   with the post-RoPE queries; the method scores the prompt and the layer keeps its selection, before the next layer
   runs (peak prefill KV = one full layer + the compressed others).
3. Each decode ``update`` writes the new token in place (ring) or appends it; every slot has a validity bit and the
   original position of its token, from which the attention function builds the mask when slots no longer line up
   with the logical sequence (after selection, after the ring wraps, or under left padding).

State and its invariants (B rows, H_kv KV heads, S storage slots):

- ``keys is None``: nothing stored yet. ``pending``: the prefill is stored whole and its selection has not run (the
  next call must be ``finish_prefill``, from the attention function).
- ``seen``: logical tokens of each row so far, padding included (what ``get_seq_length`` reports).
- ``aligned``: slot s holds logical token s for every row (no selection dropped anything, the ring never wrapped),
  so the stock masks are right and ``valid``/``pos`` may be ``None`` (method ``none``, or a full cache kept whole).
- ``has_invalid``: some stored slot is left padding (the mask is needed even for a single query).
- Ring layers: slots ``[0, n_frozen)`` are the frozen prefix, ``[n_frozen, n_frozen + ring)`` the ring; the next
  decoded token goes to slot ``n_frozen + filled % ring``; the first ``n_frozen + min(filled, ring)`` slots are
  filled. Free ring slots are marked valid already: they are never returned before a token is written in them.
- Appending layers: every stored slot is filled; ``n_frozen`` is the number kept by the prefill.
- Ragged layers: as appending ones, but head h of row b holds only ``counts[b, h]`` of the prefill's slots (the rest
  of the largest count is padding, never valid).
- ``schedule()`` is the engine's per-row slot schedule of the stored prefix (:meth:`RowCache.load`).
- Positions are written lazily (see :class:`~snapstream_core.slot_index.SlotIndex`); nothing here is updated by
  reading an attribute: every change happens in ``update``, ``finish_prefill`` or the batch surgery methods.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import CacheLayerMixin

from snapstream_core.moments import QueryMoments
from snapstream_core.policies.kv_format import SCALE_BYTES
from snapstream_core.selection import keep_indices
from snapstream_core.slot_index import SlotIndex
from snapstream_core.stats import KVStats
from snapstream_core.views import PrefillView, Selection

NO_WRAP = 1 << 62  # the period of an appending schedule: never wraps


def gather_tokens(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x (B, H_kv, T, D), idx (B, H_kv, n) -> (B, H_kv, n, D)."""
    return x.gather(2, idx[..., None].expand(*idx.shape, x.shape[-1]))


class CompressedLayer(SlotIndex, CacheLayerMixin):
    """KV storage of one attention layer under a :class:`CompressionMethod`: what every policy's layer shares (the
    transformers layer API, the prefill selection, stats and batch surgery). A subclass stores the selection
    (:meth:`_keep`), writes decoded tokens (:meth:`_write`) and says its sizes and its engine schedule.

    Attributes (after prefill): ``keys``/``values`` (B, H_kv, S, D) storage; ``valid`` (B, H_kv, S) bool slot
    validity; ``pos`` (B, H_kv, S) long original position of each slot's token; ``n_frozen`` prefix slots;
    ``filled`` tokens written into the ring so far (ring methods); ``seen`` logical tokens (what positions count).
    """

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(
        self, method: Any, layer_idx: int, stats: KVStats, inv_freq: torch.Tensor | None = None
    ):
        super().__init__()
        self.method = method
        self.layer_idx = layer_idx
        self.stats = stats
        self.inv_freq = inv_freq  # RoPE inverse frequencies (D/2,), for positions=in_cache
        self.ring: int | None = None  # ring slots (RingLayer); None: decoded tokens are appended
        self.pending = False  # prefill stored, selection not yet done
        self.aligned = True  # slot s holds logical token s: the stock masks are right
        self.has_invalid = False  # some slot is padding
        self.seen = 0
        self.n_frozen = 0
        self.filled = 0
        self.init_slot_index()
        # FP8 storage (compression.kv_dtype=fp8_e4m3): keys/values hold uint8 codes from the selection on, with the
        # row's fp32 scales (B, 1 or H_kv, 1, 1) fixed at the prefill; what update returns is dequantized.
        self.fp8_scale_mode = method.kv_scale if method.kv_dtype == "fp8_e4m3" else None
        self.k_scale: torch.Tensor | None = None
        self.v_scale: torch.Tensor | None = None
        # Views of the K/V storage over the first ``_view_n`` slots, reused while that count does not change (decode
        # steps of a full ring); ``None`` after the storage is replaced.
        self._view_n: int | None = None
        self._kv_view: tuple[torch.Tensor, torch.Tensor] | None = None

    # ------------------------------------------------------------------ transformers' layer API
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def get_seq_length(self) -> int:
        return self.seen

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """Slots the attention will see after this update (masks are built before ``update``)."""
        if self.keys is None:
            return query_length, 0
        if self.pending:
            raise RuntimeError("snapstream_core: decode step before the prefill selection (attention not attached?)")
        return self._slots_after(query_length), 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Store (B, H_kv, q, D) new keys/values; return the (B, H_kv, S, D) keys/values to attend over."""
        if self.pending:
            raise RuntimeError(
                "snapstream_core: a compressed cache was used without its attention function; "
                "call snapstream_core.attach(model) (or model.set_attn_implementation('snapstream_sdpa'))"
            )
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.keys is None:
            return self._store_prefill(key_states, value_states)
        self.seen += key_states.shape[-2]
        if self.k_scale is None:
            out = self._write(key_states, value_states)
        else:  # quantize on write, dequantize what attention reads
            from snapstream_core.quant.fp8 import fp8_decode, fp8_encode

            keys, values = self._write(fp8_encode(key_states, self.k_scale), fp8_encode(value_states, self.v_scale))
            out = fp8_decode(keys, self.k_scale, self.dtype), fp8_decode(values, self.v_scale, self.dtype)
        self._record()
        return out

    def _next_positions(self, q: int) -> torch.Tensor:
        """(B, q) positions of ``q`` new tokens (pending ring positions written first)."""
        self.flush_positions()
        new_pos = self.next_pos[:, None] + torch.arange(q, device=self.next_pos.device)
        self.next_pos = self.next_pos + q
        return new_pos

    # ------------------------------------------------------------------ prefill
    def _store_prefill(self, k: torch.Tensor, v: torch.Tensor):
        B, H_kv, T, _ = k.shape
        self.keys, self.values = k, v
        self.seen = T
        # method none: plain append from the start, no slot index needed (but an FP8 cache takes its scales from
        # the prompt's valid tokens, which the selection step is given)
        self.pending = self.method.compresses or self.fp8_scale_mode is not None
        self._record()
        return k, v

    def finish_prefill(self, query: torch.Tensor, key_valid: torch.Tensor, positions: torch.Tensor, scaling: float,
                       moments: QueryMoments | None = None, attn_sum: torch.Tensor | None = None):
        """Select what to keep, right after this layer's full prefill attention.

        Args:
            query: (B, H, T, D) post-RoPE queries of the prompt (the chunked prefill: only its last rows).
            key_valid: (B, T) bool, False on left padding.
            positions: (B, T) long positions of the prompt tokens.
            scaling: the attention scale.
            moments: the running query moments the chunked prefill summed, when the method reads them; None: they
                are taken from ``query`` (every row of the one-pass prefill).
            attn_sum: (B, H_kv, T) the prompt's attention summed over its queries, the chunked prefill's, when the
                method accumulates attention (h2o); None: taken from ``query`` (the one-pass prefill).
        """
        self.pending = False
        keys, values = self.keys, self.values
        B, H_kv, T, D = keys.shape
        Q = getattr(self.method, "query_window", 0)  # a decode-time method's query ring, seeded by the prompt
        self.query_tail = query[:, :, -Q:].clone() if Q else None
        self.prompt_attention = None  # (B, H_kv, T) float32: the prompt's attention summed over its queries (h2o)
        if getattr(self.method, "accumulates_attention", False):
            from snapstream_core.attention_sums import prompt_attention

            self.prompt_attention = prompt_attention(query, keys, scaling) if attn_sum is None else attn_sum
        if not self.method.needs_selection(T):
            idx = torch.arange(T, device=keys.device).expand(B, H_kv, T)
            n_frozen = T
        else:
            skip = self.method.query_moments(T)
            if skip is not None and moments is None:
                moments = QueryMoments.of(query, positions, key_valid, skip, self.inv_freq)
            view = PrefillView(query=query, keys=keys, key_valid=key_valid, scaling=scaling, values=values,
                               moments=moments, inv_freq=self.inv_freq, layer_idx=self.layer_idx,
                               n_layers=self.stats.n_layers, attn_sum=self.prompt_attention)
            sel = self.method.select(view)
            idx = sel.indices
            if idx is None:
                idx = keep_indices(sel.scores, sel.n_keep, sel.n_frozen, key_valid)
            n_frozen = sel.n_frozen
            self._check_selection(sel)
        n_keep = idx.shape[-1]
        self.aligned = n_keep == T and bool((idx == torch.arange(T, device=idx.device)).all())
        valid = key_valid[:, None, :].expand(B, H_kv, T).gather(-1, idx)
        pos = positions[:, None, :].expand(B, H_kv, T).gather(-1, idx)
        self.has_invalid = not bool(valid.all())
        self.next_pos = positions[:, -1] + 1
        if self.fp8_scale_mode is not None:  # the scales of the row's valid prompt tokens; then keep codes
            from snapstream_core.quant.fp8 import fp8_encode, fp8_scale

            self.k_scale = fp8_scale(keys, key_valid, self.fp8_scale_mode)
            self.v_scale = fp8_scale(values, key_valid, self.fp8_scale_mode)
            keys, values = fp8_encode(keys, self.k_scale), fp8_encode(values, self.v_scale)
        self._keep(keys, values, idx, valid, pos, n_frozen)
        self.view_n, self._view = self._slots_now(), None
        self._view_n = None
        self._record()

    def _check_selection(self, sel: Selection) -> None:
        """A ragged keep (``sel.counts``) needs the ragged policy's layer."""
        if sel.counts is not None:
            raise ValueError(f"compression.method: {self.method.method} returned a ragged selection (counts) but "
                             f"its storage policy is {self.method.storage_kind!r}, not 'ragged'")

    def _keep(self, keys, values, idx, valid, pos, n_frozen: int) -> None:
        """Store the selection: ``idx`` (B, H_kv, n_keep) of the prompt's ``keys``/``values`` (B, H_kv, T, D), their
        validity and positions (B, H_kv, n_keep), ``n_frozen`` of them the frozen prefix."""
        raise NotImplementedError

    def _write(self, k: torch.Tensor, v: torch.Tensor):
        """Store (B, H_kv, q, D) decoded keys/values after the prefill; return what the attention reads."""
        raise NotImplementedError

    # ------------------------------------------------------------------ sizes and stats
    def _slots_now(self) -> int:
        """Slots the last update returned (filled)."""
        raise NotImplementedError

    def _slots_after(self, q: int) -> int:
        raise NotImplementedError

    def tokens_held(self) -> int:
        """Filled KV entries per KV head for one sequence."""
        raise NotImplementedError

    def held_entries(self) -> int:
        """KV entries held summed over this layer's KV heads, for one sequence (``tokens_held`` times the heads
        unless heads hold different counts)."""
        return 0 if self.keys is None else self.tokens_held() * self.keys.shape[1]

    def schedule(self) -> tuple[int, int, int, int]:
        """The engine's slot schedule of the stored prefix ``(base, offset, period, n)``: step t of a decode row
        goes to slot ``base + (offset + t) % period``; ``n`` slots hold the prefix (:meth:`RowCache.load`)."""
        raise NotImplementedError

    @classmethod
    def row_schedule(cls, schedules: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
        """One schedule for a row from every layer's: they must agree."""
        if any(s != schedules[0] for s in schedules):
            raise RuntimeError("snapstream_core: layers disagree on the slot schedule")
        return schedules[0]

    def nbytes(self) -> int:
        """Bytes of the K/V storage (codes, and the FP8 scales)."""
        if self.keys is None:
            return 0
        scales = 0 if self.k_scale is None else (self.k_scale.numel() + self.v_scale.numel()) * SCALE_BYTES
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size() + scales

    def _slot_bytes(self) -> int:
        """Bytes of K and V of one slot of one KV head."""
        return self.keys.shape[-1] * (self.keys.element_size() + self.values.element_size())

    def _record(self) -> None:
        self.stats.record(self.layer_idx, self.nbytes(), self.tokens_held(), self.keys.shape[0],
                          held=self.held_entries(), slot_bytes=self._slot_bytes())
        if self.layer_idx == self.stats.n_layers - 1 and not self.pending:
            self.stats.step_done()

    # ------------------------------------------------------------------ batch surgery (generate, sample-n, beams)
    def _map_batch(self, fn) -> None:
        self.flush_positions()
        for name in ("keys", "values", "valid", "pos", "next_pos", "counts", "k_scale", "v_scale"):
            value = getattr(self, name, None)
            if value is not None:
                setattr(self, name, fn(value))
        if self._view is not None:
            self._view = (fn(self._view[0]), fn(self._view[1]))
        self._view_n = None

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))
        if self.keys is not None:
            self._record()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map_batch(lambda t: t[indices])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def reset(self) -> None:
        self.__init__(self.method, self.layer_idx, self.stats, self.inv_freq)


class AppendLayer(CompressedLayer):
    """The ``append`` policy (and the prefill of the ``compacting`` one): the kept prompt, then every decoded token
    appended. While nothing was dropped the prompt tensors are kept and slot s is token s (``aligned``)."""

    def _keep(self, keys, values, idx, valid, pos, n_frozen: int) -> None:
        if self.aligned:  # nothing dropped: keep the prompt tensors; slot s stays token s, the stock mask holds
            self.keys, self.values = keys, values
            self.valid = self.pos = None
        else:
            self.keys, self.values = gather_tokens(keys, idx), gather_tokens(values, idx)
            self.valid, self.pos = valid, pos
        self.n_frozen = idx.shape[-1]

    def _write(self, k: torch.Tensor, v: torch.Tensor):
        if self.aligned:  # full cache (none, or a prompt within budget): DynamicLayer's append
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
            return self.keys, self.values
        new_pos = self._next_positions(k.shape[-2])
        B, H_kv, q, _ = k.shape
        self.keys = torch.cat([self.keys, k], dim=-2)
        self.values = torch.cat([self.values, v], dim=-2)
        self.valid = torch.cat([self.valid, self.valid.new_ones(B, H_kv, q)], dim=-1)
        self.pos = torch.cat([self.pos, new_pos[:, None, :].expand(B, H_kv, q)], dim=-1)
        S = self.keys.shape[-2]
        self.view_n, self._view = S, None
        self.new_slots = slice(S - q, S)
        return self.keys, self.values

    def _slots_now(self) -> int:
        return self.keys.shape[-2]

    def _slots_after(self, q: int) -> int:
        return self.keys.shape[-2] + q

    def tokens_held(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def schedule(self) -> tuple[int, int, int, int]:
        """Decoded tokens go after the stored slots, never wrapping."""
        n = self.keys.shape[-2]
        return n, 0, NO_WRAP, n


class RaggedLayer(AppendLayer):
    """The ``ragged`` policy: head h of row b keeps ``counts[b, h]`` prompt tokens (``Selection.counts``), stored in
    ``n_keep`` slots (the largest count) whose tail is padding, never valid; decoded tokens are appended to every
    head. ``counts`` (B, H_kv) long; ``appended`` tokens written since the prefill."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.counts: torch.Tensor | None = None
        self.appended = 0

    def _check_selection(self, sel: Selection) -> None:
        self._sel_counts = sel.counts

    def _keep(self, keys, values, idx, valid, pos, n_frozen: int) -> None:
        counts, self._sel_counts = getattr(self, "_sel_counts", None), None
        B, H_kv, n_keep = idx.shape
        if counts is None:
            counts = torch.full((B, H_kv), n_keep, dtype=torch.long, device=idx.device)
        counts = counts.to(device=idx.device, dtype=torch.long)
        if counts.shape != (B, H_kv) or bool((counts < 0).any()) or bool((counts > n_keep).any()):
            raise ValueError(f"compression.method: {self.method.method}'s Selection.counts must be (B, H_kv) = "
                             f"({B}, {H_kv}) in [0, {n_keep}], got {tuple(counts.shape)}")
        cap = self.method.prefill_slots(keys.shape[-2])  # the policy's padded slots: every layer allocates them
        if n_keep < cap:  # the slots past this layer's largest count: padding (index 0, never valid)
            extra = cap - n_keep
            idx = torch.cat([idx, idx.new_zeros(B, H_kv, extra)], dim=-1)
            valid = torch.cat([valid, valid.new_zeros(B, H_kv, extra)], dim=-1)
            pos = torch.cat([pos, pos.new_zeros(B, H_kv, extra)], dim=-1)
            n_keep, n_frozen, self.aligned = cap, cap, False
        padding = torch.arange(n_keep, device=idx.device) >= counts[..., None]  # (B, H_kv, n_keep)
        if bool(padding.any()):
            self.aligned = False
            valid = valid & ~padding
            self.has_invalid = True
        self.counts = counts
        super()._keep(keys, values, idx, valid, pos, n_frozen)

    def _write(self, k: torch.Tensor, v: torch.Tensor):
        self.appended += k.shape[-2]
        return super()._write(k, v)

    def held_entries(self) -> int:
        """Entries held summed over the KV heads, per sequence: the counts and the appended tokens."""
        if self.keys is None:
            return 0
        if self.pending or self.counts is None:
            return self.keys.shape[-2] * self.keys.shape[1]
        B, H_kv = self.counts.shape
        return int(self.counts.sum()) // B + self.appended * H_kv

    def tokens_held(self) -> int:
        """Entries held per KV head, the mean over rows and heads rounded to the nearest (the padding not counted)."""
        if self.keys is None:
            return 0
        return round(self.held_entries() / self.keys.shape[1])

    @classmethod
    def row_schedule(cls, schedules: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
        """Layers keep different counts: a row pads every layer to the largest (the slots past a layer's own
        prefix stay hidden), so decoded tokens share one slot in every layer."""
        n = max(s[-1] for s in schedules)
        return n, 0, NO_WRAP, n



def layer_for(method: Any, layer_idx: int, stats: KVStats,
              inv_freq: torch.Tensor | None = None) -> CompressedLayer:
    """The eager cache layer of ``method``'s storage policy."""
    return method.layer_class()(method, layer_idx, stats, inv_freq)
