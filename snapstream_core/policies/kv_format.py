"""How one K/V entry is stored: the model's dtype, FP8 (E4M3 with per-row scales) or KIVI's 2/4-bit codes.

A format is orthogonal to the storage policy (which entries are kept, :mod:`snapstream_core.policies`): a policy
says how many slots a row holds, the format how many bytes those slots take. Plain numbers, no torch (the planner
runs on a laptop); the codecs themselves are :mod:`snapstream_core.quant`.

- ``auto``: the model's dtype (``b`` bytes per element), as vLLM's ``kv_cache_dtype="auto"``.
- ``fp8_e4m3``: one byte per element, plus fp32 scales per row and layer for K and for V: one (``scale="tensor"``
  or ``"one"``, the fixed 1.0 vLLM uses for a checkpoint without KV scales) or one per KV head (``"head"``).
- ``kivi`` (KIVI, arXiv 2402.02750; jy-yuan/KIVI): keys quantized per channel in groups of ``group_size`` tokens,
  values per token in groups of ``group_size`` channels, ``bits`` per element packed 8 / bits to a byte, a scale and
  a minimum (the model's dtype) per group; the latest tokens stay in full precision: a key residual of ``residual``
  slots and a value window of ``residual + 1`` (the official code's ``key_states_full`` / ``value_states_full``).

Symbols as :mod:`snapstream_core.memory`: ``L`` layers, ``H_kv`` KV heads, ``D`` head dim, ``b`` bytes per element
of the model's dtype, ``S`` slots of a row.
"""

from __future__ import annotations

from dataclasses import dataclass

KV_DTYPES = ("auto", "fp8_e4m3")
KV_SCALES = ("tensor", "head", "one")
KIVI_BITS = (2, 4)
FP8_BYTES = 1
SCALE_BYTES = 4  # fp32 scales of the FP8 format


@dataclass(frozen=True)
class KVFormat:
    """``kind``: ``auto``, ``fp8_e4m3`` or ``kivi``; ``scale`` (fp8): ``tensor``, ``head`` or ``one``; ``bits``,
    ``group_size``, ``residual`` (kivi)."""

    kind: str = "auto"
    scale: str = "tensor"
    bits: int = 0
    group_size: int = 0
    residual: int = 0

    @property
    def quantized(self) -> bool:
        return self.kind != "auto"

    @property
    def label(self) -> str:
        """A short name for tables: ``auto``, ``fp8_e4m3/head``, ``kivi2/g32/r128``."""
        if self.kind == "fp8_e4m3":
            return f"fp8_e4m3/{self.scale}"
        if self.kind == "kivi":
            return f"kivi{self.bits}/g{self.group_size}/r{self.residual}"
        return "auto"

    def scales_per_layer(self, n_kv_heads: int) -> int:
        """FP8 scales per row, layer and tensor (K or V): 1, or one per KV head."""
        return n_kv_heads if self.scale == "head" else 1

    def layer_bytes(self, slots: int, n_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
        """Bytes of one layer's K and V storage for one row of ``slots`` slots: codes, scales, minima and the
        full-precision residual (exact: what the storage allocates)."""
        H, D, b, S = n_kv_heads, head_dim, dtype_bytes, slots
        if self.kind == "auto":
            return 2 * S * H * D * b
        if self.kind == "fp8_e4m3":
            return 2 * S * H * D * FP8_BYTES + 2 * self.scales_per_layer(H) * SCALE_BYTES
        G, R = self.group_size, self.residual
        codes = 2 * S * H * D * self.bits // 8  # K and V, packed
        key_groups = -(-S // G) * H * D * 2 * b  # a scale and a minimum per channel and group of G tokens
        value_groups = S * H * (D // G) * 2 * b  # ... per token and group of G channels
        residual = (R + (R + 1)) * H * D * b  # the key residual and the value window, full precision
        return codes + key_groups + value_groups + residual

    def row_bytes(self, slots: int, n_layers: int, n_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
        """Bytes of the K/V storage of one row in every layer (:meth:`layer_bytes` times ``L``)."""
        return n_layers * self.layer_bytes(slots, n_kv_heads, head_dim, dtype_bytes)

    def read_bytes(self, slots: int, n_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
        """Bytes per row of the dequantized K and V one layer's decode attention reads (the unfused path: a copy in
        the model's dtype, plus the fp32 product of one of them before it is cast; for KIVI also the float32 copy of
        its two full-precision rings the read writes over the dequantized slots, measured 3% above the rest in bf16
        by ``tests/test_kivi_engine.py``); 0 for ``auto``."""
        if self.kind == "auto":
            return 0
        elems = slots * n_kv_heads * head_dim
        rings = (2 * self.residual + 1) * n_kv_heads * head_dim * 4 if self.kind == "kivi" else 0
        return 2 * elems * dtype_bytes + elems * 4 + rings
