"""The engine's decode rows in FP8 E4M3 (``compression.kv_dtype=fp8_e4m3``): the rows' K/V slots hold uint8 codes
(:mod:`snapstream_core.quant.fp8`) and each row has its fp32 scales per layer for K and for V, copied from its prefix
(fixed at the prefill). A step quantizes the new token at each row's slot and hands attention the slots
dequantized to the model's dtype (the unfused path: one layer's (R, H_kv, S, D) copy at a time); a compaction
scores on dequantized K/V and moves the codes (:mod:`snapstream_core.engine.compact`)."""

from __future__ import annotations

import torch

from snapstream_core.cache import CompressedCache
from snapstream_core.engine.rows import RowCache
from snapstream_core.policies.kv_format import SCALE_BYTES
from snapstream_core.quant.fp8 import fp8_decode, fp8_encode


class Fp8RowCache(RowCache):
    """As :class:`RowCache`, with ``keys``/``values`` uint8 codes and per layer ``k_scale``/``v_scale`` (R, n, 1, 1)
    fp32 (``n``: 1, or H_kv for per-head scales); ``dtype`` the model's (what attention reads)."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], visible: torch.Tensor,
                 k_scale: list[torch.Tensor], v_scale: list[torch.Tensor], dtype: torch.dtype):
        super().__init__(keys, values, visible)
        self.k_scale, self.v_scale, self.dtype = k_scale, v_scale, dtype
        if visible.is_cuda and visible._base is None:
            for t in (*k_scale, *v_scale):
                torch._dynamo.mark_static_address(t)  # written by load, read by the graph

    @classmethod
    def empty(cls, rows: int, slots: int, like: CompressedCache, zeros=None) -> Fp8RowCache:
        """Zeroed codes and unit scales for ``rows`` x ``slots``, shaped as ``like``'s layers (an FP8 prefix)."""
        first = like.layers[0]
        if first.k_scale is None:
            raise RuntimeError("snapstream_core: Fp8RowCache needs a prefix stored in fp8 (kv_dtype=fp8_e4m3)")
        shapes = []
        for layer in like.layers:
            _, H, _, D = layer.keys.shape
            shapes += [(rows, H, slots, D)] * 2
        if zeros is not None and first.keys.device.type == "cpu":
            storage = zeros(shapes, torch.uint8)
        else:
            storage = [torch.zeros(shape, dtype=torch.uint8, device=first.keys.device) for shape in shapes]
        keys, values = storage[0::2], storage[1::2]
        n = first.k_scale.shape[1]
        k_scale = [torch.ones(rows, n, 1, 1, dtype=torch.float32, device=first.keys.device) for _ in keys]
        v_scale = [torch.ones(rows, n, 1, 1, dtype=torch.float32, device=first.keys.device) for _ in keys]
        visible = torch.zeros(len(keys), rows, keys[0].shape[1], slots, dtype=torch.bool, device=keys[0].device)
        return cls(keys, values, visible, k_scale, v_scale, first.dtype)

    def view(self, hi: int, slots: int, lo: int = 0) -> Fp8RowCache:
        if lo == 0 and hi == self.rows and slots == self.slots:
            return self
        return Fp8RowCache([k[lo:hi, :, :slots] for k in self.keys], [v[lo:hi, :, :slots] for v in self.values],
                           self.visible[:, lo:hi, :, :slots], [s[lo:hi] for s in self.k_scale],
                           [s[lo:hi] for s in self.v_scale], self.dtype)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Quantize (R, H_kv, 1, D) at each row's ``write_slot``; return every slot dequantized, (R, H_kv, S, D)."""
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        ks, vs = self.k_scale[layer_idx], self.v_scale[layer_idx]
        idx = self.write_slot[:, None, None, None].expand_as(key_states)
        keys.scatter_(2, idx, fp8_encode(key_states, ks))
        values.scatter_(2, idx, fp8_encode(value_states, vs))
        return fp8_decode(keys, ks, self.dtype), fp8_decode(values, vs, self.dtype)

    def load(self, row: int, prefix: CompressedCache) -> tuple[int, int, int, int]:
        """Copy the prefix's codes (``RowCache.load``) and its scales into ``row``."""
        schedule = super().load(row, prefix)
        for i, layer in enumerate(prefix.layers):
            self.k_scale[i][row] = layer.k_scale[0]
            self.v_scale[i][row] = layer.v_scale[0]
        return schedule

    def scale_bytes_per_row(self) -> int:
        return sum(s[0].numel() * SCALE_BYTES for s in (*self.k_scale, *self.v_scale))

    def nbytes_per_row(self) -> int:
        """One row's codes and scales in every layer."""
        return super().nbytes_per_row() + self.scale_bytes_per_row()

    def bytes_for(self, slots: int) -> int:
        codes = RowCache.nbytes_per_row(self) // self.slots * slots
        return codes + self.scale_bytes_per_row()
