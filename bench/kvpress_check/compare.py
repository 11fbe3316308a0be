"""Compare what the two sides wrote: agreement of selected positions per method, layer and KV head, the score gaps
that explain any disagreement, greedy tokens, and the time ratios (ours ÷ kvpress, and each scorer ÷ our SnapKV)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch

# Which of our methods is timed against which kvpress configuration.
PAIRS = (("none", "none"), ("snapkv", "snapkv"), ("snapstream", "snapkv+decoding"), ("knorm", "knorm"),
         ("tova", "tova"), ("keydiff", "keydiff"), ("expected_attention", "expected_attention"),
         ("adakv", "adakv"), ("pyramidkv", "pyramidkv"))  # fmt: skip
# The disagreements a method may show: each must be a near-tie, a relative score gap below this.
NEAR_TIE = 1e-5


def head_rows(work: Path, method: str) -> list[dict]:
    """Per (layer, KV head) of ``method``: positions kept by kvpress (``kept``: a count per layer for PyramidKV, per
    head for AdaKV) and by ours, those in common, whether the two sets are identical, the largest relative score
    difference on the positions both sides score (ours ``+inf`` marks what the method always keeps, kvpress's
    ``max + 1``), and for a disagreement the largest relative gap between a disputed position's kvpress score and
    the head's cutoff (its ``kept``-th highest kvpress score)."""
    ours = json.loads((work / "ours_selection.json").read_text())["kept"][method]
    theirs = json.loads((work / "theirs_selection.json").read_text())["kept"][method]
    s_ours = torch.load(work / f"ours_scores_{method}.pt")
    s_theirs = torch.load(work / f"theirs_scores_{method}.pt")
    rows = []
    for layer, (lo, lt) in enumerate(zip(ours, theirs, strict=True)):
        for head, (a, b) in enumerate(zip(lo, lt, strict=True)):
            so, st = s_ours[layer][head].double(), s_theirs[layer][head].double()
            scored = torch.isfinite(so)
            n = len(b)
            disputed = sorted(set(a) ^ set(b))
            rows.append({
                "method": method,
                "layer": layer,
                "kv_head": head,
                "kept": n,
                "kept_ours": len(a),
                "common": len(set(a) & set(b)),
                "identical": set(a) == set(b),
                "agree_pct": 100 * len(set(a) & set(b)) / max(n, len(a), 1),
                "score_max_rel_diff": float((so - st)[scored].abs().max() / st[scored].abs().max()),
                "disputed_gap_rel": _disputed_gap(st, n, disputed) if disputed else 0.0,
            })  # fmt: skip
    return rows


def _disputed_gap(scores: torch.Tensor, n_kept: int, disputed: list[int]) -> float:
    """The largest ``|s(p) - s_cut| / |s_cut|`` over the disputed positions ``p`` (kept by one side only), ``s``
    kvpress's scores and ``s_cut`` its ``n_kept``-th highest: how close to a tie each disagreement is."""
    cut = scores.topk(n_kept).values[-1]
    return float(((scores[disputed] - cut).abs() / cut.abs()).max())


def summary(rows: list[dict]) -> dict:
    """One method's figures over its (layer, KV head) rows."""
    kept = sum(max(r["kept"], r["kept_ours"]) for r in rows)
    gaps = [r["disputed_gap_rel"] for r in rows if not r["identical"]]
    return {
        "method": rows[0]["method"],
        "heads": len(rows),
        "heads_identical": sum(r["identical"] for r in rows),
        # heads whose every disputed position scores exactly kvpress's cutoff: equal scores, the tie broken
        # differently (both sides rank with torch.topk, which breaks a tie by the whole head's scores: see top_set)
        "heads_identical_but_exact_ties": sum(not r["identical"] and r["disputed_gap_rel"] == 0 for r in rows),
        "kept_per_head": sum(r["kept"] for r in rows) / len(rows),  # the mean (AdaKV, PyramidKV: a count each)
        "kept_min": min(r["kept"] for r in rows),
        "kept_max": max(r["kept"] for r in rows),
        "agree_pct": 100 * sum(r["common"] for r in rows) / kept,
        "worst_head_agree_pct": min(r["agree_pct"] for r in rows),
        "score_max_rel_diff": max(r["score_max_rel_diff"] for r in rows),
        "disputed_gap_rel_max": max(gaps, default=0.0),
        "disagreements_near_ties": all(g < NEAR_TIE for g in gaps),
    }


def timing(work: Path, reps: int) -> list[dict]:
    """Per pair: medians over reps of both sides' prefill and decode times and their ratios; for ours, the median
    ratio of its prefill to our SnapKV's in the same process (side by side)."""
    out = []
    for ours_name, theirs_name in PAIRS:
        ratios: dict[str, list[float]] = {"prefill_s": [], "decode_ms_per_token": []}
        to_snapkv = []
        values: dict[str, list[float]] = {}
        for rep in range(reps):
            ours_rep = json.loads((work / f"ours_rep{rep}.json").read_text())
            o = ours_rep[ours_name]
            t = json.loads((work / f"theirs_rep{rep}.json").read_text())[theirs_name]
            to_snapkv.append(o["prefill_s"] / ours_rep["snapkv"]["prefill_s"])
            for name in ratios:
                ratios[name].append(o[name] / t[name])
                values.setdefault(f"ours_{name}", []).append(o[name])
                values.setdefault(f"kvpress_{name}", []).append(t[name])
        row = {"ours": ours_name, "kvpress": theirs_name, "reps": reps}
        row.update({k: statistics.median(v) for k, v in values.items()})
        row.update({f"{k}_ours_over_kvpress": statistics.median(v) for k, v in ratios.items()})
        row["prefill_s_over_our_snapkv"] = statistics.median(to_snapkv)
        row["kv_final_ours"] = o["kv_final"]
        row["kv_final_kvpress"] = t["kv_final"]
        row["same_greedy_tokens"] = o["tokens"] == t["tokens"]
        out.append(row)
    return out
