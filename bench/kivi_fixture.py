"""Write ``tests/data/kivi_official.pt``: KIVI's official quantize/dequantize functions, run unmodified on K/V of
the embedded model, for ``tests/test_kivi_quant.py``.

Usage (the official repository checked out outside ours; ``fetch`` gives a git dir: ``git --git-dir=G archive HEAD
| tar -x -C DIR``)::

    python -m bench.kivi_fixture --kivi DIR [--commit SHA] [--out tests/data/kivi_official.pt]

The trace: the post-RoPE keys and the values of layer ``LAYER`` of SmolLM2-135M-Instruct (3 KV heads, head dim 64)
over the first ``TOKENS`` tokens of a fixed text (KIVI quantizes keys after RoPE, ``models/llama_kivi.py``),
stored in float16 (KIVI's dtype) and, for head 0 and the first 32 tokens, in float32 (the fixture stays under
500 KB). For each ``(bits, group_size)`` of ``CASES`` (``FP32_CASES`` in float32) the official pure-torch functions
of ``quant/new_pack.py`` run on them: ``quant_and_pack_kcache`` (keys per channel over groups of tokens),
``quant_and_pack_vcache`` (values per token over groups of channels), their ``unpack_tensor`` (the codes,
unpacked) and ``unpack_and_dequant_kcache`` / ``unpack_and_dequant_vcache``. Saved per case: the unpacked codes
(uint8, laid out as the input), the scales and minima (keys (B, H, T/G, D), values (B, H, T, D/G), reshaped from
the official (B, H, T/G, 1, D) and (B, H, T, D/G, 1)) and the dequantized K/V.

``quant/new_pack.py`` imports ``triton`` at its top for its GPU kernels, which are not called here: where triton is
not installed (a CPU machine) a stand-in module with ``triton.jit`` as the identity is registered first, so the
file loads as it is.

A constant group (max == min) makes the official code divide 0 by 0; the case's ``constant_groups`` counts them
(their official codes are undefined). The captured K/V have none, which the test asserts before comparing every
code.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import subprocess
import sys
import types
from pathlib import Path

import torch

log = logging.getLogger(__name__)

LAYER, TOKENS = 3, 64  # TOKENS: a multiple of every group and of 16 (the official 2-bit keys pack 16 tokens an int32)
CASES = ((2, 32), (4, 32), (2, 16), (4, 16))
FP32_CASES = ((2, 32), (4, 16))
TEXT = (
    "Let n be the number of ordered pairs of positive integers (a, b) with a + b = 1000 and neither a nor b has a "
    "zero digit. We count the pairs digit by digit: the units digits must sum to 10, the tens digits, with the carry, "
    "to 9, and so on. Each case is checked carefully, and the totals are added."
)


def official_module(kivi_dir: Path):
    """``quant/new_pack.py`` of the checkout, loaded unmodified (a stand-in ``triton`` when it is missing, removed
    again once the file is loaded: torch itself looks for triton)."""
    stand_in = importlib.util.find_spec("triton") is None
    if stand_in:
        triton = types.ModuleType("triton")
        language = types.ModuleType("triton.language")
        language.constexpr = object
        triton.jit = lambda fn=None, **_: fn if fn is not None else (lambda f: f)
        triton.cdiv = lambda a, b: -(-a // b)
        triton.language = language
        sys.modules["triton"], sys.modules["triton.language"] = triton, language
    spec = importlib.util.spec_from_file_location("kivi_new_pack", kivi_dir / "quant" / "new_pack.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        if stand_in:
            del sys.modules["triton"], sys.modules["triton.language"]
    return module


def capture() -> tuple[torch.Tensor, torch.Tensor]:
    """(keys, values) (1, H_kv, TOKENS, D) float32: post-RoPE keys and values of layer ``LAYER``."""
    from omegaconf import OmegaConf
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from evals.config.models import load_model

    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "model" / "smollm2_135m.yaml")
    model, tok = load_model(cfg)
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def record(module, query, key, value, attention_mask, **kwargs):
        seen[module.layer_idx] = (key.detach().clone(), value.detach().clone())
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("kivi_fixture_capture", record)
    AttentionMaskInterface.register("kivi_fixture_capture", sdpa_mask)
    model.set_attn_implementation("kivi_fixture_capture")
    ids = tok(TEXT, return_tensors="pt").input_ids[:, :TOKENS]
    if ids.shape[1] < TOKENS:
        raise SystemExit(f"kivi_fixture: the text has {ids.shape[1]} tokens, fewer than {TOKENS}")
    with torch.no_grad():
        model(input_ids=ids)
    return seen[LAYER]


def run_case(ref, keys: torch.Tensor, values: torch.Tensor, bits: int, group: int) -> dict[str, torch.Tensor | int]:
    """The official functions on (1, H, T, D) keys/values (cloned: the official quantization works in place)."""
    B, H, T, D = keys.shape
    k_code, k_scale, k_mn = ref.quant_and_pack_kcache(keys.clone(), group, bits)
    v_code, v_scale, v_mn = ref.quant_and_pack_vcache(values.clone(), group, bits)
    k_deq = ref.unpack_and_dequant_kcache(k_code, k_scale, k_mn, group, bits)
    v_deq = ref.unpack_and_dequant_vcache(v_code, v_scale, v_mn, group, bits)
    constant = int((k_scale == 0).sum()) + int((v_scale == 0).sum())
    return {
        "k_codes": ref.unpack_tensor(k_code, bits, pack_dim=2).to(torch.uint8),
        "k_scale": k_scale.reshape(B, H, T // group, D), "k_mn": k_mn.reshape(B, H, T // group, D),
        "v_codes": ref.unpack_tensor(v_code, bits, pack_dim=3).to(torch.uint8),
        "v_scale": v_scale.reshape(B, H, T, D // group), "v_mn": v_mn.reshape(B, H, T, D // group),
        "k_deq": k_deq, "v_deq": v_deq, "constant_groups": constant,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kivi", type=Path, required=True, help="checkout of jy-yuan/KIVI")
    parser.add_argument("--commit", default=None, help="the checkout's commit, recorded (default: git rev-parse)")
    parser.add_argument("--out", type=Path, default=Path("tests/data/kivi_official.pt"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    keys, values = capture()  # before the official module: its triton stand-in must not meet torch's imports
    ref = official_module(args.kivi)
    commit = args.commit or subprocess.run(["git", "-C", str(args.kivi), "rev-parse", "HEAD"], capture_output=True,
                                           text=True).stdout.strip() or "unknown"
    k16, v16 = keys.half(), values.half()
    k32, v32 = k16[:, :1, :32].float(), v16[:, :1, :32].float()  # head 0, 32 tokens: the same numbers in float32
    fixture = {"params": dict(layer=LAYER, tokens=TOKENS, commit=commit),
               "float16": {"keys": k16, "values": v16, "cases": {}},
               "float32": {"keys": k32, "values": v32, "cases": {}}}
    for bits, group in CASES:
        fixture["float16"]["cases"][(bits, group)] = run_case(ref, k16, v16, bits, group)
    for bits, group in FP32_CASES:
        fixture["float32"]["cases"][(bits, group)] = run_case(ref, k32, v32, bits, group)
    for dtype in ("float16", "float32"):
        for case, out in fixture[dtype]["cases"].items():
            log.info("%s bits=%d group=%d: %d constant groups", dtype, *case, out["constant_groups"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out)
    log.info("wrote %s (%d bytes)", args.out, args.out.stat().st_size)


if __name__ == "__main__":
    main()
