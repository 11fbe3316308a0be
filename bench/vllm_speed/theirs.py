"""vLLM's side of the speed bench, run with vLLM's interpreter: ``python bench/vllm_speed/theirs.py FOLDER --rep R``.

Imports vLLM and the standard library only (never our packages). Loads the job's model once (``dtype=float32``,
``enforce_eager``, prefix caching off, ``max_num_seqs`` = the largest row count; the load is not timed), warms up on
one short prompt, then for each row count ``r`` feeds the job's prompts as token ids in waves of ``r``
(``llm.generate`` on ``r`` prompts at a time: at most ``r`` sequences in flight, as our engine's ``r`` rows), greedy,
``ignore_eos`` and ``max_tokens = max_new_tokens`` (every sequence exactly that long). Timed twice per row count:
``max_tokens=1`` (the prefill: the prompts and one token) and the full length; decode = full - prefill. Writes
``vllm-none-r<r>-rep<R>.json`` per row count.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from common import digest, load, read_job, write_result


def _waves(prompts: list, rows: int) -> list[list]:
    return [prompts[i : i + rows] for i in range(0, len(prompts), rows)]


def _timed(llm, prompts: list, rows: int, params) -> tuple[float, list]:
    from vllm.inputs import TokensPrompt

    outputs = []
    start = time.perf_counter()
    for wave in _waves(prompts, rows):
        outputs += llm.generate([TokensPrompt(prompt_token_ids=p) for p in wave], params, use_tqdm=False)
    return time.perf_counter() - start, outputs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="theirs.py", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--rep", type=int, default=0)
    a = p.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    import vllm
    from vllm import LLM, SamplingParams

    job = read_job(a.folder)
    prompts, n = job["prompts"], job["max_new_tokens"]
    longest = max(len(q) for q in prompts) + n
    llm = LLM(model=job["model_dir"], dtype="float32", max_model_len=max(longest, 64), enforce_eager=True,
              max_num_seqs=max(job["rows"]), enable_prefix_caching=False, seed=0)  # fmt: skip
    greedy = dict(temperature=0.0, ignore_eos=True)
    llm.generate([{"prompt_token_ids": prompts[0][:16]}], SamplingParams(max_tokens=2, **greedy), use_tqdm=False)
    for rows in job["rows"]:
        load_before = load()
        prefill_s, _ = _timed(llm, prompts, rows, SamplingParams(max_tokens=1, **greedy))
        wall_s, outputs = _timed(llm, prompts, rows, SamplingParams(max_tokens=n, **greedy))
        tokens = [list(o.outputs[0].token_ids) for o in outputs]
        write_result(a.folder, {
            "engine": "vllm", "method": "none", "rows": rows, "rep": a.rep, "wall_s": wall_s,
            "prefill_s": prefill_s, "decode_s": wall_s - prefill_s, "prefill_how": "separate max_tokens=1 pass",
            "fed": [digest(o.prompt_token_ids) for o in outputs], "tokens": tokens,
            # vLLM sets its worker's threads itself (auto binding: one per CPU less its reserved ones, 1 of 2 on a
            # 2-core machine; its log line "OpenMP thread binding info"); this process's count says nothing of them
            "load": load_before + load(), "threads": os.environ.get("BENCH_VLLM_THREADS"),
            "omp_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
            "kv_space_gib": os.environ["VLLM_CPU_KVCACHE_SPACE"], "version": f"vllm {vllm.__version__}",
        })
        print(f"vllm r{rows}: wall {wall_s:.2f}s prefill {prefill_s:.2f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
