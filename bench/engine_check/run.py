"""``python -m bench.engine_check.run --vllm-python .venv-vllm/bin/python`` (``make engine-check``).

The same items through our engine (``compression=none``, the hf backend) and through vLLM (``backend=vllm``), greedy,
in the model's dtype (``model.dtype``; float32 for the embedded SmolLM2), each prompt encoded once by the harness and
sent to both as token ids. Per item the generated token ids are compared; at the first differing step both engines'
top-2 log-probabilities are put side by side (ours from a teacher-forced forward pass over prompt + common prefix,
vLLM's from ``logprobs=2``) and the difference is called a tie when both gaps are below ``--tol``
(:mod:`bench.engine_check.compare`); otherwise UNEXPLAINED, and the command exits 1.

Tasks: the bundled needle, LongBench-v2 (its first call; CoT off) and AIME24 items. Writes ``engine_check.csv`` (one
row per item) and ``engine_check_summary.csv`` (one per task) into ``--out``. The same command is the first check
of our engine on a GPU (vLLM's CUDA build, the model's dtype; nothing here assumes a CPU).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.engine_check.compare import TOLERANCE, closest_call, first_difference, summary, verdict
from bench.models import REPO
from bench.report import write_csv

log = logging.getLogger("engine_check")

FIELDS = ["task", "item_id", "prompt_tokens", "ours_tokens", "vllm_tokens", "verdict", "step", "ours_token",
          "vllm_token", "ours_top2", "vllm_top2", "ours_gap", "vllm_gap", "closest_step", "closest_gap", "note"]


def compose(overrides: list[str]):
    """The harness's config for ``overrides`` (as ``python -m evals.run`` composes it)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from evals.config.conf_store import register_methods

    register_methods()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


def task_overrides(args: argparse.Namespace) -> dict[str, list[str]]:
    """The tasks and their item counts (a task with 0 items is left out)."""
    tasks = {
        "needle": (args.needle, ["task=needle", f"task.context_tokens={args.context_tokens}",
                                 f"task.n_items={args.needle}"]),
        "longbench_v2": (args.longbench, ["task=longbench_v2", f"task.limit={args.longbench}", "task.cot=false",
                                          f"task.max_len={args.longbench_max_len}"]),
        "aime24": (args.aime, ["task=aime24", f"task.limit={args.aime}"]),
    }
    return {name: ov for name, (n, ov) in tasks.items() if n > 0}


def requests_of(spec, tokenizer, max_new: int) -> list:
    """One greedy request per item (the task's per-request sampling dropped: both engines decode greedily)."""
    from evals.execute.backends.base import Request
    from tasks.base import Prompt

    out = []
    for item in spec.task_module.load(spec.task):
        prompt = spec.task_module.prompt(item, spec.model, cfg=spec.task, tokenizer=tokenizer)
        prompt = prompt if isinstance(prompt, Prompt) else Prompt(prompt)
        out.append(Request(item, replace(prompt, gen=None), (0,), max_new_tokens=max_new))
    return out


def ours_top2(model, ids: list[int]) -> list[tuple[int, float]]:
    """Our model's top-2 (token, log-probability) after ``ids``: one forward pass, no cache (teacher forcing)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids], device=model.device)).logits[0, -1].float()
    lp = torch.log_softmax(logits, dim=-1)
    top = torch.topk(lp, 2)
    return [(int(t), float(v)) for t, v in zip(top.indices, top.values)]


def compare_task(task: str, hf, vllm, reqs: list, tol: float) -> list[dict]:
    """Both engines on ``reqs``; one CSV row per item."""
    start = time.perf_counter()
    ours = hf.generate(reqs)
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    theirs = vllm.generate(reqs)
    log.info("%s: %d items, ours %.1f s, vLLM %.1f s", task, len(reqs), t_ours, time.perf_counter() - start)
    rows = []
    for req, (a,), (b,) in zip(reqs, ours, theirs):
        ids = hf.encode(req.prompt)
        k = first_difference(a.token_ids, b.token_ids)
        o_top = ours_top2(hf.model, ids + a.token_ids[:k]) if k is not None else None
        v_top = b.top_logprobs[k] if k is not None and b.top_logprobs and k < len(b.top_logprobs) else None
        v = verdict(a.token_ids, b.token_ids, o_top, v_top, tol)
        gap_o, gap_v = v.gaps
        near_step, near_gap = closest_call(b.top_logprobs, k)  # over the steps both engines agree on
        rows.append({"task": task, "item_id": str(req.item.item_id), "prompt_tokens": len(ids),
                     "ours_tokens": len(a.token_ids), "vllm_tokens": len(b.token_ids), "verdict": v.verdict,
                     "step": v.step, "ours_token": v.ours_token, "vllm_token": v.vllm_token,
                     "ours_top2": fmt_top(v.ours_top2), "vllm_top2": fmt_top(v.vllm_top2),
                     "ours_gap": gap_o, "vllm_gap": gap_v, "closest_step": near_step, "closest_gap": near_gap,
                     "note": v.note})
    return rows


def fmt_top(top) -> str:
    return " ".join(f"{t}:{lp:.5f}" for t, lp in top)


def table(rows: list[dict]) -> str:
    cols = ["task", "items", "identical", "tie_explained", "unexplained", "closest_gap"]
    lines = ["  ".join(f"{c:>13}" for c in cols)]
    lines += ["  ".join(f"{r[c]:>13.2e}" if isinstance(r[c], float) else f"{r[c]!s:>13}" for c in cols) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--model", default="smollm2_135m", help="a conf/model name (its dtype is the engines')")
    ap.add_argument("--needle", type=int, default=8, help="needle items (0: skip)")
    ap.add_argument("--longbench", type=int, default=3, help="LongBench-v2 items (0: skip)")
    ap.add_argument("--aime", type=int, default=3, help="AIME24 items (0: skip)")
    ap.add_argument("--context-tokens", type=int, default=1024, help="needle haystack tokens")
    ap.add_argument("--longbench-max-len", type=int, default=1500, help="LongBench-v2 prompt cut, tokens")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--tol", type=float, default=None, help="tie tolerance in nats (default: by dtype, "
                    + ", ".join(f"{k} {v}" for k, v in TOLERANCE.items()) + ")")
    ap.add_argument("--cpu-kv-cache-gib", type=float, default=2.0, help="vLLM's CPU KV pool (ignored on a GPU)")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.5,
                    help="vLLM's share of the GPU (our engine holds its own copy of the model on the same GPU)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")

    from evals.config.spec import check
    from evals.execute.backends import make_backend
    from evals.execute.backends.vllm import VLLMBackend
    from evals.plan.job import rows_without_planner

    common = [f"model={args.model}", "compression=none", "gen.temperature=0", "gen.n_samples=1",
              f"gen.max_new_tokens={args.max_new_tokens}"]
    vllm_keys = ["backend=vllm", f"backend.python={args.vllm_python}", "backend.enforce_eager=true",
                 f"backend.max_model_len={args.max_model_len}", f"backend.cpu_kv_cache_gib={args.cpu_kv_cache_gib}",
                 f"backend.gpu_memory_utilization={args.gpu_memory_utilization}"]
    tasks = task_overrides(args)
    try:  # every config checked before anything loads
        specs = {t: check(compose([*common, *ov])) for t, ov in tasks.items()}
        vspec = check(compose([*common, *next(iter(tasks.values())), *vllm_keys]))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    first = next(iter(specs.values()))
    dtype = str(first.model.dtype)
    tol = args.tol if args.tol is not None else TOLERANCE.get(dtype, 0.1)
    hf = make_backend(first, rows=rows_without_planner(None), requested="auto")
    vllm = VLLMBackend(vspec.model, vspec.backend.settings, vspec.sampling, logprobs=2)
    try:
        rows = []
        for task, spec in specs.items():
            rows += compare_task(task, hf, vllm, requests_of(spec, hf.tokenizer, args.max_new_tokens), tol)
    finally:
        vllm.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "engine_check.csv", rows, FIELDS)
    table_rows = summary(rows)
    device = vllm.device.get("platform")
    for r in table_rows:
        r.update(model=args.model, dtype=dtype, device=device, max_new_tokens=args.max_new_tokens, tol=tol,
                 vllm=vllm.versions.get("vllm"))
    write_csv(out / "engine_check_summary.csv", table_rows, [*table_rows[0]])
    print(f"\nour engine (compression=none) vs {vllm.versions.get('vllm')} on {device}, {args.model} {dtype}, "
          f"greedy, {args.max_new_tokens} new tokens; tie: both engines' top-2 gap < {tol:g} nats; closest_gap: the "
          "smallest top-2 gap (vLLM's, nats) on a step where both engines agree")
    print(table(table_rows))
    for r in rows:
        if r["verdict"] != "identical":
            print(f"  {r['task']} {r['item_id']}: {r['verdict']} at step {r['step']}: ours {r['ours_top2']} | "
                  f"vLLM {r['vllm_top2']} ({r['note']})")
    print(f"wrote {out / 'engine_check.csv'} and {out / 'engine_check_summary.csv'}")
    return 1 if any(r["unexplained"] for r in table_rows) else 0


if __name__ == "__main__":
    sys.exit(main())
