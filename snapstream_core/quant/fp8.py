"""FP8 E4M3 storage of K/V: quantize on write, dequantize when attention reads.

The stored code of an element ``x`` is vLLM's cache write (``reshape_and_cache_flash``, ``kv_cache_dtype="fp8"``):
``fp8_e4m3(x / scale)``, here with the value clamped to the format's range (+-448) first, so that a later token
larger than the scale allows saturates instead of becoming NaN; read back as ``float(code) * scale``. Codes are kept
as ``uint8`` (the bits of ``torch.float8_e4m3fn``): gathers, scatters and copies of slots then work on every device,
and only the conversions need the float8 dtype.

Scales (fp32), one per row and layer for K and one for V (``scale="tensor"``), one per row, layer and KV head
(``"head"``), or 1.0 (``"one"``: vLLM's value for a checkpoint that ships no KV scales, Llama-3.1-8B-Instruct's
case). ``tensor``/``head`` are the absolute maximum of the row's prompt (its valid tokens) over 448, fixed at the
prefill: a static per-tensor scale as a calibration would give (llm-compressor's min-max observer), calibrated on the
sample's own prompt so that a sample stays a function of its own inputs.
"""

from __future__ import annotations

import torch

FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
MIN_SCALE = 1e-12  # an all-zero prompt keeps a finite scale


def has_fp8() -> bool:
    """Whether this torch has the float8 E4M3 dtype."""
    return hasattr(torch, "float8_e4m3fn")


def fp8_scale(x: torch.Tensor, valid: torch.Tensor | None, mode: str) -> torch.Tensor:
    """x (B, H_kv, T, D), valid (B, T) bool or None (all valid) -> fp32 scales for ``mode``: (B, 1, 1, 1) for
    ``"tensor"`` (one per row over every head) and ``"one"`` (1.0), (B, H_kv, 1, 1) for ``"head"``. What is stored
    is exactly these (``KVFormat.scales_per_layer``); they broadcast over the heads."""
    B, H, _, _ = x.shape
    if mode == "one":
        return torch.ones(B, 1, 1, 1, dtype=torch.float32, device=x.device)
    mag = x.detach().abs().float()
    if valid is not None:
        mag = mag * valid[:, None, :, None].to(mag.dtype)
    amax = mag.amax(dim=(2, 3), keepdim=True)  # (B, H, 1, 1)
    if mode == "tensor":
        amax = amax.amax(dim=1, keepdim=True)
    elif mode != "head":
        raise ValueError(f"compression.kv_scale: must be tensor, head or one, got {mode!r}")
    return (amax / FP8_MAX).clamp(min=MIN_SCALE).contiguous()


def fp8_encode(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (B, H_kv, n, D) in any float dtype, scale (B, 1 or H_kv, 1, 1) fp32 -> (B, H_kv, n, D) uint8 E4M3 codes."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def fp8_decode(codes: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """codes (B, H_kv, n, D) uint8, scale (B, 1 or H_kv, 1, 1) fp32 -> (B, H_kv, n, D) in ``dtype``."""
    return (codes.view(torch.float8_e4m3fn).float() * scale).to(dtype)
