"""KIVI's quantization (``snapstream_core.quant.kivi``) equals the official functions of jy-yuan/KIVI
``quant/new_pack.py``, run unmodified by ``bench/kivi_fixture.py`` on K/V of the embedded SmolLM2 (float16 and
float32; 2 and 4 bits; groups of 32 and 16) and saved in ``tests/data/kivi_official.pt``.

Codes, scales and minima are equal exactly (the same operations in the same dtype). Dequantized values: equal
exactly in float32; in float16 the official code multiplies and adds in float16 (two roundings) where ours computes
``code * scale + mn`` in float32 and rounds once, so they may differ by the roundings: at most half a float16 ulp of
``code * scale`` (the official product's rounding) plus half an ulp of each result (each side's last rounding),
the bound asserted below."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from snapstream_core.quant.kivi import (
    dequantize_keys,
    dequantize_values,
    pack,
    quantize_keys,
    quantize_values,
    unpack,
)

FIXTURE = Path(__file__).parent / "data" / "kivi_official.pt"


def _cases():
    data = torch.load(FIXTURE, weights_only=False)
    for dtype in ("float16", "float32"):
        block = data[dtype]
        for (bits, group), out in block["cases"].items():
            yield pytest.param(block["keys"], block["values"], bits, group, out, id=f"{dtype}-b{bits}-g{group}")


CASES = list(_cases())


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """The float16 ulp at |x| (the spacing of float16 numbers there), as float32."""
    x = x.abs().float().clamp(min=2.0**-14)
    return 2.0 ** (torch.floor(torch.log2(x)) - 10)


@pytest.mark.parametrize("keys, values, bits, group, out", CASES)
def test_codes_scales_and_minima_equal_the_official(keys, values, bits, group, out):
    assert out["constant_groups"] == 0  # the captured K/V have none: every official code is defined
    codes, scale, mn = quantize_keys(keys, group, bits)
    assert scale.dtype == keys.dtype
    assert torch.equal(codes, out["k_codes"])
    assert torch.equal(scale, out["k_scale"]) and torch.equal(mn, out["k_mn"])
    codes, scale, mn = quantize_values(values, group, bits)
    assert torch.equal(codes, out["v_codes"])
    assert torch.equal(scale, out["v_scale"]) and torch.equal(mn, out["v_mn"])


@pytest.mark.parametrize("keys, values, bits, group, out", CASES)
def test_dequantized_within_one_float16_rounding_of_the_official(keys, values, bits, group, out):
    for ours, ref, codes, scale in (
        (dequantize_keys(out["k_codes"], out["k_scale"], out["k_mn"], group), out["k_deq"], out["k_codes"],
         out["k_scale"].repeat_interleave(group, dim=2)),
        (dequantize_values(out["v_codes"], out["v_scale"], out["v_mn"], group), out["v_deq"], out["v_codes"],
         out["v_scale"].repeat_interleave(group, dim=-1)),
    ):
        assert ours.dtype == ref.dtype == keys.dtype
        if keys.dtype == torch.float32:
            assert torch.equal(ours, ref)
            continue
        diff = (ours.float() - ref.float()).abs()
        bound = 0.5 * _ulp(codes.float() * scale.float()) + _ulp(torch.maximum(ours.abs(), ref.abs()))
        assert bool((diff <= bound).all()), float((diff - bound).max())


@pytest.mark.parametrize("bits", [2, 4])
def test_pack_puts_a_tokens_codes_in_consecutive_bytes_and_unpacks_them(bits):
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 1 << bits, (2, 3, 5, 16), generator=g, dtype=torch.uint8)
    packed = pack(codes, bits)
    assert packed.shape == (2, 3, 5, 16 * bits // 8) and packed.dtype == torch.uint8
    assert torch.equal(unpack(packed, bits), codes)
    per = 8 // bits  # byte 0 of a token holds its first codes, the first in the low bits
    assert int(packed[0, 0, 0, 0]) == sum(int(codes[0, 0, 0, i]) << (bits * i) for i in range(per))
    assert torch.equal(pack(codes[:, :, 2:3], bits), packed[:, :, 2:3])  # one token packs on its own


def test_a_constant_group_dequantizes_to_its_value_with_code_zero():
    """The official code divides 0 by 0 there (an undefined code); its value is the minimum whatever the code."""
    k = torch.randn(1, 1, 8, 4)
    k[..., 1] = 0.25  # channel 1 constant over the group of 8 tokens
    codes, scale, mn = quantize_keys(k, 8, 2)
    assert float(scale[0, 0, 0, 1]) == 0.0 and bool((codes[..., 1] == 0).all())
    assert bool((dequantize_keys(codes, scale, mn, 8)[..., 1] == 0.25).all())
    assert not bool(torch.isnan(dequantize_keys(codes, scale, mn, 8)).any())
