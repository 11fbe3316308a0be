"""Markdown for people: the summary table and the "must show" figures of a run (``figures.md``)."""

from __future__ import annotations

import math

from bench.cases import PLAIN
from bench.config import BenchConfig

MIB = 2**20


def _f(v, fmt: str = ".3g") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return format(v, fmt)


def _ok(flag: bool) -> str:
    return "yes" if flag else "**no**"


def summary_table(summary: list[dict], attn: str) -> str:
    lines = [
        "| context | method | prefill s | decode ms/token | × limit | KV MiB after prefill | KV MiB at end "
        "| peak KV MiB in prefill | prefill peak mem MiB |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in summary:
        if r["attn"] != attn or r["group"] == "batch":
            continue
        name = r["method"] if r["method"] != PLAIN else f"plain DynamicCache of {r['context']} tokens"
        lines.append(
            f"| {r['group'][3:]} | {name} | {_f(r['prefill_s'])} | {_f(r['decode_ms_per_token'])} "
            f"| {_f(r.get('decode_vs_limit'), '.3f')} | {_f(r['kv_bytes_after_prefill'] / MIB, '.1f')} "
            f"| {_f(r['kv_bytes_final'] / MIB, '.1f')} | {_f(r['kv_prefill_bytes_peak'] / MIB, '.1f')} "
            f"| {_f(r['mem_prefill_delta_mib'], '.0f')} |"
        )
    return "\n".join(lines)


def _compiled_md(fig: dict, meta: dict) -> list[str]:
    """Compiled ÷ eager decode per method and context, and each × floor (bytes per step ÷ measured bandwidth)."""
    rows = [c for c in fig["per_context"] if c.get("compiled", {}).get("methods")]
    if not rows:
        return []
    out = [
        "",
        "### Compiled static-shape decode and the bandwidth floor",
        "",
        "`× floor`: decode ms ÷ (weights + KV held, per batch, in bytes ÷ the bandwidth of a large reduction "
        "read right before and right after each round of decode steps, the faster of the two for that round; "
        "`floor ms` is the mean over the rounds). `× matmul`: decode ms ÷ "
        "the products of every weight matrix with the step's input alone, as ATen's kernels run them in eager "
        "decode, timed in the same group (`matmul ms`; the compiled CPU step runs its own products and goes below "
        "it). First compiled call (compile) per kind: "
        f"{meta.get('compile_s') or '—'} s.",
        "",
        "| context | method | eager ms | compiled ms | compiled ÷ eager | eager × floor | compiled × floor "
        "| floor ms | compiled × matmul | matmul ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in rows:
        for m, f in c["compiled"]["methods"].items():
            out.append(
                f"| {c['context']} | {m} | {_f(f['eager_ms'])} | {_f(f['compiled_ms'])} "
                f"| {_f(f['compiled_over_eager'], '.3f')} | {_f(f['eager_vs_floor'], '.2f')} "
                f"| {_f(f['compiled_vs_floor'], '.2f')} | {_f(f['floor_ms'])} "
                f"| {_f(f.get('compiled_vs_matmul'), '.2f')} | {_f(f.get('matmul_ms'))} |"
            )
        out.append(
            f"| {c['context']} | full ÷ snapstream (both compiled) "
            f"| {_f(c['compiled']['full_compiled_over_snapstream_compiled'], '.3f')} | | | | "
            f"snapstream ≤ 1.5× floor: {_ok(c['compiled']['snapstream_compiled_within_1_5x_floor'])} | | | |"
        )
    return out


def _kernels_note(cfg: BenchConfig) -> str:
    """What the compiled CPU cases ran on (bench.cpu_decode's kernels, or stock inductor)."""
    if cfg.device != "cpu" or not cfg.compiled:
        return ""
    if cfg.cpu_kernels:
        return (
            " Compiled cases: `bench/cpu_decode` kernels (fused matrix-vector products, split-KV attention, "
            "weights and K/V on huge pages)."
        )
    return " Compiled cases: stock inductor (`--no-cpu-kernels`)."


def figures_md(figs: dict, summary: list[dict], cfg: BenchConfig, meta: dict) -> str:
    out = [
        "# SnapStream benchmark",
        "",
        f"Machine: {meta.get('machine', '?')}. torch {meta.get('torch')}, transformers {meta.get('transformers')}.",
        f"Model: {cfg.model} ({cfg.dtype}, {cfg.device}). Budgets: prompt_budget={cfg.prompt_budget}, "
        f"recent={cfg.recent}, window={cfg.window}, kernel={cfg.kernel}, sinks={cfg.sinks}; streaming_llm keeps "
        f"sinks + {cfg.footprint - cfg.sinks} (the same {cfg.footprint} slots). {cfg.steps} decode steps, "
        f"{cfg.reps - cfg.discard_reps} reps (medians; ratios paired per rep"
        f"{f'; {cfg.discard_reps} warm-up rep(s) left out' if cfg.discard_reps else ''}). Load average at start/end: "
        f"{meta.get('load_start')} / {meta.get('load_end')}.{_kernels_note(cfg)}",
        "",
        "`× limit`: decode time ÷ plain `DynamicCache` decode over a cache of the size the method keeps after "
        "prefill (the physical reference: the best any compression can do at that footprint).",
    ]
    for attn, fig in figs.items():
        out += ["", f"## attention: {attn}", "", summary_table(summary, attn), "", "### What it must show", ""]
        out += [
            "| context | snapstream ÷ limit (decode) | full ÷ snapstream (decode) | KV full ÷ snapstream "
            "(expected) | same, index tensors counted | peak prefill KV MiB (bound) | prefill snapstream ÷ none |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in fig["per_context"]:
            out.append(
                f"| {c['context']} | {_f(c['snapstream_decode_vs_limit'], '.3f')} ({_ok(c['decode_within_5pct'])}) "
                f"| {_f(c['full_over_snapstream_decode'], '.3f')} "
                f"| {_f(c['kv_full_over_snapstream'], '.4f')} ({_f(c['kv_expected_ratio'], '.4f')}, "
                f"{_ok(c['kv_within_1pct'])}) | {_f(c['kv_with_index_full_over_snapstream'], '.4f')} "
                f"| {_f(c['prefill_kv_peak_bytes'] / MIB, '.1f')} "
                f"({_f(c['prefill_kv_peak_bound_bytes'] / MIB, '.1f')}, "
                f"{_ok(c['prefill_peak_within_bound'])}) "
                f"| {_f(c['prefill_snapstream_over_none'], '.3f')} ({_ok(c['prefill_within_5pct'])}) |"
            )
        out += _compiled_md(fig, meta)
        batch = fig.get("batch") or {}
        if batch:
            sizes = sorted(batch["tokens_per_s"])
            out += [
                "",
                f"Batched decode at context {batch['context']} (tokens/s; snapstream, and plain DynamicCache at its "
                "footprint):",
                "",
                "| batch | " + " | ".join(str(b) for b in sizes) + " |",
                "|---|" + "---:|" * len(sizes),
                "| snapstream | " + " | ".join(_f(batch["tokens_per_s"][b], ".1f") for b in sizes) + " |",
                "| limit | " + " | ".join(_f(batch["limit_tokens_per_s"][b], ".1f") for b in sizes) + " |",
                "",
                f"batch {batch['largest_batch']} ÷ batch 1 tokens/s (snapstream): "
                f"{_f(batch['largest_over_batch1'], '.2f')}",
            ]
    skipped = meta.get("skipped") or []
    if skipped:
        reasons: dict[str, int] = {}
        for line in skipped:
            reason = line.split(": ", 1)[-1]
            reasons[reason] = reasons.get(reason, 0) + 1
        out += ["", "Skipped (listed in meta.json): " + "; ".join(f"{n} × {r}" for r, n in reasons.items())]
    return "\n".join(out) + "\n"
