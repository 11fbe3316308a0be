"""The engine's decode rows: fixed (rows, slots) K/V buffers that every refill reuses, and the per-row counters.

Row ``r`` holds one sample: the compressed prefix of its item (copied from the batch-1 prefill cache) followed by
the tokens it decodes. Its step ``t`` (the t-th token fed back) is written at slot
``base[r] + (offset[r] + t) % period[r]``: ``base = n_kept, offset = 0, period = huge`` for the appending methods
(``none``, ``snapkv``), ``base = n_frozen, offset = filled, period = ring`` for the ring methods; its position is
``pos0[r] + t``. All of it lives in (rows,) tensors on the device, so one decode step has fixed shapes whatever the
rows hold and needs no host synchronisation.

The buffers are allocated once per run, for the largest row the run needs (``CompressionMethod.slots`` of its
longest prompt): a prompt whose row would not fit is refused before it is prefilled.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from snapstream_core.cache import CompressedCache

_NO_WRAP = 1 << 62  # period of the appending methods: never wraps


class SlotLayer(CacheLayerMixin):
    """Fixed K/V storage (R, H_kv, S, D) of one layer; written only by :meth:`RowCache.update`."""

    is_compileable = True
    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.keys, self.values = keys, values
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # storage is given at construction
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        raise RuntimeError("snapstream_core: SlotLayer is written through RowCache.update")

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]

    def get_max_length(self) -> int:
        return self.keys.shape[-2]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2], 0


class RowCache(Cache):
    """Per layer (R, H_kv, S, D) K/V; ``visible`` (L, R, H_kv, S) bool slot mask; ``write_slot`` (R,) long, the slot
    each row writes this step. ``view(hi, n)`` is the same storage restricted to rows ``[0, hi)`` and their first
    ``n`` slots (a cache of the same class, sharing memory)."""

    is_compileable = True

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], visible: torch.Tensor):
        super().__init__(layers=[SlotLayer(k, v) for k, v in zip(keys, values)])
        self.keys, self.values, self.visible = keys, values, visible
        self.write_slot: torch.Tensor | None = None
        if visible.is_cuda and visible._base is None:  # the buffers themselves, not a row's view
            for t in (*keys, *values, visible):
                torch._dynamo.mark_static_address(t)  # mutated in place by the graph: CUDA graphs keep the address

    @classmethod
    def empty(cls, rows: int, slots: int, like: CompressedCache, zeros=None) -> RowCache:
        """Zeroed buffers of ``rows`` x ``slots``, head count, head dim, dtype and device as ``like``; on the CPU
        from ``zeros(shapes, dtype)`` when given (``DecodeKernels.zeros``)."""
        shapes = []
        for layer in like.layers:
            _, H, _, D = layer.keys.shape
            shapes += [(rows, H, slots, D)] * 2
        first = like.layers[0].keys
        if zeros is not None and first.device.type == "cpu":
            storage = zeros(shapes, first.dtype)
        else:
            storage = [first.new_zeros(shape) for shape in shapes]
        keys, values = storage[0::2], storage[1::2]
        visible = torch.zeros(len(keys), rows, keys[0].shape[1], slots, dtype=torch.bool, device=keys[0].device)
        return cls(keys, values, visible)

    @property
    def rows(self) -> int:
        return self.visible.shape[1]

    @property
    def slots(self) -> int:
        return self.visible.shape[-1]

    def view(self, hi: int, slots: int, lo: int = 0) -> RowCache:
        """Rows ``[lo, hi)`` over their first ``slots`` slots, sharing storage (writes go to this cache)."""
        if lo == 0 and hi == self.rows and slots == self.slots:
            return self
        return RowCache([k[lo:hi, :, :slots] for k in self.keys], [v[lo:hi, :, :slots] for v in self.values],
                        self.visible[:, lo:hi, :, :slots])

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

        Returns the row's slot schedule ``(base, offset, period, n_slots)``, the layers' storage policy's
        (``CompressedLayer.schedule`` and ``row_schedule``): step t goes to ``base + (offset + t) % period``;
        ``n_slots`` is how many slots the prefix fills (a layer that fills fewer leaves the rest hidden)."""
        layers = prefix.layers
        for layer in layers:
            if layer.pending or layer.keys is None:
                raise RuntimeError("snapstream_core: RowCache.load needs a prefilled, compressed cache")
            layer.flush_positions()
        schedule = type(layers[0]).row_schedule([layer.schedule() for layer in layers])  # the policy's
        if schedule[-1] > self.slots:
            raise RuntimeError(f"snapstream_core: a prefix of {schedule[-1]} slots does not fit {self.slots} row slots")
        for i, layer in enumerate(layers):
            n = layer.schedule()[-1]
            self.keys[i][row, :, :n] = layer.keys[0, :, :n]
            self.values[i][row, :, :n] = layer.values[0, :, :n]
            self.visible[i, row] = False
            self.visible[i, row, :, :n] = True if layer.valid is None else layer.valid[0, :, :n]
        return schedule

    def nbytes_per_row(self) -> int:
        """Bytes of one row's K/V storage in every layer."""
        return sum(t[0].numel() * t.element_size() for t in (*self.keys, *self.values))

    def bytes_for(self, slots: int) -> int:
        """Bytes of the K/V storage of a row of ``slots`` slots (a sample's own figure, whatever the rows hold)."""
        return self.nbytes_per_row() // self.slots * slots
