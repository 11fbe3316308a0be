"""An independent reference of KIVI's schedule for the tests: a ``DynamicCache`` that stores every token in full
precision and, at each decode step, hands attention keys/values quantized by the official formula at the slots the
official code (jy-yuan/KIVI ``models/llama_kivi.py``) reads quantized.

Written from the official code, not from ours: the quantization of a group depends only on its own full-precision
tokens, so the reference quantizes, at every step, the groups that the official code holds quantized by then: with
``m`` tokens stored before a step, keys ``[0, R * floor(m / R))`` (per channel, groups of ``G`` tokens) and values
``[0, max(m - R, 0))`` (per token, groups of ``G`` channels); the prefill attention is exact. The official formula
(``quant/new_pack.py``), in the data's dtype: ``scale = (max - min) / (2**bits - 1)``, ``code =
round(clamp((x - min) / scale, 0, 2**bits - 1))``, value ``code * scale + min``.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def official_fake_quant(x: torch.Tensor, dim: int, bits: int) -> torch.Tensor:
    """``x`` quantized and dequantized over groups along ``dim`` by the official formula (a constant group, whose
    official code is 0/0, gives its minimum)."""
    top = 2**bits - 1
    mn = torch.min(x, dim=dim, keepdim=True)[0]
    mx = torch.max(x, dim=dim, keepdim=True)[0]
    scale = (mx - mn) / top
    code = ((x - mn) / scale).clamp(0, top).round()
    code = torch.nan_to_num(code, nan=0.0)
    return code * scale + mn


def fake_quant_keys(k: torch.Tensor, group: int, bits: int) -> torch.Tensor:
    """(B, H, n, D), n a multiple of ``group``: per channel over groups of ``group`` tokens."""
    B, H, n, D = k.shape
    return official_fake_quant(k.reshape(B, H, n // group, group, D), 3, bits).reshape(B, H, n, D)


def fake_quant_values(v: torch.Tensor, group: int, bits: int) -> torch.Tensor:
    """(B, H, n, D): per token over groups of ``group`` channels."""
    B, H, n, D = v.shape
    return official_fake_quant(v.reshape(B, H, n, D // group, group), 4, bits).reshape(B, H, n, D)


class OfficialScheduleCache(DynamicCache):
    """Full-precision storage; a decode step's keys/values are quantized where KIVI's would be."""

    def __init__(self, bits: int, group_size: int, residual: int, **kwargs):
        super().__init__(**kwargs)
        self.bits, self.group, self.residual = bits, group_size, residual

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        q = key_states.shape[-2]
        n = keys.shape[-2]
        if q == n:  # the prefill: exact attention
            return keys, values
        assert q == 1
        m, R = n - 1, self.residual
        kq, vq = R * (m // R), max(m - R, 0)
        keys = torch.cat([fake_quant_keys(keys[:, :, :kq], self.group, self.bits), keys[:, :, kq:]], dim=2)
        values = torch.cat([fake_quant_values(values[:, :, :vq], self.group, self.bits), values[:, :, vq:]], dim=2)
        return keys, values
