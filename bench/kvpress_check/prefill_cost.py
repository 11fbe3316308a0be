"""Prefill CPU time of each prompt scorer ÷ SnapKV's, side by side on the kvpress check's needle prompt (our side
only): ``python -m bench.kvpress_check.prefill_cost [--tokens N] [--rounds R]`` after ``make kvpress-check`` wrote
its job (``.cache/kvpress-check/job.json``).

Each round prefills the prompt once per method through the engine's ``prefill_prompt`` (the methods in rotated
order), one torch thread, timed with ``time.process_time``: CPU seconds of this process, which other processes on a
loaded machine do not inflate as they do wall time. Prints one line per method: its CPU seconds and the median of
its ratio to SnapKV's (window 64, kernel 5, avg pooling; each keeps a third of the prompt).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import snapstream_core as ss
from bench.kvpress_check.common import load_model, read_job
from bench.models import REPO
from snapstream_core.prefill import prefill_prompt


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.kvpress_check.prefill_cost")
    p.add_argument("--work", type=Path, default=REPO / ".cache" / "kvpress-check")
    p.add_argument("--tokens", type=int, default=None, help="the first N prompt tokens (default: all)")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    job = read_job(a.work)
    ids = torch.tensor([job["ids"][: a.tokens]])
    n = ids.shape[1] // 3
    methods = {"snapkv": ss.SnapKV(prompt_budget=n, window=64, kernel=5, pooling="avg"),
               "knorm": ss.Knorm(prompt_budget=n), "tova": ss.TOVA(prompt_budget=n),
               "keydiff": ss.KeyDiff(prompt_budget=n),
               "expected_attention": ss.ExpectedAttention(prompt_budget=n)}  # fmt: skip
    model = load_model(job["model_dir"])
    ss.attach(model)
    prefill_prompt(model, ids[:, :128], ss.NoCompression())  # warm-up
    cpu: dict[str, list[float]] = {name: [] for name in methods}
    names = list(methods)
    for r in range(a.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.process_time()
            prefill_prompt(model, ids, methods[name])
            cpu[name].append(time.process_time() - t0)
    for name, seconds in cpu.items():
        ratio = statistics.median(s / b for s, b in zip(seconds, cpu["snapkv"], strict=True))
        print(f"{name}: {ids.shape[1]} tokens, CPU s {[round(s, 3) for s in seconds]}, ÷ snapkv {ratio:.3f}")


if __name__ == "__main__":
    main()
