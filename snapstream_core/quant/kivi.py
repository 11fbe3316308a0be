"""KIVI's asymmetric 2/4-bit quantization of K/V (Liu et al. 2024, arXiv 2402.02750; jy-yuan/KIVI).

Keys are quantized per channel over groups of ``group_size`` consecutive tokens, values per token over groups of
``group_size`` consecutive channels. Each group gets its minimum ``mn`` and ``scale = (max - mn) / (2**bits - 1)``,
both in the data's dtype, and each element the code ``clamp(round((x - mn) / scale), 0, 2**bits - 1)``: the
official ``quant/new_pack.py`` (``quant_and_pack_kcache`` / ``quant_and_pack_vcache``, and the Triton path
``triton_quantize_and_pack_along_last_dim`` the model code calls), operation for operation in the same dtype, so the
codes, scales and minima are the official ones bit for bit (``tests/test_kivi_quant.py`` against
``tests/data/kivi_official.pt``, made by ``bench/kivi_fixture.py``).

Two choices differ from the official code, neither changing a dequantized value:

- A constant group (``max == mn``, scale 0) divides 0 by 0 there; the NaN is cast to an integer (undefined, and
  OR-ed into the neighbouring codes of its int32 word). Its dequantized value is ``code * 0 + mn = mn`` whatever the
  code, so here its codes are 0.
- Dequantization ``code * scale + mn`` is computed in float32 and rounded once to the output dtype; the official
  ``unpack_and_dequant_*`` multiply and add in float16 (two roundings). Equal for float32 data; within one float16
  rounding of the product for float16 data.

Codes are packed ``8 // bits`` to a ``uint8`` along the head dim (:func:`pack`), so one token's codes are contiguous
(the official code packs 32 // bits into an int32, keys along tokens): a decoded token is written in place.
"""

from __future__ import annotations

import torch


def max_code(bits: int) -> int:
    """The largest code of ``bits`` bits (3 for 2 bits, 15 for 4)."""
    return (1 << bits) - 1


def _quantize(x: torch.Tensor, dim: int, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize ``x`` in groups along ``dim`` (the group's elements) -> uint8 codes shaped as ``x``, and the
    scale and minimum with ``dim`` kept as 1, in ``x``'s dtype (the official operations, in order)."""
    top = max_code(bits)
    mn = torch.amin(x, dim=dim, keepdim=True)
    mx = torch.amax(x, dim=dim, keepdim=True)
    scale = (mx - mn) / top
    q = ((x - mn) / scale).clamp(0, top).round()
    q = torch.where(scale == 0, 0.0, q)  # a constant group: 0/0 there, its value is mn whatever the code
    return q.to(torch.uint8), scale, mn


def quantize_keys(k: torch.Tensor, group_size: int, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-channel quantization over groups of ``group_size`` tokens.

    Args:
        k: (B, H_kv, T, D) keys, ``T`` a multiple of ``group_size``.
    Returns:
        codes (B, H_kv, T, D) uint8 (unpacked), scale and mn (B, H_kv, T // group_size, D) in ``k``'s dtype.
    """
    B, H, T, D = k.shape
    if T % group_size:
        raise ValueError(f"quantize_keys: {T} tokens are not a multiple of group_size {group_size}")
    codes, scale, mn = _quantize(k.reshape(B, H, T // group_size, group_size, D), 3, bits)
    return codes.reshape(B, H, T, D), scale.squeeze(3), mn.squeeze(3)


def quantize_values(v: torch.Tensor, group_size: int, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token quantization over groups of ``group_size`` channels.

    Args:
        v: (B, H_kv, T, D) values, ``D`` a multiple of ``group_size``.
    Returns:
        codes (B, H_kv, T, D) uint8 (unpacked), scale and mn (B, H_kv, T, D // group_size) in ``v``'s dtype.
    """
    B, H, T, D = v.shape
    if D % group_size:
        raise ValueError(f"quantize_values: head dim {D} is not a multiple of group_size {group_size}")
    codes, scale, mn = _quantize(v.reshape(B, H, T, D // group_size, group_size), 4, bits)
    return codes.reshape(B, H, T, D), scale.squeeze(4), mn.squeeze(4)


def dequantize_keys(codes: torch.Tensor, scale: torch.Tensor, mn: torch.Tensor, group_size: int,
                    dtype: torch.dtype | None = None) -> torch.Tensor:
    """codes (B, H_kv, T, D) uint8, or float32 (:func:`unpack_float`: that buffer is then overwritten), scale and mn
    (B, H_kv, ceil(T / group_size), D) -> (B, H_kv, T, D) keys ``code * scale + mn`` in ``dtype`` (default: the
    scale's), computed in float32 in one buffer (the scales are broadcast over their group, never repeated). ``T``
    need not be a multiple of the group (a row's slots): the last group's scale covers the rest."""
    x = codes.to(torch.float32)
    T, G = x.shape[2], group_size
    full = T - T % G
    if full:
        n = full // G
        x[:, :, :full].unflatten(2, (n, G)).mul_(scale[:, :, :n, None]).add_(mn[:, :, :n, None])
    if full < T:
        n = full // G
        x[:, :, full:].mul_(scale[:, :, n : n + 1]).add_(mn[:, :, n : n + 1])
    return x.to(dtype or scale.dtype)


def dequantize_values(codes: torch.Tensor, scale: torch.Tensor, mn: torch.Tensor, group_size: int,
                      dtype: torch.dtype | None = None) -> torch.Tensor:
    """codes (B, H_kv, T, D) uint8, or float32 (overwritten), scale and mn (B, H_kv, T, D // group_size) ->
    (B, H_kv, T, D) values ``code * scale + mn`` in ``dtype`` (default: the scale's), computed in float32 in one
    buffer."""
    x = codes.to(torch.float32)
    x.unflatten(-1, (x.shape[-1] // group_size, group_size)).mul_(scale[..., None]).add_(mn[..., None])
    return x.to(dtype or scale.dtype)


def _shifts(bits: int, device: torch.device) -> torch.Tensor:
    """(8 // bits,) uint8 bit offsets of the codes in a byte, the first code in the low bits (the official order
    within a word)."""
    return torch.arange(0, 8, bits, dtype=torch.uint8, device=device)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """(..., D) uint8 codes of ``bits`` bits -> (..., D * bits // 8) uint8: byte j holds codes
    ``[j * c, (j + 1) * c)``, ``c = 8 // bits``, code ``j * c + i`` at bits ``[i * bits, (i + 1) * bits)``."""
    c = 8 // bits
    D = codes.shape[-1]
    if D % c:
        raise ValueError(f"pack: {D} codes are not a multiple of {c} (codes per byte at {bits} bits)")
    grouped = codes.reshape(*codes.shape[:-1], D // c, c).to(torch.int32)
    return (grouped << _shifts(bits, codes.device).to(torch.int32)).sum(-1).to(torch.uint8)


def unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """(..., P) uint8 from :func:`pack` -> (..., P * 8 // bits) uint8 codes (uint8 throughout)."""
    codes = (packed[..., None] >> _shifts(bits, packed.device)) & max_code(bits)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * (8 // bits))


def unpack_float(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """(..., P) uint8 from :func:`pack` -> (..., P * 8 // bits) float32 codes, written straight into the float32
    buffer the dequantization then works in (no full-size uint8 copy of the codes)."""
    c = 8 // bits
    out = torch.empty(*packed.shape, c, dtype=torch.float32, device=packed.device)
    for i in range(c):
        out[..., i] = (packed >> (i * bits)) & max_code(bits)
    return out.flatten(-2)
