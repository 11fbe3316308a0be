"""``gpu_check.json`` and ``gpu_check.md``: the check's result, written after every stage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = ("stage", "compiled", "rows (planner)", "prompt", "limit s", "wall s", "phase reached", "first step s",
           "record s", "recompiles", "host reads/step", "planned GiB", "measured GiB", "ms/step", "floor ms",
           "floor ms (copy)", "x floor", "tokens/s", "token agreement", "note")


def equal_memory(records: list[dict]) -> dict[str, Any]:
    by = {r["name"]: r for r in records}
    full, snap = by.get("equal_memory_full", {}), by.get("equal_memory_snapstream", {})
    if not full.get("tokens_per_s") or not snap.get("tokens_per_s"):
        return {"error": "a measurement is missing"}
    return {"context": full.get("prompt"), "memory_gib": full.get("peak_planned_gib"), "full_rows": full["rows"],
            "full_tokens_per_s": full["tokens_per_s"], "snapstream_rows": snap["rows"],
            "snapstream_tokens_per_s": snap["tokens_per_s"],
            "ratio": snap["tokens_per_s"] / full["tokens_per_s"]}


def agreements(rec: dict) -> dict[str, dict]:
    """The stage's token-agreement verdicts by path (``full_decode``: engine paths against transformers;
    ``compaction``: ``rkv``/``triattention`` compiled against eager)."""
    out = {k: v for k, v in rec.get("agreement", {}).items() if isinstance(v, dict) and "passed" in v}
    out.update({k.removesuffix("_agreement"): v for k, v in rec.items() if k.endswith("_agreement")})
    return out


def _f(x, fmt="{:.2f}") -> str:
    if x is None:
        return ""
    return fmt.format(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def render(result: dict) -> str:
    lines = [f"# GPU check ({result['device']}, {result['when']})", "", result["status"], "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in result.get("versions", {}).items()), "",
             f"Deadline {result['deadline_s']:.0f} s; the plan at the start (most informative first; limits sum to "
             f"{sum(p['limit_s'] or 0 for p in result['plan']):.0f} s):", ""]
    lines += [f"- {p['name']}: " + (f"limit {p['limit_s']:.0f} s (estimate {p['est_s']:.0f} s)"
                                   if p["limit_s"] is not None else "skipped") + (f"; {p['reason']}"
                                                                                  if "reason" in p else "")
              for p in result["plan"]]
    lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in result["stages"]:
        note = r.get("error") or r.get("stopped") or r.get("skipped") or r.get("note", "")
        agree = ", ".join(f"{k} {v['agreement']:.2f} {'pass' if v['passed'] else 'FAIL'}"
                          for k, v in agreements(r).items())
        cells = [r["name"], _f(r.get("compiled")),
                 f"{_f(r.get('rows'), '{}')} ({_f(r.get('planner_rows'), '{}')})", _f(r.get("prompt"), "{}"),
                 _f(r.get("limit_s"), "{:.0f}"), _f(r.get("wall_s"), "{:.1f}"), _f(r.get("phase")),
                 _f(r.get("first_step_s")), _f(r.get("record_s")), _f(r.get("recompiles"), "{}"),
                 _f(r.get("host_reads_per_step")), _f(r.get("peak_planned_gib")), _f(r.get("peak_measured_gib")),
                 _f(r.get("ms_per_step")), _f(r.get("floor_ms")), _f(r.get("floor_copy_ms")), _f(r.get("x_floor")),
                 _f(r.get("tokens_per_s"), "{:.0f}"), agree, note]
        lines.append("| " + " | ".join(cells) + " |")
    block = next((r for r in result["stages"] if r["name"] == "block_mask" and r.get("long_over_short")), None)
    if block:
        lines += ["", f"Block mask: {block['prompt']}-token rows {block['ms_per_step']:.2f} ms/step, "
                      f"{block['short_prompt']}-token rows {block['short_ms_per_step']:.2f} ms/step "
                      f"(x{block['long_over_short']:.2f}) in one graph."]
    comp = next((r for r in result["stages"] if r["name"] == "compaction" and "compaction_calls" in r), None)
    if comp:
        lines += ["", f"Compaction: {comp.get('graphs')} graphs (decode step + compaction), {comp['compaction_calls']} "
                      f"calls in the timed run, {comp['compaction_s']:.3f} s, {100 * comp['compaction_share']:.1f}% of "
                      "its decode time (the engine's own figures)."]
    lines += ["", "Equal memory: " + json.dumps(result.get("equal_memory", {}))]
    return "\n".join(lines) + "\n"


def save(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (out / "gpu_check.md").write_text(render(result))


def failures(result: dict) -> list[str]:
    """What ``--strict`` refuses: every stage skipped, stopped or failed, and every token agreement that failed."""
    out = []
    for r in result["stages"]:
        for key in ("skipped", "stopped", "error"):
            if key in r:
                out.append(f"{r['name']}: {key}: {r[key]}")
        out += [f"{r['name']}: token agreement of {k} failed ({v['agreement']:.3f}, disagreeing at "
                f"{v['disagree_at']})" for k, v in agreements(r).items() if not v["passed"]]
    return out
