"""``python -m bench.kvpress_check.run --kvpress-python .venv-kvpress/bin/python`` (``make kvpress-check``).

Builds one long prompt (a needle item of the harness, SmolLM2's chat template), writes the job, runs our side and
kvpress's side alternately (``--reps`` times, each in a fresh process), and writes into ``--out``:
``kvpress_agreement.csv`` (one row per method with a kvpress twin: SnapKV, Knorm, TOVA, KeyDiff, ExpectedAttention,
AdaKV (on SnapKV), PyramidKV; its agreement and, beside it, its prefill times), ``kvpress_agreement_heads.csv``
(per method, layer and KV head), ``kvpress_timing.csv`` (every timed pair) and ``kvpress.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.kvpress_check.common import JOB
from bench.kvpress_check.compare import NEAR_TIE, head_rows, summary, timing
from bench.kvpress_check.ours import SCORED
from bench.models import REPO
from bench.report import write_csv


def build_prompt(context_tokens: int) -> tuple[str, list[int]]:
    """(model folder, token ids) of needle item 0 at ``context_tokens`` of haystack, with SmolLM2's chat template."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from evals.config.models import embedded_dir
    from tasks import needle

    model_dir = str(embedded_dir())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    cfg = OmegaConf.load(REPO / "conf" / "task" / "needle.yaml")
    cfg.context_tokens, cfg.limit = context_tokens, 1
    item = needle.load(cfg)[0]
    prompt = needle.prompt(item, None, tokenizer=tokenizer)
    messages = [*prompt.messages, {"role": "assistant", "content": prompt.prefill}]
    ids = tokenizer.apply_chat_template(messages, continue_final_message=True, tokenize=True, return_dict=False)
    return model_dir, list(ids)


def _run(cmd: list[str]) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def agreement_rows(work: Path, times: list[dict]) -> tuple[list[dict], list[dict]]:
    """(one summary row per scored method with its prefill times beside, every (method, layer, KV head) row)."""
    by_ours = {t["ours"]: t for t in times}
    heads, table = [], []
    for method in SCORED:
        rows = head_rows(work, method)
        heads += rows
        if not times:  # --reps 0: the positions only
            table.append(summary(rows))
            continue
        t = by_ours[method]
        table.append({**summary(rows), "ours_prefill_s": t["ours_prefill_s"],
                      "kvpress_prefill_s": t["kvpress_prefill_s"],
                      "prefill_ours_over_kvpress": t["prefill_s_ours_over_kvpress"],
                      "prefill_over_our_snapkv": t["prefill_s_over_our_snapkv"]})  # fmt: skip
    return table, heads


def markdown(table: list[dict], times: list[dict], job: dict, load: tuple[float, float]) -> str:
    lines = [
        "# kvpress cross-check (SmolLM2-135M-Instruct, fp32, CPU)",
        "",
        f"Prompt: needle item, {len(job['ids'])} tokens; {job['n_keep']} kept per layer and KV head by both sides "
        f"(kvpress: the compression ratio that keeps that many). SnapKV: window {job['window']}, kernel "
        f"{job['kernel']} (avg pooling), GQA mean (ours: `SnapKV(pooling='avg', gqa_agg='mean', sinks=0)`). Knorm, "
        "TOVA, KeyDiff, ExpectedAttention: kvpress's defaults (no sinks; ExpectedAttention 4 sinks, 512 future "
        "positions), ours `Knorm/TOVA/KeyDiff/ExpectedAttention(prompt_budget=...)` at their defaults. AdaKV: "
        "`AdaKVPress(SnapKVPress(...))` at its default `alpha_safeguard` 0.2, ours `AdaKV(scorer='snapkv', ...)` with "
        f"SnapKV's knobs above (a count per KV head, {job['n_keep']} on average). PyramidKV: `PyramidKVPress` with "
        f"SnapKV's window and kernel and `beta={job['pyramid_beta']}`, ours `PyramidKV(ratio=..., "
        f"beta={job['pyramid_beta']})` at kvpress's compression ratio (a count per layer, "
        f"{job['n_keep']} on average).",
        "",
        f"Agreement of the kept positions, per (layer, KV head); a disagreement is a near-tie when its kvpress score "
        f"is within {NEAR_TIE:g} (relative) of kvpress's cutoff"
        + (f". Prefill seconds are medians of {times[0]['reps']} interleaved reps (load average {load[0]} → "
           f"{load[1]}); ÷ our SnapKV is the median ratio to our SnapKV's prefill in the same process:" if times
           else " (`--reps 0`: nothing timed):"),
        "",
        "| method | kept per head (min–max) | heads identical | + differing only in exact ties | positions in common "
        "| worst head | largest rel. score diff | largest disputed gap | near-ties"
        + (" | prefill s ours / kvpress | ÷ kvpress | ÷ our SnapKV |" if times else " |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---|" + ("---:|---:|---:|" if times else ""),
    ]
    for r in table:
        line = (
            f"| {r['method']} | {r['kept_min']}–{r['kept_max']} | {r['heads_identical']}/{r['heads']} "
            f"| {r['heads_identical_but_exact_ties']} "
            f"| {r['agree_pct']:.3f}% "
            f"| {r['worst_head_agree_pct']:.2f}% | {r['score_max_rel_diff']:.2e} | {r['disputed_gap_rel_max']:.2e} "
            f"| {r['disagreements_near_ties']} |"
        )
        if times:
            line += (f" {r['ours_prefill_s']:.3f} / {r['kvpress_prefill_s']:.3f} "
                     f"| {r['prefill_ours_over_kvpress']:.3f} | {r['prefill_over_our_snapkv']:.3f} |")
        lines.append(line)
    if not times:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        f"Timing ({job['steps']} greedy decode steps, the same loop on both sides):",
        "",
        "| ours | kvpress | prefill s ours / kvpress | ratio | decode ms/token ours / kvpress | ratio "
        "| KV at end ours / kvpress | same greedy tokens |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for t in times:
        lines.append(
            f"| {t['ours']} | {t['kvpress']} | {t['ours_prefill_s']:.3f} / {t['kvpress_prefill_s']:.3f} "
            f"| {t['prefill_s_ours_over_kvpress']:.3f} | {t['ours_decode_ms_per_token']:.2f} / "
            f"{t['kvpress_decode_ms_per_token']:.2f} | {t['decode_ms_per_token_ours_over_kvpress']:.3f} "
            f"| {t['kv_final_ours']} / {t['kv_final_kvpress']} | {t['same_greedy_tokens']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kvpress_check.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--kvpress-python", default=str(REPO / ".venv-kvpress" / "bin" / "python"))
    p.add_argument("--context-tokens", type=int, default=3000, help="haystack tokens of the needle prompt")
    p.add_argument("--n-keep", type=int, default=1024, help="entries kept per layer and KV head")
    p.add_argument("--window", type=int, default=64, help="kvpress's default window_size")
    p.add_argument("--kernel", type=int, default=5, help="kvpress's default kernel_size")
    p.add_argument("--recent", type=int, default=256, help="ring of our snapstream")
    p.add_argument("--pyramid-beta", type=int, default=8,
                   help="PyramidKV's beta (kvpress's default 20 falls back to SnapKV's budget below 20 windows kept)")
    p.add_argument("--decode-interval", type=int, default=16, help="kvpress DecodingPress compression_interval")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--reps", type=int, default=3, help="timed reps; 0: the kept positions only (one untimed pass)")
    p.add_argument("--work", type=Path, default=REPO / ".cache" / "kvpress-check")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    a = p.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    model_dir, ids = build_prompt(a.context_tokens)
    job = dict(model_dir=model_dir, ids=ids, n_keep=a.n_keep, window=a.window, kernel=a.kernel, recent=a.recent,
               decode_interval=a.decode_interval, steps=a.steps, pyramid_beta=a.pyramid_beta)  # fmt: skip
    (a.work / JOB).write_text(json.dumps(job))
    load_start = round(os.getloadavg()[0], 2)
    only = [] if a.reps else ["--select-only"]
    for rep in range(max(a.reps, 1)):
        print(f"rep {rep}: ours, then kvpress", flush=True)
        _run([sys.executable, "-m", "bench.kvpress_check.ours", str(a.work), "--rep", str(rep), *only])
        _run([a.kvpress_python, str(REPO / "bench" / "kvpress_check" / "theirs.py"), str(a.work), "--rep", str(rep),
              *only])  # fmt: skip
    load = (load_start, round(os.getloadavg()[0], 2))
    times = timing(a.work, a.reps) if a.reps else []
    table, heads = agreement_rows(a.work, times)
    write_csv(a.out / "kvpress_agreement.csv", table, list(table[0]))
    write_csv(a.out / "kvpress_agreement_heads.csv", heads, list(heads[0]))
    if times:
        write_csv(a.out / "kvpress_timing.csv", times, list(times[0]))
    text = markdown(table, times, job, load)
    (a.out / "kvpress.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
