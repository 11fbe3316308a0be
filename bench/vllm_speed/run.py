"""``python -m bench.vllm_speed.run --vllm-python PY`` (``make bench-vllm``): our engine against vLLM on the same
tokens.

Builds the prompts (needle items, encoded as ``evals.run task=needle`` encodes them), writes the job, then per rep
runs our side (``bench.vllm_speed.ours``: ``none``, ``snapstream`` and ``rkv`` at the same KV entries, every row count)
and vLLM's side (``theirs.py`` with ``--vllm-python``), each in a fresh process, back to back, the order alternating
between reps. Checks that both sides were fed the job's prompt ids and generated exactly ``max_new_tokens`` per
sequence, then writes into ``--out``: ``vllm_speed.csv`` (one row per engine, method and row count: medians over
reps, ratios to vLLM paired per rep), ``vllm_speed_raw.csv`` (every timed run), ``vllm_speed.png`` and
``vllm_speed.md``. ``--no-vllm`` runs our side only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.models import REPO
from bench.report import write_csv
from bench.vllm_speed.common import JOB, fed_problems, load, read_job, result_name
from bench.vllm_speed.prompts import needle_prompts

FIELDS = ["engine", "method", "rows", "live_rows", "reps", "sequences", "prompt_tokens", "gen_tokens",
          "kv_entries_peak", "wall_s", "prefill_s", "decode_s", "prompt_tok_s", "gen_tok_s", "wall_over_vllm",
          "prefill_over_vllm", "decode_over_vllm", "same_tokens_as_vllm", "threads", "load_before", "load_after",
          "prefill_how"]  # fmt: skip


def methods(prompt_budget: int, recent: int) -> dict[str, dict]:
    """Our methods at one KV size: ``snapstream`` keeps ``prompt_budget`` prompt entries + a ring of ``recent``;
    ``rkv`` holds the same ``prompt_budget + recent`` entries (its budget) between compactions."""
    return {"none": {}, "snapstream": {"prompt_budget": prompt_budget, "recent": recent},
            "rkv": {"budget": prompt_budget + recent}}  # fmt: skip


def make_job(a: argparse.Namespace) -> dict:
    model_dir, prompts = needle_prompts(a.model, a.context_tokens, a.n_items)
    return dict(model=a.model, model_dir=model_dir, prompts=prompts, max_new_tokens=a.max_new_tokens, rows=a.rows,
                context_tokens=a.context_tokens,
                methods={m: k for m, k in methods(a.prompt_budget, a.recent).items() if m in a.methods})


def _run(cmd: list[str], env: dict | None = None) -> None:
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    print(proc.stdout, end="", flush=True)


def collect(work: Path, job: dict, reps: int, engines: list[str]) -> list[dict]:
    """Every result file of the run, checked against the job (same prompt ids, forced lengths)."""
    results, problems = [], []
    for rep in range(reps):
        for engine in engines:
            names = list(job["methods"]) if engine == "ours" else ["none"]
            for method in names:
                for rows in job["rows"]:
                    r = json.loads((work / result_name(engine, method, rows, rep)).read_text())
                    problems += fed_problems(job, r)
                    results.append(r)
    if problems:
        raise SystemExit("the two sides did not run the same tokens:\n" + "\n".join(problems))
    return results


def _ratio(results: list[dict], r: dict, field: str) -> float | None:
    ref = [v for v in results if v["engine"] == "vllm" and v["rows"] == r["rows"] and v["rep"] == r["rep"]]
    return r[field] / ref[0][field] if ref and ref[0][field] > 0 else None


def _same(results: list[dict], r: dict) -> float | None:
    ref = [v for v in results if v["engine"] == "vllm" and v["rows"] == r["rows"] and v["rep"] == r["rep"]]
    if not ref:
        return None
    return sum(a == b for a, b in zip(r["tokens"], ref[0]["tokens"])) / len(r["tokens"])


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def table(results: list[dict], job: dict) -> list[dict]:
    """One row per (engine, method, rows): medians over reps; ratios to vLLM paired within each rep."""
    prompt_tokens = sum(len(p) for p in job["prompts"])
    gen = len(job["prompts"]) * job["max_new_tokens"]
    rows = []
    keys = sorted({(r["engine"], r["method"], r["rows"]) for r in results},
                  key=lambda k: (k[2], k[0] != "vllm", list(job["methods"]).index(k[1])))  # fmt: skip
    for engine, method, n in keys:
        runs = [r for r in results if (r["engine"], r["method"], r["rows"]) == (engine, method, n)]
        wall, prefill, decode = (_median(r[f] for r in runs) for f in ("wall_s", "prefill_s", "decode_s"))
        loads = [r["load"] for r in runs]
        rows.append({
            "engine": engine, "method": method, "rows": n, "live_rows": min(n, len(job["prompts"])),
            "reps": len(runs), "sequences": len(job["prompts"]), "prompt_tokens": prompt_tokens, "gen_tokens": gen,
            "kv_entries_peak": runs[0].get("kv_entries_peak", max(len(p) for p in job["prompts"]) + gen // len(
                job["prompts"])),
            "wall_s": wall, "prefill_s": prefill, "decode_s": decode,
            "prompt_tok_s": round(prompt_tokens / prefill, 1), "gen_tok_s": round(gen / decode, 2),
            "wall_over_vllm": _median(_ratio(results, r, "wall_s") for r in runs),
            "prefill_over_vllm": _median(_ratio(results, r, "prefill_s") for r in runs),
            "decode_over_vllm": _median(_ratio(results, r, "decode_s") for r in runs),
            "same_tokens_as_vllm": _median(_same(results, r) for r in runs),
            "threads": runs[0]["threads"], "load_before": min(x[0] for x in loads),
            "load_after": max(x[-1] for x in loads), "prefill_how": runs[0]["prefill_how"],
        })  # fmt: skip
    return rows


def markdown(rows: list[dict], job: dict, a: argparse.Namespace, load_span: list[float], version: str) -> str:
    n = len(job["prompts"])
    lines = [
        f"# Speed against vLLM ({job['model']}, float32, CPU)",
        "",
        f"{n} needle prompts (context {a.context_tokens}, {rows[0]['prompt_tokens']} prompt tokens), "
        f"{job['max_new_tokens']} greedy tokens forced per sequence (EOS ignored on both sides), the same token ids "
        f"fed to both (checked by digest). {version}. Medians of {a.reps} rep(s), ours and vLLM back to back in "
        f"each rep; ratios paired per rep. Load average {load_span[0]} → {load_span[-1]} (1 min). Ours: prefill = "
        "the engine's per-item prefill times; vLLM: a separate `max_tokens=1` pass. Decode = wall - prefill. "
        f"KV: snapstream {job['methods'].get('snapstream')}, rkv {job['methods'].get('rkv')}.",
        "",
        "| rows | engine | method | wall s | prefill s | decode s | prompt tok/s | gen tok/s | wall ÷ vLLM "
        "| prefill ÷ vLLM | decode ÷ vLLM | same tokens as vLLM | threads |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        def f(v, fmt="{:.2f}"):
            return "–" if v is None else fmt.format(v)
        lines.append(
            f"| {r['rows']} ({r['live_rows']} live) | {r['engine']} | {r['method']} | {f(r['wall_s'], '{:.1f}')} "
            f"| {f(r['prefill_s'], '{:.1f}')} | {f(r['decode_s'], '{:.1f}')} | {f(r['prompt_tok_s'], '{:.0f}')} "
            f"| {f(r['gen_tok_s'])} | {f(r['wall_over_vllm'])} | {f(r['prefill_over_vllm'])} "
            f"| {f(r['decode_over_vllm'])} | {f(r['same_tokens_as_vllm'], '{:.0%}')} | {r['threads']} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    labels = sorted({(r["engine"], r["method"]) for r in rows}, key=lambda k: (k[0] != "vllm", k[1]))
    counts = sorted({r["rows"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(labels)
    for i, (engine, method) in enumerate(labels):
        xs = [j + i * width for j in range(len(counts))]
        by = {r["rows"]: r for r in rows if (r["engine"], r["method"]) == (engine, method)}
        pre = [by[c]["prefill_s"] if c in by else 0 for c in counts]
        dec = [by[c]["decode_s"] if c in by else 0 for c in counts]
        bars = axes[0].bar(xs, pre, width, label=f"{engine} {method}")
        axes[0].bar(xs, dec, width, bottom=pre, color=bars[0].get_facecolor(), alpha=0.45)
        if engine == "ours":
            axes[1].plot(counts, [by[c]["wall_over_vllm"] if c in by else None for c in counts], marker="o",
                         label=method)
    axes[0].set_xticks([j + 0.4 - width / 2 for j in range(len(counts))], [f"rows {c}" for c in counts])
    axes[0].set_ylabel("seconds (solid: prefill, light: decode)")
    axes[0].legend(fontsize=8)
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[1].axhline(1.2, color="grey", lw=0.8, ls="--")
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("rows")
    axes[1].set_ylabel("wall time, ours ÷ vLLM (same rep)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    path = out / "vllm_speed.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _rows(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.vllm_speed.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-python", default=os.environ.get("VLLM_PYTHON"), help="an interpreter with vllm")
    p.add_argument("--no-vllm", action="store_true", help="our side only")
    p.add_argument("--model", default="smollm2_135m")
    p.add_argument("--context-tokens", type=int, default=1024)
    p.add_argument("--n-items", type=int, default=32, help="prompts (sequences); rows above it are not all live")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rows", type=_rows, default=[1, 8, 32])
    p.add_argument("--methods", type=lambda s: s.split(","), default=["none", "snapstream", "rkv"])
    p.add_argument("--prompt-budget", type=int, default=256)
    p.add_argument("--recent", type=int, default=64)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--vllm-threads", default=None,
                   help="what vLLM's log says its worker used (its 'OpenMP thread binding info'), for the table")
    p.add_argument("--kv-space-gib", default="4", help="VLLM_CPU_KVCACHE_SPACE for vLLM's KV pool")
    p.add_argument("--work", type=Path, default=REPO / ".cache" / "vllm-speed")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--report-only", action="store_true", help="re-report the results already in --work")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.report_only:
        return report(a, read_job(a.work), ["ours"] if a.no_vllm else ["ours", "vllm"], [])
    if not a.no_vllm and not (a.vllm_python and Path(a.vllm_python).is_file()):
        p.error(f"--vllm-python: {a.vllm_python!r} is not an interpreter file (or pass --no-vllm)")
    unknown = sorted(set(a.methods) - set(methods(1, 1)))
    if unknown:
        p.error(f"--methods: unknown {unknown}; choose from {sorted(methods(1, 1))}")
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    for old in a.work.glob("*-rep*.json"):
        old.unlink()
    job = make_job(a)
    if not a.no_vllm and job["model_dir"] is None:
        p.error(f"--model: {a.model} has no weight folder for vLLM to load (a random model: pass --no-vllm)")
    (a.work / JOB).write_text(json.dumps(job))
    engines = ["ours"] if a.no_vllm else ["ours", "vllm"]
    ours = [sys.executable, "-m", "bench.vllm_speed.ours", str(a.work)]
    theirs = [a.vllm_python, str(REPO / "bench" / "vllm_speed" / "theirs.py"), str(a.work)]
    span = load()
    for rep in range(a.reps):
        order = engines if rep % 2 == 0 else engines[::-1]
        for engine in order:
            cmd = ours if engine == "ours" else theirs
            env = {"VLLM_CPU_KVCACHE_SPACE": a.kv_space_gib, "BENCH_VLLM_THREADS": a.vllm_threads or ""}
            _run([*cmd, "--rep", str(rep)], env if engine == "vllm" else None)
    span += load()
    return report(a, job, engines, span)


def report(a: argparse.Namespace, job: dict, engines: list[str], span: list[float]) -> int:
    """Check the results in ``a.work`` against the job, write the CSVs, the plot and the table."""
    results = collect(a.work, job, a.reps, engines)
    if not span:  # a re-report: the load the runs recorded
        span = [min(r["load"][0] for r in results), max(r["load"][-1] for r in results)]
    a.context_tokens = job.get("context_tokens", a.context_tokens)
    rows = table(results, job)
    versions = "; ".join(sorted({r["version"] for r in results}))
    write_csv(a.out / "vllm_speed.csv", rows, FIELDS)
    raw = [{k: v for k, v in r.items() if k not in ("tokens", "fed")} for r in results]
    write_csv(a.out / "vllm_speed_raw.csv", raw)
    plot(rows, a.out)
    text = markdown(rows, job, a, span, versions)
    (a.out / "vllm_speed.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
