"""The files of ``bench.kv_formats``: the CSV (every row), the markdown table of the summary rows and one figure
(bytes against agreement; step time against the read floor)."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)
COLUMNS = ["row", "arm", "method", "kv_format", "budget", "context", "prompt", "prompt_tokens", "new_tokens",
           "held_last_step", "slots", "kv_bytes_peak", "row_alloc_bytes", "planner_kv_bytes",
           "planner_over_measured", "bytes_ratio", "top1_agree", "mean_kl", "greedy_prefix", "compactions",
           "step_ms_median", "step_ratio", "step_read_bytes", "step_floor_bytes", "ref_step_read_bytes",
           "read_ratio", "floor_ratio", "kv_floor_ratio"]
MIB = 2**20


def _num(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="raise")
        w.writeheader()
        for r in rows:
            w.writerow({k: _num(r.get(k, "")) for k in COLUMNS})


def table(summary: list[dict]) -> str:
    """The summary rows as markdown, one line per (length, arm)."""
    lines = ["| context | arm | format | kv_bytes_peak MiB | planner MiB | bytes ratio | top-1 agree | mean KL "
             "(nats) | greedy prefix | step ms | step ratio | read ratio (unfused) | floor ratio |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(summary, key=lambda r: r["context"]):
        budget = f" B={r['budget']}" if r["budget"] != "" else ""
        lines.append(
            f"| {r['context']} | {r['arm']}{budget} | {r['kv_format']} | {r['kv_bytes_peak'] / MIB:.2f} "
            f"| {r['planner_kv_bytes'] / MIB:.2f} | {r['bytes_ratio']:.3f} | {r['top1_agree']:.3f} "
            f"| {r['mean_kl']:.2e} | {r['greedy_prefix']:.1f} / {r['new_tokens']} | {r['step_ms_median']:.1f} "
            f"| {r['step_ratio']:.2f} | {r['read_ratio']:.3f} | {r['floor_ratio']:.3f} |")
    return "\n".join(lines)


def markdown(summary: list[dict], meta: dict) -> str:
    n = {r["prompt"] for r in summary}
    return "\n".join([
        "# Quantized K/V formats side by side (`python -m bench.kv_formats`)",
        "",
        f"Model `{meta['model']}` ({meta['dtype']}), {meta['threads']} threads, CPU eager; prompts: the first "
        f"{meta['items']} bundled LongBench-v2 contexts cut to each length ({', '.join(sorted(n))} per line); "
        f"{meta['new_tokens']} greedy tokens of the reference fed to every arm on its own engine path "
        f"(`bench/kv_forced.py`); rkv compacts every {meta['interval']} tokens; {meta['seconds']} s in all.",
        "",
        table(summary),
        "",
        "- **kv_bytes_peak**: the engine's figure of the sample (its decode row: `KVFormat.row_bytes` of the "
        "method's slots); **planner**: `snapstream_core.memory.row_terms(...)[\"kv\"]`; **bytes ratio**: "
        "kv_bytes_peak over the reference's (`none` in the model's dtype).",
        "- **top-1 agree**, **mean KL**: over the decode steps of the reference's greedy continuation, "
        "KL(reference || arm); **greedy prefix**: tokens of that continuation the arm's own greedy decode "
        "reproduces before it first differs (first token included).",
        "- **step ms**: median wall time of a decode step, arms interleaved step by step; **step ratio**: over the "
        "reference's. **read ratio (unfused)**: bytes a step reads (weights, K/V codes and scales, and the "
        "dequantized copy the unfused path makes: `KVFormat.read_bytes` per layer) over the reference's (weights "
        "and K/V); **floor ratio**: weights and codes only, what a fused dequantize-in-attention kernel would read.",
        "- Path: every arm decodes on the engine (`snapstream_core.engine.Engine`, one row, its `KVFormat`'s row "
        "storage and, for rkv, its compaction), the path of `backend=hf`; the eager `CompressedCache` layers decode "
        "the same tokens (tests/test_kv_fp8.py `test_generate_equals_the_engine`, tests/test_kivi_engine.py "
        "`test_engine_tokens_equal_generate_on_smollm2`). rkv_fp8's budget is B times the model's bytes per "
        "element (equal budget bytes); both rows also hold `interval` slots for the tokens before a compaction.",
        "",
    ])


def figure(path: Path, summary: list[dict]) -> bool:
    """Two panels: bytes ratio against top-1 agreement, and step ratio beside the read floor, per arm and length."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no figure (the CSV holds the numbers)")
        return False
    lengths = sorted({r["context"] for r in summary})
    arms = list(dict.fromkeys(r["arm"] for r in summary))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    markers, shapes = "osD^v", ("circles", "squares", "diamonds", "triangles", "inverted triangles")
    for j, length in enumerate(lengths):
        for i, arm in enumerate(arms):
            r = next(r for r in summary if r["arm"] == arm and r["context"] == length)
            left.scatter(r["bytes_ratio"], r["top1_agree"], color=f"C{i}", marker=markers[j % len(markers)],
                         label=arm if j == 0 else None)
    left.set_xscale("log")
    left.set_xlabel("kv_bytes_peak / reference's (log)")
    left.set_ylabel("top-1 agreement with the reference")
    left.set_title("memory against fidelity (" + ", ".join(
        f"{shapes[j % len(shapes)]}: {n} tokens" for j, n in enumerate(lengths)) + ")", fontsize=9)
    left.legend(fontsize=8)
    width = 0.8 / len(lengths)
    for j, length in enumerate(lengths):
        rs = [next(r for r in summary if r["arm"] == arm and r["context"] == length) for arm in arms]
        xs = [i + (j - (len(lengths) - 1) / 2) * width for i in range(len(arms))]
        right.bar(xs, [r["step_ratio"] for r in rs], width, color=f"C{j}", alpha=0.7,
                  label=f"step time ratio, {length} tokens")
        right.scatter(xs, [r["floor_ratio"] for r in rs], color="k", marker="_", s=200, zorder=3,
                      label="read floor (weights + codes)" if j == 0 else None)
    right.axhline(1.0, color="grey", lw=0.8)
    right.set_xticks(range(len(arms)), arms, rotation=30, fontsize=8)
    right.set_ylabel("decode step time / reference's (CPU eager)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def read_summary(path: Path) -> list[dict]:
    """The summary rows of a written ``kv_formats.csv``, numbers as numbers (for :func:`rewrite`)."""
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r["row"] == "summary"]
    text = ("row", "arm", "method", "kv_format", "budget", "prompt")
    return [{k: v if k in text else float(v) for k, v in r.items()} | {"context": int(r["context"]),
            "new_tokens": int(r["new_tokens"]), "budget": int(r["budget"]) if r["budget"] else ""} for r in rows]


def rewrite(out: Path) -> None:
    """``kv_formats.md`` and ``kv_formats.png`` again from the CSV and ``meta.json`` in ``out`` (no model run)."""
    summary = read_summary(out / "kv_formats.csv")
    (out / "kv_formats.md").write_text(markdown(summary, json.loads((out / "meta.json").read_text())))
    figure(out / "kv_formats.png", summary)


def write(out: Path, rows: list[dict], summary: list[dict], meta: dict) -> None:
    """``kv_formats.csv`` (every row, then the summary), ``kv_formats.md``, ``kv_formats.png``, ``meta.json``."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "kv_formats.csv", rows + summary)
    (out / "kv_formats.md").write_text(markdown(summary, meta))
    figure(out / "kv_formats.png", summary)
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    log.info("%s\n-> %s", table(summary), out)
