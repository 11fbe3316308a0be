"""One layer of a compressed KV cache: the full prompt during prefill, then a selected prefix plus appended tokens
(``none``, ``snapkv``) or a fixed ring of the latest tokens (``streaming_llm``, ``snapstream``).

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
- Ring methods: slots ``[0, n_frozen)`` are the frozen prefix, ``[n_frozen, n_frozen + ring)`` the ring; the next
  decoded token goes to slot ``n_frozen + filled % ring``; the first ``n_frozen + min(filled, ring)`` slots are
  filled. Free ring slots are marked valid already: they are never returned before a token is written in them.
- Appending methods: every stored slot is filled; ``n_frozen`` is the number kept by the prefill.
- Positions are written lazily (see :class:`~snapstream_core.slot_index.SlotIndex`); nothing here is updated by
  reading an attribute: every change happens in ``update``, ``finish_prefill`` or the batch surgery methods.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import CacheLayerMixin

from snapstream_core.methods.base import CompressionMethod, PrefillView
from snapstream_core.moments import QueryMoments
from snapstream_core.selection import keep_indices
from snapstream_core.slot_index import SlotIndex
from snapstream_core.stats import KVStats


def _gather_tokens(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x (B, H_kv, T, D), idx (B, H_kv, n) -> (B, H_kv, n, D)."""
    return x.gather(2, idx[..., None].expand(*idx.shape, x.shape[-1]))


class CompressedLayer(SlotIndex, CacheLayerMixin):
    """KV storage of one attention layer under a :class:`CompressionMethod`.

    Attributes (after prefill): ``keys``/``values`` (B, H_kv, S, D) storage; ``valid`` (B, H_kv, S) bool slot
    validity; ``pos`` (B, H_kv, S) long original position of each slot's token; ``n_frozen`` prefix slots;
    ``filled`` tokens written into the ring so far (ring methods); ``seen`` logical tokens (what positions count).
    """

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(
        self, method: CompressionMethod, layer_idx: int, stats: KVStats, inv_freq: torch.Tensor | None = None
    ):
        super().__init__()
        self.method = method
        self.layer_idx = layer_idx
        self.stats = stats
        self.inv_freq = inv_freq  # RoPE inverse frequencies (D/2,), for positions=in_cache
        self.ring: int | None = method.ring
        self.pending = False  # prefill stored, selection not yet done
        self.aligned = True  # slot s holds logical token s: the stock masks are right
        self.has_invalid = False  # some slot is padding
        self.seen = 0
        self.n_frozen = 0
        self.filled = 0
        self.init_slot_index()
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
        q = key_states.shape[-2]
        self.seen += q
        if self.ring is None and self.aligned:  # full cache (none, or a prompt within budget): DynamicLayer's append
            self.keys = torch.cat([self.keys, key_states], dim=-2)
            self.values = torch.cat([self.values, value_states], dim=-2)
            self._record()
            return self.keys, self.values
        if self.ring is not None and q == 1:  # the decode step of the fixed-size methods: in place, few ops
            out = self._ring_write_one(key_states, value_states)
            self._record()
            return out
        self.flush_positions()
        new_pos = self.next_pos[:, None] + torch.arange(q, device=self.next_pos.device)  # (B, q)
        self.next_pos = self.next_pos + q
        if self.ring is None:
            out = self._append(key_states, value_states, new_pos)
        else:
            out = self._ring_write_many(key_states, value_states, new_pos)
        self._record()
        return out

    # ------------------------------------------------------------------ prefill
    def _store_prefill(self, k: torch.Tensor, v: torch.Tensor):
        B, H_kv, T, _ = k.shape
        self.keys, self.values = k, v
        self.seen = T
        self.pending = self.method.compresses  # method none: plain append from the start, no slot index needed
        self._record()
        return k, v

    def finish_prefill(self, query: torch.Tensor, key_valid: torch.Tensor, positions: torch.Tensor, scaling: float,
                       moments: QueryMoments | None = None):
        """Select what to keep, right after this layer's full prefill attention.

        Args:
            query: (B, H, T, D) post-RoPE queries of the prompt (the chunked prefill: only its last rows).
            key_valid: (B, T) bool, False on left padding.
            positions: (B, T) long positions of the prompt tokens.
            scaling: the attention scale.
            moments: the running query moments the chunked prefill summed, when the method reads them; None: they
                are taken from ``query`` (every row of the one-pass prefill).
        """
        self.pending = False
        keys, values = self.keys, self.values
        B, H_kv, T, D = keys.shape
        Q = getattr(self.method, "query_window", 0)  # a decode-time method's query ring, seeded by the prompt
        self.query_tail = query[:, :, -Q:].clone() if Q else None
        counts = None
        if not self.method.needs_selection(T):
            idx = torch.arange(T, device=keys.device).expand(B, H_kv, T)
            n_frozen = T
        else:
            skip = self.method.query_moments(T)
            if skip is not None and moments is None:
                moments = QueryMoments.of(query, positions, key_valid, skip, self.inv_freq)
            view = PrefillView(query=query, keys=keys, key_valid=key_valid, scaling=scaling, values=values,
                               moments=moments, inv_freq=self.inv_freq, layer_idx=self.layer_idx,
                               n_layers=self.stats.n_layers)
            sel = self.method.select(view)
            idx = sel.indices
            if idx is None:
                idx = keep_indices(sel.scores, sel.n_keep, sel.n_frozen, key_valid)
            n_frozen = sel.n_frozen
            counts = sel.counts
            if counts is not None:  # ragged (to be ported onto the storage policy): every layer padded to the
                pad = self.method.prefill_slots(T) - idx.shape[-1]  # method's largest count, slots past a head's
                if pad > 0:  # count not valid, so that the engine's slot schedule agrees across layers
                    idx = torch.cat([idx, idx.new_zeros(B, H_kv, pad)], dim=-1)
                n_frozen = idx.shape[-1]
        n_keep = idx.shape[-1]
        self.aligned = counts is None and n_keep == T and bool((idx == torch.arange(T, device=idx.device)).all())
        valid = key_valid[:, None, :].expand(B, H_kv, T).gather(-1, idx)
        if counts is not None:
            valid = valid & (torch.arange(n_keep, device=idx.device) < counts[..., None])
        pos = positions[:, None, :].expand(B, H_kv, T).gather(-1, idx)
        self.has_invalid = not bool(valid.all())
        self.next_pos = positions[:, -1] + 1
        if self.ring is None:
            if self.aligned:  # nothing dropped: keep the prompt tensors; slot s stays token s, the stock mask holds
                self.keys, self.values = keys, values
                self.valid = self.pos = None
            else:
                self.keys, self.values = _gather_tokens(keys, idx), _gather_tokens(values, idx)
                self.valid, self.pos = valid, pos
            self.n_frozen = n_keep
        else:
            # One allocation for the whole generation: frozen prefix + ring.
            S = n_frozen + self.ring
            ring_init = n_keep - n_frozen
            self.keys = keys.new_zeros(B, H_kv, S, D)
            self.values = values.new_zeros(B, H_kv, S, D)
            self.valid = torch.zeros(B, H_kv, S, dtype=torch.bool, device=keys.device)
            self.pos = torch.zeros(B, H_kv, S, dtype=torch.long, device=keys.device)
            self.keys[:, :, :n_keep] = _gather_tokens(keys, idx)
            self.values[:, :, :n_keep] = _gather_tokens(values, idx)
            self.valid[:, :, :n_keep] = valid
            self.valid[:, :, n_keep:] = True  # free ring slots become visible only once a decoded token is in them
            self.pos[:, :, :n_keep] = pos
            self.n_frozen, self.filled = n_frozen, ring_init
        self.view_n, self._view = self._slots_now(), None
        self._view_n = None
        self._record()

    # ------------------------------------------------------------------ decode
    def _append(self, k: torch.Tensor, v: torch.Tensor, new_pos: torch.Tensor):
        B, H_kv, q, _ = k.shape
        self.keys = torch.cat([self.keys, k], dim=-2)
        self.values = torch.cat([self.values, v], dim=-2)
        self.valid = torch.cat([self.valid, self.valid.new_ones(B, H_kv, q)], dim=-1)
        self.pos = torch.cat([self.pos, new_pos[:, None, :].expand(B, H_kv, q)], dim=-1)
        S = self.keys.shape[-2]
        self.view_n, self._view = S, None
        self.new_slots = slice(S - q, S)
        return self.keys, self.values

    def _ring_write_one(self, k: torch.Tensor, v: torch.Tensor):
        """One decoded token (B, H_kv, 1, D) into its ring slot, in place: K and V (and the validity bit when it may
        overwrite padding; its position is written lazily, see ``SlotIndex``). Two copies, no allocation, no host
        synchronisation; the returned views are reused while the number of slots does not change."""
        slot = self.n_frozen + self.filled % self.ring
        if self.filled >= self.ring:
            self.aligned = False  # the oldest ring token is overwritten
            if self.has_invalid:  # it may be padding seeded by the prefill (free slots are already valid)
                self.valid[:, :, slot] = True
        self.keys.narrow(2, slot, 1).copy_(k)
        self.values.narrow(2, slot, 1).copy_(v)
        self.new_slots = slice(slot, slot + 1)
        n = self.n_frozen + min(self.filled + 1, self.ring)
        self.ring_written(self.filled, n)  # its position is written by the next flush_positions
        self.filled += 1
        if n != self._view_n:
            self._kv_view = (self.keys[:, :, :n], self.values[:, :, :n])
            self._view_n = n
        return self._kv_view

    def _ring_write_many(self, k: torch.Tensor, v: torch.Tensor, new_pos: torch.Tensor):
        """Several tokens at once after prefill (a continued prompt): attend over the current slots plus all new
        tokens, then keep the newest ``ring`` of them in the ring."""
        B, H_kv, q, _ = k.shape
        n = self._slots_now()
        out_k = torch.cat([self.keys[:, :, :n], k], dim=-2)
        out_v = torch.cat([self.values[:, :, :n], v], dim=-2)
        new_pos_h = new_pos[:, None, :].expand(B, H_kv, q)
        self.set_view(
            torch.cat([self.valid[..., :n], self.valid.new_ones(B, H_kv, q)], dim=-1),
            torch.cat([self.pos[..., :n], new_pos_h], dim=-1),
        )
        self.new_slots = slice(n, n + q)
        self.aligned = False
        for i in range(max(q - self.ring, 0), q):
            slot = self.n_frozen + self.filled % self.ring
            self.keys[:, :, slot] = k[:, :, i]
            self.values[:, :, slot] = v[:, :, i]
            self.valid[:, :, slot] = True
            self.pos[:, :, slot] = new_pos_h[..., i]
            self.filled += 1
        return out_k, out_v

    # ------------------------------------------------------------------ sizes and stats
    def _slots_now(self) -> int:
        if self.ring is None:
            return self.keys.shape[-2]
        return self.n_frozen + min(self.filled, self.ring)

    def _slots_after(self, q: int) -> int:
        if self.pending:
            raise RuntimeError("snapstream_core: decode step before the prefill selection (attention not attached?)")
        if self.ring is None:
            return self.keys.shape[-2] + q
        if q == 1:
            return self.n_frozen + min(self.filled + 1, self.ring)
        return self._slots_now() + q

    def tokens_held(self) -> int:
        """Filled KV entries per KV head for one sequence."""
        if self.keys is None:
            return 0
        return self.keys.shape[-2] if (self.pending or self.ring is None) else self._slots_now()

    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()

    def _record(self) -> None:
        self.stats.record(self.layer_idx, self.nbytes(), self.tokens_held(), self.keys.shape[0])
        if self.layer_idx == self.stats.n_layers - 1 and not self.pending:
            self.stats.step_done()

    # ------------------------------------------------------------------ batch surgery (generate, sample-n, beams)
    def _map_batch(self, fn) -> None:
        self.flush_positions()
        for name in ("keys", "values", "valid", "pos", "next_pos"):
            value = getattr(self, name)
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
