"""Tokens per second of the decode engine at 8 rows against 1 row: what batching the busy rows into one forward buys.

The same 8 items (the batch-context prompt, rotated by its item number so that no two are equal), one greedy sample
each, ``steps`` new tokens, no EOS, under the batch method (``snapstream`` at the run's budgets), decoded by
:class:`snapstream_core.engine.Engine` with ``gen.rows`` 1 and then 8. tokens/s counts the generated tokens over the
run's wall time less its prefills (each item prefilled once in both). Writes ``engine_batch.csv`` and, with
matplotlib, ``engine_batch.png``.
"""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path

import torch

from bench.cases import BATCH_METHOD, build_method
from bench.config import BenchConfig
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.sampling import SamplingConfig

log = logging.getLogger(__name__)
ITEMS = 8
ROWS = (1, 8)
FIELDS = ["rows", "items", "context", "new_tokens", "tokens", "decode_s", "prefills", "tokens_per_s"]


def items(prompts, context: int, new_tokens: int) -> list[EngineItem]:
    ids = prompts(context)[0].tolist()
    return [EngineItem(ids[i:] + ids[:i], 1000 + i, (0,), new_tokens, tag=i) for i in range(ITEMS)]


def measure(model, prompts, cfg: BenchConfig, context: int | None = None, new_tokens: int | None = None) -> list[dict]:
    """One row per row count: tokens generated, decode seconds, tokens/s."""
    context = context or cfg.batch_context
    new_tokens = new_tokens or cfg.steps
    method = build_method(BATCH_METHOD, cfg)
    work = items(prompts, context, new_tokens)
    out = []
    for rows in ROWS:
        engine = Engine(model, method, SamplingConfig(max_new_tokens=new_tokens), eos=[], rows=rows)
        tokens, prefill_s = 0, {}
        start = time.perf_counter()
        for ended in engine.run(work):
            for f in ended:
                tokens += len(f.tokens)
                prefill_s[f.item.tag] = f.prefill_s
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        decode_s = time.perf_counter() - start - sum(prefill_s.values())
        out.append({"rows": rows, "items": ITEMS, "context": context, "new_tokens": new_tokens, "tokens": tokens,
                    "decode_s": round(decode_s, 4), "prefills": engine.stats.prefills,
                    "tokens_per_s": round(tokens / decode_s, 2)})
        log.info("engine at %d rows: %d tokens in %.2f s of decode, %.1f tokens/s", rows, tokens, decode_s,
                 tokens / decode_s)
    return out


def ratio(rows: list[dict]) -> float:
    """tokens/s at 8 rows over tokens/s at 1 row."""
    by = {r["rows"]: r["tokens_per_s"] for r in rows}
    return round(by[ROWS[-1]] / by[ROWS[0]], 2)


def write(rows: list[dict], out: Path) -> None:
    with (out / "engine_batch.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.info("matplotlib missing: engine_batch.png skipped (engine_batch.csv holds the numbers)")
        return
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar([str(r["rows"]) for r in rows], [r["tokens_per_s"] for r in rows], color="tab:green")
    ax.set_xlabel("gen.rows")
    ax.set_ylabel("tokens/s (decode)")
    ax.set_title(f"engine, {BATCH_METHOD}, {rows[0]['context']}-token prompts: x{ratio(rows)}")
    fig.tight_layout()
    fig.savefig(out / "engine_batch.png", dpi=120)
    plt.close(fig)
