"""What each quantized K/V format costs and what it changes, side by side in one run on one model.

Arms (``--arms``): ``none`` in the model's dtype (the reference); ``none`` stored in FP8 E4M3 with per-tensor,
per-head and unit scales (``fp8_tensor``, ``fp8_head``, ``fp8_one``); KIVI 4- and 2-bit (``kivi4``, ``kivi2``:
``--group-size``, ``--residual``); R-KV at ``--budget`` B in the model's dtype (``rkv``) against R-KV at the budget of
equal bytes in FP8, B times the model's bytes per element (``rkv_fp8``: 4B for fp32, 2B for bf16), both compacting
every ``--interval`` decoded tokens. For each prompt (the first ``--items`` bundled LongBench-v2 contexts, cut to each
of ``--lengths`` tokens) the reference decodes ``--new-tokens`` greedy tokens, then every arm is fed that
continuation on its own engine path (:mod:`bench.kv_forced`), one step of each arm in turn, and gives per
(arm, length, prompt):

- memory: the engine's ``kv_bytes_peak`` of the sample, the bytes its row storage allocates, and the planner's figure
  (``snapstream_core.memory.row_terms(...)["kv"]``: ``KVFormat.row_bytes`` of the method's slots), with the ratio to
  the reference's ``kv_bytes_peak``;
- fidelity: top-1 agreement and mean KL(reference || arm) of the decode steps' next-token distributions, and the
  greedy tokens the arm reproduces before it first differs;
- speed: the median decode-step time and its ratio to the reference's, beside the bytes a step reads (the weights,
  the K/V codes, and the unfused path's dequantized copy: ``KVFormat.read_bytes`` per layer) and the physical floor
  (weights and codes only: what a fused kernel would read).

Writes ``kv_formats.csv`` (one row per arm, length and prompt, then one summary row per arm and length: the mean over
prompts), ``kv_formats.md`` and ``kv_formats.png`` to ``--out``::

    python -m bench.kv_formats                       # SmolLM2-135M-Instruct, -> bench/results/kv_formats/
    python -m bench.kv_formats --model tiny_llama --lengths 48 --new-tokens 8 --arms none,fp8_tensor --out /tmp/kv
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from pathlib import Path

from evals.cpus import prepare

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "kv_formats"
ARMS = ("none", "fp8_tensor", "fp8_head", "fp8_one", "kivi4", "kivi2", "rkv", "rkv_fp8")
REFERENCE = "none"
log = logging.getLogger("bench.kv_formats")


def arm_methods(names: list[str], *, budget: int, interval: int, dtype_bytes: int, group_size: int,
                residual: int) -> dict:
    """``{arm: method}`` for ``names`` (the reference first); one line refusing an unknown arm, or ``kivi`` before
    the method exists in this checkout."""
    from snapstream_core.methods import METHODS, RKV, NoCompression

    def kivi(bits):
        if "kivi" not in METHODS:
            raise ValueError("--arms: kivi4/kivi2 need compression=kivi, which this checkout does not have")
        return METHODS["kivi"](bits=bits, group_size=group_size, residual=residual)

    make = {
        "none": lambda: NoCompression(),
        "fp8_tensor": lambda: NoCompression(kv_dtype="fp8_e4m3", kv_scale="tensor"),
        "fp8_head": lambda: NoCompression(kv_dtype="fp8_e4m3", kv_scale="head"),
        "fp8_one": lambda: NoCompression(kv_dtype="fp8_e4m3", kv_scale="one"),
        "kivi4": lambda: kivi(4),
        "kivi2": lambda: kivi(2),
        "rkv": lambda: RKV(budget=budget, interval=interval),
        "rkv_fp8": lambda: RKV(budget=budget * dtype_bytes, interval=interval, kv_dtype="fp8_e4m3"),
    }
    for name in names:
        if name not in make:
            raise ValueError(f"--arms: unknown arm {name!r}; known: {', '.join(ARMS)}")
    if REFERENCE not in names:
        raise ValueError(f"--arms: must include the reference {REFERENCE!r}")
    return {n: make[n]() for n in [REFERENCE, *[n for n in names if n != REFERENCE]]}


def prompts(tokenizer, items: int, lengths: list[int]) -> list[tuple[int, str, list[int]]]:
    """``(length, item id, ids)``: the first ``length`` tokens of each of the first ``items`` bundled LongBench-v2
    contexts (tasks/data/longbench_v2/sample.jsonl, read by the task's own loader), plain text, no template."""
    from tasks.longbench_v2.data import load

    chosen = load({"source": "bundled", "limit": items})
    out = []
    for length in lengths:
        for item in chosen:
            ids = tokenizer(item.context, add_special_tokens=False).input_ids
            if len(ids) < length:
                raise ValueError(f"--lengths: item {item.item_id} has {len(ids)} tokens, fewer than {length}")
            out.append((length, item.item_id, ids[:length]))
    return out


def step_bytes(method, arch, T: int, steps: int) -> tuple[int, int, int]:
    """(codes, dequantized, held) at the last decode step of ``steps``: the bytes of the K/V a step reads in every
    layer in the method's format, the unfused path's dequantized copy of them (``KVFormat.read_bytes`` per layer,
    written and read once: counted once), and the entries held per layer and KV head."""
    fmt, a = method.kv_format, arch
    held = method.tokens_held(T, steps)
    codes = fmt.row_bytes(held, a.n_layers, a.n_kv_heads, a.head_dim, a.dtype_bytes)
    return codes, a.n_layers * fmt.read_bytes(held, a.n_kv_heads, a.head_dim, a.dtype_bytes), held


def measure(model, arms: dict, cases: list[tuple[int, str, list[int]]], new_tokens: int) -> list[dict]:
    """One row per (length, prompt, arm): see the module docstring. ``arms``: the reference first."""
    from bench.kv_forced import fidelity, forced_decode, greedy
    from snapstream_core.memory import Arch, row_terms

    b = next(model.parameters()).element_size()
    arch = Arch.of(model.config, b)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    rows = []
    for i, (length, item_id, ids) in enumerate(cases, 1):
        start = time.perf_counter()
        tokens = greedy(model, arms[REFERENCE], ids, new_tokens)
        runs = forced_decode(model, arms, ids, tokens)
        ref = runs[REFERENCE]
        ref_ms = statistics.median(ref.step_s) * 1e3
        ref_codes, _, _ = step_bytes(ref.method, arch, len(ids), new_tokens - 1)
        for name, run in runs.items():
            m, T = run.method, len(ids)
            codes, dequant, held = step_bytes(m, arch, T, new_tokens - 1)
            slots = m.slots(T, new_tokens)
            planner = row_terms(arch, slots, new_tokens, fmt=m.kv_format)["kv"]
            ms = statistics.median(run.step_s) * 1e3
            rows.append({
                "row": "prompt", "arm": name, "method": m.method, "kv_format": m.kv_format.label,
                "budget": getattr(m, "budget", ""), "context": length, "prompt": item_id, "prompt_tokens": T,
                "new_tokens": new_tokens, "held_last_step": held, "slots": slots,
                "kv_bytes_peak": run.kv["kv_bytes_peak"], "row_alloc_bytes": run.row_bytes,
                "planner_kv_bytes": planner, "planner_over_measured": planner / run.kv["kv_bytes_peak"],
                "bytes_ratio": run.kv["kv_bytes_peak"] / ref.kv["kv_bytes_peak"],
                **fidelity(ref, run, tokens), "compactions": run.compactions,
                "step_ms_median": ms, "step_ratio": ms / ref_ms,
                "step_read_bytes": weights + codes + dequant, "step_floor_bytes": weights + codes,
                "ref_step_read_bytes": weights + ref_codes,
                "read_ratio": (weights + codes + dequant) / (weights + ref_codes),
                "floor_ratio": (weights + codes) / (weights + ref_codes),
                "kv_floor_ratio": codes / ref_codes,
            })
        log.info("%d/%d: %d tokens, item %s, %d arms in %.0f s", i, len(cases), length, item_id, len(runs),
                 time.perf_counter() - start)
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """One row per (arm, length): the mean over that length's prompts of every number (never across lengths)."""
    out = []
    keys = list(dict.fromkeys((r["arm"], r["context"]) for r in rows))
    for arm, length in keys:
        group = [r for r in rows if r["arm"] == arm and r["context"] == length]
        first = group[0]
        summary = {k: first[k] for k in ("arm", "method", "kv_format", "budget", "context", "new_tokens")}
        for k, v in first.items():
            if k not in summary and isinstance(v, (int, float)) and not isinstance(v, bool):
                summary[k] = statistics.fmean(r[k] for r in group)
        out.append({**summary, "row": "summary", "prompt": f"mean of {len(group)}"})
    return out


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def model_config(model_name: str):
    """``conf/model/<model_name>.yaml`` and its bytes per element (read without torch)."""
    from omegaconf import OmegaConf

    path = ROOT / "conf" / "model" / f"{model_name}.yaml"
    if not path.is_file():
        raise ValueError(f"--model: no conf/model/{model_name}.yaml")
    cfg = OmegaConf.load(path)
    if cfg.dtype not in DTYPE_BYTES:
        raise ValueError(f"--model: dtype {cfg.dtype!r} of {model_name}; expected one of {', '.join(DTYPE_BYTES)}")
    return cfg, DTYPE_BYTES[cfg.dtype]


def load(model_name: str):
    """``(model, tokenizer)`` as the tests' fixtures load ``conf/model/<model_name>.yaml``."""
    from evals.config.models import load_model

    return load_model(model_config(model_name)[0])


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2_135m", help="a conf/model/ name (default: the embedded SmolLM2)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--items", type=int, default=3, help="bundled LongBench-v2 contexts")
    ap.add_argument("--lengths", default="512,1536", help="prompt tokens, comma-separated")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--budget", type=int, default=96, help="rkv's budget B in the model's dtype")
    ap.add_argument("--interval", type=int, default=32, help="rkv's compaction interval")
    ap.add_argument("--group-size", type=int, default=32)
    ap.add_argument("--residual", type=int, default=128)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--replot", action="store_true", help="rewrite the .md and .png of --out from its CSV only")
    args = ap.parse_args(argv)
    if args.replot:
        from bench.kv_formats_out import rewrite

        rewrite(args.out)
        return []
    names = [a for a in args.arms.split(",") if a]
    lengths = [int(x) for x in args.lengths.split(",") if x]
    if args.new_tokens < 2:
        raise ValueError(f"--new-tokens: must be at least 2 (one decode step), got {args.new_tokens}")
    if args.items < 1 or not lengths or min(lengths) < 1:
        raise ValueError("--items/--lengths: at least one prompt of at least one token")
    _, b = model_config(args.model)
    arms = arm_methods(names, budget=args.budget, interval=args.interval, dtype_bytes=b,
                       group_size=args.group_size, residual=args.residual)  # refused before weights load
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    prepare()  # thread counts and passive waiting (evals/cpus.py), before torch loads
    model, tok = load(args.model)
    cases = prompts(tok, args.items, lengths)
    load_start = os.getloadavg()[0]
    start = time.perf_counter()
    rows = measure(model, arms, cases, args.new_tokens)
    from bench.kv_formats_out import write

    summary = summarize(rows)
    import torch

    settings = {k: v for k, v in vars(args).items() if k not in ("out", "replot")}
    write(args.out, rows, summary, {"model": args.model, "dtype": str(next(model.parameters()).dtype),
                                    "threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - start),
                                    "load_avg": [round(load_start, 2), round(os.getloadavg()[0], 2)], **settings})
    return rows + summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
