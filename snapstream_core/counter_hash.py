"""The counter hash under every draw: SplitMix64 of (key, step, index) computed with int64 torch ops (wrapping
multiplication, logical shifts by masking), vectorised, with no host synchronisation and the same numbers on every
device and in every batch. The engine's sampling noise (:mod:`snapstream_core.engine.noise`) and the methods that draw
(``random``'s priorities, keyed on the sample) read it here, below both (a method never imports the engine)."""

from __future__ import annotations

import zlib

import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _signed(x: int) -> int:
    """An unsigned 64-bit integer as the int64 with the same bits."""
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


def _mix_int(x: int) -> int:
    """SplitMix64's finaliser on a Python int (unsigned 64-bit result)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * _M1) & _MASK64
    x = ((x ^ (x >> 27)) * _M2) & _MASK64
    return x ^ (x >> 31)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 tensors (bit-identical to :func:`_mix_int`)."""
    x = (x ^ _shr(x, 30)) * _signed(_M1)
    x = (x ^ _shr(x, 27)) * _signed(_M2)
    return x ^ _shr(x, 31)


def item_key(item_id: str) -> int:
    """A stable 32-bit key of an item id (the same in every process: no Python ``hash``)."""
    return zlib.crc32(str(item_id).encode())


def sample_key(seed: int, item: int, sample_idx: int) -> int:
    """The int64 key of sample ``sample_idx`` of item key ``item`` under ``gen.seed``."""
    x = _mix_int(int(seed) + _GOLDEN)
    x = _mix_int(x ^ (int(item) * _GOLDEN))
    x = _mix_int(x ^ ((int(sample_idx) + 1) * _M2))
    return _signed(x)


def uniforms(keys: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:
    """keys (R,) int64, steps (R,) int64 -> (R, vocab) float32 uniforms in (0, 1), a pure function of each row's
    (key, step) and the vocabulary index."""
    v = torch.arange(vocab, device=keys.device, dtype=torch.int64)
    return uniforms_at(keys, steps, v[None, :])


def uniforms_at(keys: torch.Tensor, steps: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The uniforms of :func:`uniforms` at the vocabulary entries ``index`` (R, C) int64 only -> (R, C) float32
    (element for element the same numbers)."""
    row = _mix(keys + (steps + 1) * _signed(_GOLDEN))  # (R,)
    bits = _shr(_mix(row[:, None] ^ (index * _signed(_M1) + _signed(_GOLDEN))), 40)  # 24 random bits
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 24))
