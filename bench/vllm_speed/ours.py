"""Our side of the vLLM speed bench (our environment): ``python -m bench.vllm_speed.ours FOLDER --rep R``.

Loads the job's model as ``evals.run`` does (``evals.cpus.prepare`` first: the run's threads and wait policy;
``evals.config.models.load_model``; ``attach``), warms up on one short prompt, then for each of the job's methods and
row counts builds :class:`~snapstream_core.engine.Engine` as ``evals/execute/backends/hf.py`` does (greedy,
``rows=r``, ``gen.compile=auto``) with no EOS ids, so every sequence runs exactly ``max_new_tokens`` steps, and
feeds it the prompts as :class:`EngineItem` s. Wall time is ``Engine.run`` from start to its last yield; prefill is
the sum of the engine's own per-item prefill times (measured inside the same run); decode = wall - prefill.
Writes ``ours-<method>-r<r>-rep<R>.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.vllm_speed.common import digest, load, read_job, write_result


def run_engine(model, tokenizer, method, prompts: list[list[int]], max_new: int, rows: int) -> dict:
    """Every prompt once through a fresh engine at ``rows`` rows, greedy, exactly ``max_new`` tokens each: wall,
    prefill (the engine's per-item sum) and decode seconds, what each sequence was fed and generated."""
    from snapstream_core.engine import Engine, EngineItem, item_key
    from snapstream_core.engine.step import resolve_compile
    from snapstream_core.sampling import SamplingConfig

    sampling = SamplingConfig(max_new_tokens=max_new, temperature=0.0)
    engine = Engine(model, method, sampling, eos=[], rows=rows, seed=0, tokenizer=tokenizer,
                    compile=resolve_compile("auto", model.device))  # fmt: skip
    items = [EngineItem(ids, item_key(str(i)), (0,), max_new, tag=i) for i, ids in enumerate(prompts)]
    done: dict[int, tuple] = {}
    start = time.perf_counter()
    for ended in engine.run(items):
        for f in ended:
            done[f.item.tag] = (f.item.ids, f.tokens, f.prefill_s)
    wall = time.perf_counter() - start
    prefill = sum(done[i][2] for i in range(len(prompts)))
    return {"wall_s": wall, "prefill_s": prefill, "decode_s": wall - prefill, "prefill_how": "engine per-item sum",
            "fed": [digest(done[i][0]) for i in range(len(prompts))],
            "tokens": [list(done[i][1]) for i in range(len(prompts))],
            "decode_steps": engine.stats.counts.steps}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.vllm_speed.ours", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--rep", type=int, default=0)
    a = p.parse_args(argv)
    from evals import cpus

    cpus.prepare()
    import torch
    import transformers
    from omegaconf import OmegaConf

    from bench.models import REPO
    from evals.config.models import load_model
    from snapstream_core import attach
    from snapstream_core.api import compression_from_config

    job = read_job(a.folder)
    model_cfg = OmegaConf.load(REPO / "conf" / "model" / f"{job['model']}.yaml")
    model_cfg.device = "cpu"
    model, tokenizer = load_model(model_cfg)
    attach(model)
    prompts, n = job["prompts"], job["max_new_tokens"]
    methods = {name: compression_from_config({"method": name, **knobs}) for name, knobs in job["methods"].items()}
    run_engine(model, tokenizer, methods["none"] if "none" in methods else next(iter(methods.values())),
               [prompts[0][:16]], 2, 1)  # warm-up, untimed
    for name, method in methods.items():
        for rows in job["rows"]:
            load_before = load()
            out = run_engine(model, tokenizer, method, prompts, n, rows)
            kv = method.peak_tokens(max(len(q) for q in prompts), n)
            write_result(a.folder, {
                "engine": "ours", "method": name, "rows": rows, "rep": a.rep, **out, "load": load_before + load(),
                "threads": torch.get_num_threads(), "kv_entries_peak": kv, "knobs": method.knobs(),
                "version": f"torch {torch.__version__}, transformers {transformers.__version__}",
            })
            print(f"ours {name} r{rows}: wall {out['wall_s']:.2f}s prefill {out['prefill_s']:.2f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
