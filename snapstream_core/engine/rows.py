"""The engine's decode rows: fixed (rows, slots) K/V buffers that every refill reuses, and the per-row counters.

Row ``r`` holds one sample: the compressed prefix of its item (copied from the batch-1 prefill cache) followed by
the tokens it decodes. Its step ``t`` (the t-th token fed back) is written at slot
``base[r] + (offset[r] + t) % period[r]``: ``base = n_kept, offset = 0, period = huge`` for the appending methods
(``none``, ``snapkv``), ``base = n_frozen, offset = filled, period = ring`` for the ring methods; its position is
``pos0[r] + t``. All of it lives in (rows,) tensors on the device, so one decode step has fixed shapes whatever the
rows hold and needs no host synchronisation.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from snapstream_core.cache import CompressedCache
from snapstream_core.static_decode import _SlotLayer

_NO_WRAP = 1 << 62  # period of the appending methods: never wraps


class RowCache(Cache):
    """Per layer (R, H_kv, S, D) K/V; ``visible`` (L, R, H_kv, S) bool slot mask; ``write_slot`` (R,) long, the slot
    each row writes this step. ``view(r, n)`` is the same storage restricted to row ``r`` and its first ``n`` slots
    (a batch-1 cache of the same class, sharing memory)."""

    is_compileable = True

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], visible: torch.Tensor):
        super().__init__(layers=[_SlotLayer(k, v) for k, v in zip(keys, values)])
        self.keys, self.values, self.visible = keys, values, visible
        self.write_slot: torch.Tensor | None = None
        if visible.is_cuda and visible._base is None:  # the buffers themselves, not a row's view
            for t in (*keys, *values, visible):
                torch._dynamo.mark_static_address(t)  # mutated in place by the graph: CUDA graphs keep the address

    @classmethod
    def empty(cls, rows: int, slots: int, like: CompressedCache) -> RowCache:
        """Zeroed buffers of ``rows`` x ``slots``, head count, head dim, dtype and device as ``like``."""
        keys, values = [], []
        for layer in like.layers:
            _, H, _, D = layer.keys.shape
            keys.append(layer.keys.new_zeros(rows, H, slots, D))
            values.append(layer.values.new_zeros(rows, H, slots, D))
        visible = torch.zeros(len(keys), rows, keys[0].shape[1], slots, dtype=torch.bool, device=keys[0].device)
        return cls(keys, values, visible)

    @property
    def rows(self) -> int:
        return self.visible.shape[1]

    @property
    def slots(self) -> int:
        return self.visible.shape[-1]

    def grown(self, slots: int) -> RowCache:
        """A copy with ``slots`` slots per row (more than now), the rows' contents kept."""
        out = RowCache(
            [k.new_zeros(*k.shape[:2], slots, k.shape[-1]) for k in self.keys],
            [v.new_zeros(*v.shape[:2], slots, v.shape[-1]) for v in self.values],
            self.visible.new_zeros(*self.visible.shape[:3], slots),
        )
        S = self.slots
        for src, dst in zip((*self.keys, *self.values), (*out.keys, *out.values)):
            dst[:, :, :S] = src
        out.visible[..., :S] = self.visible
        return out

    def view(self, row: int, slots: int) -> RowCache:
        """Row ``row`` over its first ``slots`` slots, sharing storage (writes go to this cache)."""
        view = RowCache(
            [k[row : row + 1, :, :slots] for k in self.keys],
            [v[row : row + 1, :, :slots] for v in self.values],
            self.visible[:, row : row + 1, :, :slots],
        )
        return view

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Write (R, H_kv, 1, D) at each row's ``write_slot``; return the whole (R, H_kv, S, D) storage."""
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        idx = self.write_slot[:, None, None, None].expand_as(key_states)
        keys.scatter_(2, idx, key_states)
        values.scatter_(2, idx, value_states)
        return keys, values

    def mark_written(self) -> None:
        """Make each row's ``write_slot`` visible in every layer (before the step attends: a token sees itself)."""
        L, R, H, _ = self.visible.shape
        self.visible.scatter_(-1, self.write_slot[None, :, None, None].expand(L, R, H, 1), True)

    def load(self, row: int, prefix: CompressedCache) -> tuple[int, int, int, int]:
        """Copy the batch-1 compressed ``prefix`` into ``row`` (hiding whatever the row held before).

        Returns the row's slot schedule ``(base, offset, period, n_slots)``: step t goes to
        ``base + (offset + t) % period``; ``n_slots`` is how many slots the prefix fills."""
        schedule = None
        for i, layer in enumerate(prefix.layers):
            if layer.pending or layer.keys is None:
                raise RuntimeError("snapstream_core: RowCache.load needs a prefilled, compressed cache")
            layer.flush_positions()
            if layer.ring is None:
                n = layer.keys.shape[-2]
                sched = (n, 0, _NO_WRAP, n)
            else:
                n = layer._slots_now()
                sched = (layer.n_frozen, layer.filled, layer.ring, n)
            if schedule is None:
                schedule = sched
            elif sched != schedule:
                raise RuntimeError("snapstream_core: layers disagree on the slot schedule")
            if n > self.slots:
                raise RuntimeError(f"snapstream_core: a prefix of {n} slots does not fit {self.slots} row slots")
            self.keys[i][row, :, :n] = layer.keys[0, :, :n]
            self.values[i][row, :, :n] = layer.values[0, :, :n]
            self.visible[i, row] = False
            self.visible[i, row, :, :n] = True if layer.valid is None else layer.valid[0, :, :n]
        return schedule

    def nbytes_per_row(self) -> int:
        return sum(t[0].numel() * t.element_size() for t in (*self.keys, *self.values))


def prefix_slots(prefix: CompressedCache) -> int:
    """Slots the batch-1 compressed ``prefix`` fills (its first layer; all layers agree)."""
    layer = prefix.layers[0]
    return layer.keys.shape[-2] if layer.ring is None else layer._slots_now()


def row_slots(prefix: CompressedCache, max_new_tokens: int) -> int:
    """Slots one sample of this prefix needs: its prefix and the ``max_new_tokens - 1`` tokens fed back (appending
    methods), or the method's fixed footprint (ring methods: the same for every prompt)."""
    layer = prefix.layers[0]
    if layer.ring is None:
        return layer.keys.shape[-2] + max_new_tokens - 1
    return max(layer.n_frozen + layer.ring, prefix.method.footprint(2**40, 2**40))
