"""``python -m bench.run`` (``make bench``): what compression buys, side by side with the full cache and the
physical limit, in one run. Writes ``raw.jsonl``/``raw.csv`` (one row per case and rep), ``summary.csv``,
``figures.md``/``figures.json`` (the "must show" figures), ``meta.json``, plots, and the engine's tokens/s at 8 rows
against 1 row (``engine_batch.csv``/``.png``, :mod:`bench.engine_batch`) into ``--out``.

    python -m bench.run                                  # CPU: SmolLM2 fp32, contexts 1k-8k, 3 reps (~30 min quiet)
    python -m bench.run --quick                          # a 2-minute sanity run
    python -m bench.run --device cuda                    # GPU: Llama-3.1-8B-shaped random bf16, 8k-128k, ~8 min
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

from bench import engine_batch, markdown, plots, report
from bench.cases import BATCH_METHOD, Group, effective_contexts, plan
from bench.config import BenchConfig, config_from_dict, parse_tokens, preset
from bench.models import REPO, max_positions
from snapstream_core.methods import METHODS

log = logging.getLogger("bench")
QUICK = dict(
    contexts=(256, 512), steps=8, reps=1, prompt_budget=128, recent=32, window=16, batches=(1, 2), batch_context=512
)


def parse_args(argv: list[str] | None = None) -> tuple[BenchConfig, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--quick", action="store_true", help="tiny contexts and budgets, one rep: a sanity run")
    p.add_argument("--model", help="conf/model/<name> or llama31_8b_shape")
    p.add_argument("--dtype")
    p.add_argument("--attn", help="comma list of sdpa,eager,flash_attention_2")
    p.add_argument("--methods", help=f"comma list of {','.join(METHODS)} (the registered methods)")
    p.add_argument("--compiled", help="methods also measured compiled (gen.compile), comma list; '' for none")
    p.add_argument("--compile-backend", help="torch.compile backend of the compiled cases (default inductor)")
    p.add_argument("--no-cpu-kernels", action="store_true",
                   help="CPU: compile with stock inductor, without bench/cpu_decode's kernels and weight packing")
    p.add_argument("--contexts", help="comma list of prompt lengths, e.g. 1k,2k,4k,8k")
    p.add_argument("--batches", help="comma list of batch sizes for snapstream, e.g. 1,4,8")
    p.add_argument("--batch-context", help="prompt length of the batched runs, e.g. 2k")
    for name in ("steps", "reps", "prompt-budget", "recent", "window", "kernel", "sinks", "seed"):
        p.add_argument(f"--{name}", type=int)
    p.add_argument("--time-budget", type=float, help="seconds; later measurements are skipped past it")
    p.add_argument("--wait-quiet", type=float, default=0, help="wait up to this many seconds for load < 0.5")
    p.add_argument("--discard-reps", type=int, help="leave the first N reps out of the figures (warm-up reps)")
    p.add_argument("--from-raw", help="only rewrite the outputs of a finished run from its raw.csv (+ meta.json)")
    p.add_argument("--out", help="output folder (default bench/results, or bench/results/gpu with --device cuda)")
    a = p.parse_args(argv)
    cfg = preset(a.device)
    changes: dict = dict(QUICK) if a.quick else {}
    if a.quick:
        changes["out"] = cfg.out + "/quick"
    simple = dict(model=a.model, dtype=a.dtype, steps=a.steps, reps=a.reps, prompt_budget=a.prompt_budget,
                  recent=a.recent, window=a.window, kernel=a.kernel, sinks=a.sinks, seed=a.seed, out=a.out,
                  time_budget_s=a.time_budget, discard_reps=a.discard_reps,
                  compile_backend=a.compile_backend)  # fmt: skip
    changes.update({k: v for k, v in simple.items() if v is not None})
    if a.no_cpu_kernels:
        changes["cpu_kernels"] = False
    if a.attn:
        changes["attns"] = tuple(x.strip() for x in a.attn.split(",") if x.strip())
    elif a.device == "cuda" and _has_flash_attn():
        changes["attns"] = ("sdpa", "flash_attention_2")
    if a.methods:
        changes["methods"] = tuple(x.strip() for x in a.methods.split(",") if x.strip())
    methods = changes.get("methods", cfg.methods)
    if a.compiled is not None:
        changes["compiled"] = tuple(x.strip() for x in a.compiled.split(",") if x.strip())
    else:
        changes["compiled"] = tuple(m for m in cfg.compiled if m in methods)
    if a.contexts:
        changes["contexts"] = parse_tokens(a.contexts)
    if a.batches:
        changes["batches"] = parse_tokens(a.batches)
    if a.batch_context:
        changes["batch_context"] = parse_tokens(a.batch_context)[0]
    return cfg.with_(**changes), a


def _has_flash_attn() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None


def machine_info(cfg: BenchConfig) -> dict:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    machine = f"{cpu}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"
    if cfg.device == "cuda":
        machine = f"{torch.cuda.get_device_name(0)} ({machine})"
    return {"machine": machine, "torch": torch.__version__, "transformers": transformers.__version__}


def _load() -> float:
    return round(os.getloadavg()[0], 2)


class Runner:
    """Runs the plan's groups in this process, within the time budget."""

    def __init__(self, cfg: BenchConfig, n_tokens: int):
        self.cfg, self.n_tokens = cfg, n_tokens
        self.start = time.perf_counter()
        self.durations: dict[tuple, float] = {}  # (name, context) -> seconds of its first run
        self.skipped: list[str] = []
        self.model = self.prompts = None
        self.compile_s: dict[str, float] = {}  # first call of each compiled decode step kind, in the warm-up

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def should_skip(self, group: Group) -> str | None:
        budget = self.cfg.time_budget_s
        estimate = self.durations.get((group.name, group.context), 0.0)
        if budget is not None and self.elapsed() + estimate > budget:
            return f"time budget ({budget:.0f} s)"
        return None

    def setup(self, groups: list[Group]) -> None:
        from bench.measure import warm_up
        from bench.models import load

        self.model, self.prompts = load(self.cfg, self.n_tokens)
        context = self.cfg.prompt_budget + 2 * self.cfg.window if self.cfg.device == "cuda" else 128
        self.compile_s = warm_up(self.model, self.prompts, [c for g in groups for c in g.cases], self.cfg, context)

    def run(self, group: Group) -> list[dict]:
        from bench.measure import measure_group

        t0 = time.perf_counter()
        rows = measure_group(self.model, self.prompts, list(group.cases), self.cfg)
        self.durations.setdefault((group.name, group.context), time.perf_counter() - t0)
        for row in rows:
            row.update(rep=group.rep, group=group.label)
        return rows


def wait_quiet(limit_s: float) -> None:
    deadline = time.time() + limit_s
    while _load() >= 0.5 and time.time() < deadline:
        time.sleep(15)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        cfg, args = parse_args(argv)
    except ValueError as exc:  # a bad knob (BenchConfig names it): one line, before any model loads
        log.error("error: %s", exc)
        return 2
    if args.from_raw:
        return rereport(Path(args.from_raw), args.discard_reps)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    out = Path(cfg.out) if Path(cfg.out).is_absolute() else REPO / cfg.out
    out.mkdir(parents=True, exist_ok=True)
    if cfg.device == "cpu":
        wait_quiet(args.wait_quiet)
    meta = {**machine_info(cfg), "config": dataclasses.asdict(cfg), "load_start": _load(), "started": time.ctime()}
    if cfg.device == "cpu" and meta["load_start"] >= 0.5:
        log.warning("load average %.2f >= 0.5: the machine is not quiet, timings are not comparable", _load())
    positions = max_positions(cfg)
    groups = plan(cfg, positions)
    n_tokens = max(effective_contexts(cfg.with_(contexts=(*cfg.contexts, cfg.batch_context)), positions))
    runner = Runner(cfg, n_tokens)
    runner.setup(groups)
    rows: list[dict] = []
    raw = (out / "raw.jsonl").open("w")
    for i, group in enumerate(groups, 1):
        reason = runner.should_skip(group)
        if reason:
            runner.skipped.append(f"rep {group.rep} {group.name} group at {group.context}: {reason}")
            continue
        for row in runner.run(group):
            rows.append(row)
            raw.write(json.dumps(row) + "\n")
            what = f"[{i}/{len(groups)} {runner.elapsed():.0f}s] rep {row['rep']} {row['method']} ctx={row['context']}"
            if row["status"] == "ok":
                log.info("%s b=%d: prefill %.3f s, decode %.2f ms/token, KV %.1f MiB", what, row["batch"],
                         row["prefill_s"], row["decode_ms_per_token"], row["kv_bytes_final"] / 2**20)  # fmt: skip
            else:
                log.info("%s b=%d: %s", what, row["batch"], row["status"])
        raw.flush()
    raw.close()
    batch_rows = engine_batch.measure(runner.model, runner.prompts, cfg)  # through the engine: 8 rows vs 1
    engine_batch.write(batch_rows, out)
    meta.update(engine_batch=batch_rows, engine_batch8_over_batch1=engine_batch.ratio(batch_rows))
    meta.update(compile_s=runner.compile_s)
    meta.update(load_end=_load(), finished=time.ctime(), duration_s=round(runner.elapsed()), skipped=runner.skipped)
    report.write_csv(out / "raw.csv", rows)
    (out / "raw.jsonl").unlink()  # the crash-safe log: raw.csv holds its rows (fewer files to carry back)
    write_outputs(rows, cfg, meta, out)
    return 0


def write_outputs(rows: list[dict], cfg: BenchConfig, meta: dict, out: Path) -> None:
    """summary.csv, figures.json/.md, meta.json and plots from the raw rows (reps before ``discard_reps`` left out)."""
    used = [r for r in rows if int(r["rep"]) >= cfg.discard_reps]
    summary = report.summarize(used, cfg)
    figs = report.must_show(used, cfg)
    report.write_csv(out / "summary.csv", summary, report.SUMMARY_FIELDS)
    report.write_json(out / "figures.json", figs)
    report.write_json(out / "meta.json", meta)
    text = markdown.figures_md(figs, summary, cfg, meta)
    if meta.get("engine_batch"):
        by = {r["rows"]: r["tokens_per_s"] for r in meta["engine_batch"]}
        text += (f"\nEngine decode, {BATCH_METHOD} ({engine_batch.ITEMS} items, greedy): {by.get(8)} tokens/s at "
                 f"gen.rows=8, {by.get(1)} at gen.rows=1: x{meta['engine_batch8_over_batch1']} "
                 "(engine_batch.csv, engine_batch.png).\n")
    (out / "figures.md").write_text(text)
    plots.plot(summary, cfg, out)
    print(text)


def rereport(raw_csv: Path, discard_reps: int | None) -> int:
    """Rewrite the outputs of a finished run from its raw.csv and meta.json (e.g. with other reps left out)."""
    import csv

    folder = raw_csv.parent
    meta = json.loads((folder / "meta.json").read_text())
    cfg = config_from_dict(meta["config"])
    if discard_reps is not None:
        cfg = cfg.with_(discard_reps=discard_reps)
        meta["config"] = dataclasses.asdict(cfg)
    rows = [dict(r) for r in csv.DictReader(raw_csv.open())]
    write_outputs(rows, cfg, meta, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
