"""From raw rows (one per case and rep) to ``summary.csv`` (medians + ratios to the references) and the
headline "must show" figures (``figures.md`` / ``figures.json``). Standard library only: runs where pandas is missing.

Ratios are **paired**: computed per rep between cases that ran next to each other, then the median over reps, so
that slow drift of the machine cancels.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from bench.cases import COMPILED, PLAIN, base_method, context_label, is_compiled, kept_after_prefill
from bench.config import BenchConfig

MIB = 2**20
SUMMARY_FIELDS = [
    "group", "attn", "method", "context", "batch", "n", "prompt_tokens", "kv_tokens_after_prefill", "kv_tokens_final",
    "prefill_s", "decode_ms_per_token", "decode_ms_step_median", "tokens_per_s",
    "kv_bytes_after_prefill", "kv_bytes_final", "index_bytes_final", "kv_prefill_bytes_peak",
    "mem_base_mib", "mem_prefill_peak_mib", "mem_prefill_delta_mib",
    "limit_context", "decode_vs_limit", "prefill_vs_none", "kv_full_over_this",
    "bandwidth_gbs", "floor_ms", "decode_vs_floor", "matmul_ms", "decode_vs_matmul", "compiled_over_eager",
]  # fmt: skip
NUMERIC = SUMMARY_FIELDS[6:20] + ["bandwidth_gbs", "floor_ms", "matmul_ms"]


def _median(values) -> float:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(values) if values else float("nan")


class Table:
    """Rows indexed by (attn, method, context, batch, group) -> {rep: row}."""

    def __init__(self, rows: list[dict]):
        self.by_key: dict[tuple, dict[int, dict]] = defaultdict(dict)
        for r in rows:
            if r.get("status", "ok") == "ok":
                key = (r["attn"], r["method"], int(r["context"]), int(r["batch"]), r["group"])
                self.by_key[key][int(r["rep"])] = r

    def get(self, attn, method, context, batch=1, group=None) -> dict[int, dict]:
        return self.by_key.get((attn, method, context, batch, group or context_label(context)), {})

    def median(self, key: tuple, field: str) -> float:
        return _median(float(r[field]) for r in self.by_key.get(key, {}).values())

    def vs_floor(self, key: tuple) -> float:
        """Median over reps of decode ms ÷ the bandwidth floor measured in the same group (NaN: rows without
        ``floor_ms``)."""
        rows = self.by_key.get(key, {}).values()
        return _median(float(r["decode_ms_per_token"]) / float(r["floor_ms"]) for r in rows if r.get("floor_ms"))

    def vs_matmul(self, key: tuple) -> float:
        """Median over reps of decode ms ÷ the weights' products alone, timed in the same group (NaN: rows
        without ``matmul_ms``)."""
        rows = self.by_key.get(key, {}).values()
        return _median(float(r["decode_ms_per_token"]) / float(r["matmul_ms"]) for r in rows if r.get("matmul_ms"))

    def paired(self, a: tuple, b: tuple, field: str) -> float:
        """Median over reps of a[field] / b[field], using reps where both ran."""
        ra, rb = self.by_key.get(a, {}), self.by_key.get(b, {})
        return _median(float(ra[i][field]) / float(rb[i][field]) for i in ra if i in rb and float(rb[i][field]))


def summarize(rows: list[dict], cfg: BenchConfig) -> list[dict]:
    table = Table(rows)
    out = []
    for key in sorted(table.by_key, key=lambda k: (k[4] == "batch", k[0], _group_context(k), k[3], k[1], k[2])):
        attn, method, context, batch, group = key
        row = {"group": group, "attn": attn, "method": method, "context": context, "batch": batch,
               "n": len(table.by_key[key])}  # fmt: skip
        for field in NUMERIC:
            row[field] = table.median(key, field)
        if method != PLAIN:
            limit = (attn, PLAIN, kept_after_prefill(method, context, cfg), batch, group)
            none = (attn, "none", context, batch, group)
            row["limit_context"] = limit[2]
            row["decode_vs_limit"] = table.paired(key, limit, "decode_ms_per_token")
            row["prefill_vs_none"] = table.paired(key, none, "prefill_s")
            row["kv_full_over_this"] = table.paired(none, key, "kv_bytes_final")
            if is_compiled(method):
                eager = (attn, base_method(method), context, batch, group)
                row["compiled_over_eager"] = table.paired(key, eager, "decode_ms_per_token")
        row["decode_vs_floor"] = table.vs_floor(key)
        row["decode_vs_matmul"] = table.vs_matmul(key)
        out.append(row)
    return out


def _group_context(key: tuple) -> int:
    return int(key[4][3:]) if key[4].startswith("ctx") else key[2]


def _contexts(table: Table, attn: str, method: str) -> list[int]:
    return sorted({k[2] for k in table.by_key if k[0] == attn and k[1] == method and k[4] == context_label(k[2])})


def must_show(rows: list[dict], cfg: BenchConfig) -> dict:
    """The headline figures, per attention implementation, with the targets they are checked against."""
    table = Table(rows)
    out: dict = {}
    for attn in cfg.attns:
        contexts = [c for c in _contexts(table, attn, "snapstream") if table.get(attn, "none", c)]
        if not contexts:
            continue
        fig: dict = {"per_context": []}
        for c in contexts:
            g = context_label(c)
            ss, none = (attn, "snapstream", c, 1, g), (attn, "none", c, 1, g)
            limit = (attn, PLAIN, kept_after_prefill("snapstream", c, cfg), 1, g)
            n_layers = _median(float(r["n_layers"]) for r in table.get(*none).values())
            full_layer = table.median(none, "kv_bytes_after_prefill") / n_layers
            compressed_layer = table.median(ss, "kv_bytes_after_prefill") / n_layers
            none_tokens = table.median(none, "kv_tokens_final")
            fig["per_context"].append(
                {
                    "context": c,
                    "snapstream_decode_ms": table.median(ss, "decode_ms_per_token"),
                    "limit_decode_ms": table.median(limit, "decode_ms_per_token"),
                    "snapstream_decode_vs_limit": table.paired(ss, limit, "decode_ms_per_token"),
                    "full_over_snapstream_decode": table.paired(none, ss, "decode_ms_per_token"),
                    "plain_full_over_limit_decode": table.paired(
                        (attn, PLAIN, c, 1, g), limit, "decode_ms_per_token"
                    ),
                    "kv_full_over_snapstream": table.paired(none, ss, "kv_bytes_final"),
                    "kv_expected_ratio": none_tokens / cfg.footprint,
                    "kv_with_index_full_over_snapstream": _ratio_with_index(table, none, ss),
                    "prefill_kv_peak_bytes": table.median(ss, "kv_prefill_bytes_peak"),
                    # one full layer + the compressed others (or all compressed, when a layer's preallocated
                    # slots outnumber a prompt shorter than the budget)
                    "prefill_kv_peak_bound_bytes": (
                        max(full_layer, compressed_layer) + (n_layers - 1) * compressed_layer
                    ),
                    "prefill_snapstream_over_none": table.paired(ss, none, "prefill_s"),
                }
            )
        for item in fig["per_context"]:
            g = context_label(item["context"])
            item["compiled"] = _compiled_figures(table, attn, item["context"], g, cfg)
            item["kv_ratio_rel_error"] = item["kv_full_over_snapstream"] / item["kv_expected_ratio"] - 1
            item["decode_within_5pct"] = item["snapstream_decode_vs_limit"] <= 1.05
            item["kv_within_1pct"] = abs(item["kv_ratio_rel_error"]) <= 0.01
            item["prefill_peak_within_bound"] = item["prefill_kv_peak_bytes"] <= item["prefill_kv_peak_bound_bytes"]
            item["prefill_within_5pct"] = item["prefill_snapstream_over_none"] <= 1.05
        fig["batch"] = _batch_figures(table, attn, cfg)
        out[attn] = fig
    return out


def _compiled_figures(table: Table, attn: str, c: int, g: str, cfg: BenchConfig) -> dict:
    """Per method: decode ms eager and compiled, compiled ÷ eager, × floor of each; full ÷ snapstream compiled."""
    out: dict = {"methods": {}}
    for m in cfg.methods:
        eager, comp = (attn, m, c, 1, g), (attn, m + COMPILED, c, 1, g)
        out["methods"][m] = {
            "eager_ms": table.median(eager, "decode_ms_per_token"),
            "compiled_ms": table.median(comp, "decode_ms_per_token"),
            "compiled_over_eager": table.paired(comp, eager, "decode_ms_per_token"),
            "eager_vs_floor": table.vs_floor(eager),
            "compiled_vs_floor": table.vs_floor(comp),
            "floor_ms": table.median(eager, "floor_ms"),
            "compiled_vs_matmul": table.vs_matmul(comp),
            "matmul_ms": table.median(eager, "matmul_ms"),
        }
    ss = (attn, "snapstream" + COMPILED, c, 1, g)
    out["full_compiled_over_snapstream_compiled"] = table.paired((attn, "none" + COMPILED, c, 1, g), ss,
                                                                 "decode_ms_per_token")
    out["snapstream_compiled_within_1_5x_floor"] = table.vs_floor(ss) <= 1.5
    return out


def _ratio_with_index(table: Table, none: tuple, ss: tuple) -> float:
    a, b = table.get(*none), table.get(*ss)
    return _median(
        (float(a[i]["kv_bytes_final"]) + float(a[i]["index_bytes_final"]))
        / (float(b[i]["kv_bytes_final"]) + float(b[i]["index_bytes_final"]))
        for i in a
        if i in b
    )


def _batch_figures(table: Table, attn: str, cfg: BenchConfig) -> dict:
    keys = [k for k in table.by_key if k[0] == attn and k[1] == "snapstream" and k[4] == "batch"]
    if not keys:
        return {}
    context = keys[0][2]
    limit_len = kept_after_prefill("snapstream", context, cfg)
    out = {"context": context, "tokens_per_s": {}, "limit_tokens_per_s": {}}
    for b in sorted(k[3] for k in keys):
        out["tokens_per_s"][b] = table.median((attn, "snapstream", context, b, "batch"), "tokens_per_s")
        out["limit_tokens_per_s"][b] = table.median((attn, PLAIN, limit_len, b, "batch"), "tokens_per_s")
    top, low = max(out["tokens_per_s"]), min(out["tokens_per_s"])
    out["largest_over_batch1"] = table.paired(
        (attn, "snapstream", context, top, "batch"), (attn, "snapstream", context, low, "batch"), "tokens_per_s"
    )
    out["largest_batch"] = top
    return out


def write_csv(path: Path, rows: list[dict], fields: list[str] | None = None) -> None:
    fields = fields or sorted({k for r in rows for k in r})
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: _fmt(r.get(k)) for k in fields})


def _fmt(v):
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return v


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
