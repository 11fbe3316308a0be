"""The eager cache layer of ``compression=kivi``: every token kept, keys and values stored as KIVI's 2/4-bit codes
beside full-precision rings of the latest tokens (the schedule: :mod:`snapstream_core.methods.kivi`; the codec:
:mod:`snapstream_core.quant.kivi`; the life of a layer: :mod:`snapstream_core.layer`).

State after the prefill, ``B`` rows, ``H`` KV heads, ``S`` slots (slot s holds token s, every token of the row),
``D`` head dim, ``G`` the group size, ``R`` the residual, ``P = D * bits / 8``:

- ``keys``, ``values``: (B, H, S, P) uint8, every slot's packed codes (a slot still in full precision holds zeros
  until it is quantized: the storage of a slot is allocated when it is written, as :class:`KVFormat` counts it);
- ``key_scale``, ``key_min``: (B, H, ceil(S / G), D), one per channel and group of G tokens, the model's dtype;
- ``value_scale``, ``value_min``: (B, H, S, D / G), one per token and group of G channels;
- ``key_ring``: (B, H, R, D) the full-precision keys, slot s at index ``s % R`` (the keys past the last multiple
  of R); ``value_ring``: (B, H, R + 1, D) the full-precision values, slot s at index ``s % (R + 1)`` (the latest R,
  and during a step the new one beside the one it pushes out).

A decode step with ``m`` tokens stored (the new token is slot ``m``) returns (B, H, m + 1, D) keys/values in the
model's dtype: keys ``[0, R * floor(m / R))`` and values ``[0, max(m - R, 0))`` dequantized, the rest from the
rings; then, as the official code does after its attention, the key ring is quantized whole when it is full and the
value that left the window is quantized. Dequantizing every step is the unfused path (KIVI's CUDA kernels are not
used): ``KVFormat.read_bytes`` counts that transient copy.
"""

from __future__ import annotations

import torch

from snapstream_core.layer import AppendLayer
from snapstream_core.quant.kivi import (
    dequantize_keys,
    dequantize_values,
    pack,
    quantize_keys,
    quantize_values,
    unpack_float,
)

QUANT_STATE = ("key_scale", "key_min", "value_scale", "value_min", "key_ring", "value_ring")


def refuse_padding(key_valid: torch.Tensor) -> None:
    """KIVI's key groups start at slot 0 of each row: a left-padded row would group its tokens with its padding,
    so a sample would depend on the lengths of its neighbours. Refused in one line (the engine and the runner
    prefill one prompt at a time)."""
    if not bool(key_valid.all()):
        raise ValueError("compression.method: kivi groups each row's tokens from its first slot and cannot store a "
                         "left-padded batch (a sample would depend on its neighbours); decode one prompt at a time "
                         "(the engine does)")


class KiviLayer(AppendLayer):
    """The ``append`` policy stored as KIVI's codes (see the module docstring for the state and the step)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.key_scale = self.key_min = self.value_scale = self.value_min = None
        self.key_ring = self.value_ring = None

    @property
    def quantized(self) -> bool:
        """Whether the prefill was stored as codes (before: the full prompt, transient)."""
        return self.key_ring is not None

    # ------------------------------------------------------------------ prefill
    def _store_prefill(self, k: torch.Tensor, v: torch.Tensor):
        self.method.check_shape({"head_dim": k.shape[-1]})
        return super()._store_prefill(k, v)

    def _keep(self, keys, values, idx, valid, pos, n_frozen: int) -> None:
        """Quantize the prompt (B, H, T, D): keys ``[0, T - T % R)``, values ``[0, max(T - R, 0))``; the rest goes
        to the rings."""
        refuse_padding(valid)
        keys, values = keys.detach(), values.detach()
        m = self.method
        G, R, bits = m.group_size, m.residual, m.bits
        B, H, T, D = keys.shape
        P = D * bits // 8
        nk, nv = T - T % R, max(T - R, 0)
        self.keys = keys.new_zeros(B, H, T, P, dtype=torch.uint8)
        self.values = values.new_zeros(B, H, T, P, dtype=torch.uint8)
        self.key_scale = keys.new_zeros(B, H, -(-T // G), D)
        self.key_min = torch.zeros_like(self.key_scale)
        self.value_scale = values.new_zeros(B, H, T, D // G)
        self.value_min = torch.zeros_like(self.value_scale)
        if nk:
            codes, scale, mn = quantize_keys(keys[:, :, :nk], G, bits)
            self.keys[:, :, :nk] = pack(codes, bits)
            self.key_scale[:, :, : nk // G], self.key_min[:, :, : nk // G] = scale, mn
        if nv:
            codes, scale, mn = quantize_values(values[:, :, :nv], G, bits)
            self.values[:, :, :nv] = pack(codes, bits)
            self.value_scale[:, :, :nv], self.value_min[:, :, :nv] = scale, mn
        self.key_ring = keys.new_zeros(B, H, R, D)
        self.key_ring[:, :, : T - nk] = keys[:, :, nk:]  # nk is a multiple of R: slot s at s - nk = s % R
        self.value_ring = values.new_zeros(B, H, R + 1, D)
        ring_idx = torch.arange(nv, T, device=values.device) % (R + 1)
        self.value_ring.index_copy_(2, ring_idx, values[:, :, nv:])
        self.valid = self.pos = None
        self.n_frozen = T

    # ------------------------------------------------------------------ decode
    def _write(self, k: torch.Tensor, v: torch.Tensor):
        """Store the (B, H, 1, D) new token at slot m; return (B, H, m + 1, D) keys/values to attend over."""
        q = k.shape[-2]
        if q != 1:
            raise ValueError(f"compression.method: kivi decodes one token per step after the prefill (its "
                             f"full-precision window moves one token at a time), got an update of {q} tokens")
        k, v = k.detach(), v.detach()  # storage, not a graph (also outside no_grad)
        meth = self.method
        G, R, bits = meth.group_size, meth.residual, meth.bits
        B, H, m, P = self.keys.shape
        D = k.shape[-1]
        dtype = self.key_ring.dtype
        self.keys = torch.cat([self.keys, self.keys.new_zeros(B, H, 1, P)], dim=2)
        self.values = torch.cat([self.values, self.values.new_zeros(B, H, 1, P)], dim=2)
        self.value_scale = torch.cat([self.value_scale, self.value_scale.new_zeros(B, H, 1, D // G)], dim=2)
        self.value_min = torch.cat([self.value_min, self.value_min.new_zeros(B, H, 1, D // G)], dim=2)
        if m % G == 0:  # slot m starts a key group
            self.key_scale = torch.cat([self.key_scale, self.key_scale.new_zeros(B, H, 1, D)], dim=2)
            self.key_min = torch.cat([self.key_min, self.key_min.new_zeros(B, H, 1, D)], dim=2)
        self.key_ring[:, :, m % R] = k[:, :, 0]
        self.value_ring[:, :, m % (R + 1)] = v[:, :, 0]

        kq, vq = R * (m // R), max(m - R, 0)  # slots read from the codes; the rest from the rings
        keys_out = dequantize_keys(unpack_float(self.keys, bits), self.key_scale, self.key_min, G, dtype)
        keys_out[:, :, kq:] = self.key_ring[:, :, : m + 1 - kq]  # slots [kq, m] at ring indices [0, m - kq]
        values_out = dequantize_values(unpack_float(self.values, bits), self.value_scale, self.value_min, G, dtype)
        ring_idx = torch.arange(vq, m + 1, device=v.device) % (R + 1)
        values_out[:, :, vq:] = self.value_ring.index_select(2, ring_idx)

        # after the attention (the official order): a full key ring becomes R / G groups of codes ...
        if (m + 1) % R == 0:
            start = m + 1 - R
            codes, scale, mn = quantize_keys(self.key_ring, G, bits)
            self.keys[:, :, start : m + 1] = pack(codes, bits)
            self.key_scale[:, :, start // G : (m + 1) // G] = scale
            self.key_min[:, :, start // G : (m + 1) // G] = mn
        # ... and the value pushed out of the R latest is quantized
        if m >= R:
            s = m - R
            codes, scale, mn = quantize_values(self.value_ring[:, :, s % (R + 1)][:, :, None], G, bits)
            self.values[:, :, s] = pack(codes, bits)[:, :, 0]
            self.value_scale[:, :, s], self.value_min[:, :, s] = scale[:, :, 0], mn[:, :, 0]
        return keys_out, values_out

    # ------------------------------------------------------------------ sizes
    def nbytes(self) -> int:
        """Bytes stored: codes, scales, minima and both rings (the full prompt while the prefill is pending)."""
        if not self.quantized:
            return super().nbytes()
        tensors = (self.keys, self.values, *(getattr(self, name) for name in QUANT_STATE))
        return sum(t.numel() * t.element_size() for t in tensors)

    def _slot_bytes(self) -> int:
        """Bytes of one slot of one KV head: its K and V codes, its value scales and minima, and its share of its
        key group's (``2 * D / G`` each); the rings are a fixed cost beside the slots."""
        if not self.quantized:
            return super()._slot_bytes()
        D, b = self.key_ring.shape[-1], self.key_ring.element_size()
        return 2 * self.keys.shape[-1] + 4 * (D // self.method.group_size) * b

    def _map_batch(self, fn) -> None:
        super()._map_batch(fn)
        for name in QUANT_STATE:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, fn(value))
