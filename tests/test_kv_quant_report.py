"""The report never pools a run stored in FP8 with one in the model's dtype: the full cache in FP8 is compared with
the full cache in bf16 (never used as the reference), every method's Δ is against the bf16 full cache, and the labels
tell the storages apart (``evals/report/reference.py``)."""

from __future__ import annotations

import json

import pandas as pd

from evals.report import collect, headline
from evals.report.paired import paired_deltas

ITEMS = ("a", "b", "c", "d", "e", "f")


def _run(root, name, method, budget, correct, kv_dtype=None, kv_scale=None):
    """A run directory as the runner writes it: summary.csv with the knob columns, samples.csv, meta.json whose
    identity's compression holds the storage knobs when set (a run in the model's dtype has none)."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    base = {"model": "m", "task": "needle", "method": method, "prompt_budget": budget, "recent": None,
            "kv_dtype": kv_dtype, "kv_scale": kv_scale, "run_id": name, "unit": "%", "group": "all"}
    acc = 100.0 * sum(correct) / len(correct)
    pd.DataFrame([{**base, "metric": "accuracy", "value": acc, "n": len(correct), "ci_lo": 0.0, "ci_hi": 100.0},
                  {**base, "metric": "mean_kv_bytes_peak", "value": 1000.0 if kv_dtype else 2000.0,
                   "n": len(correct), "unit": "bytes"}]).to_csv(run_dir / "summary.csv", index=False)
    pd.DataFrame({"item_id": list(ITEMS), "correct": [bool(c) for c in correct], "compressed": False,
                  "gen_tokens": 10}).to_csv(run_dir / "samples.csv", index=False)
    compression = {"method": method, **({"prompt_budget": budget} if budget else {}),
                   **({"kv_dtype": kv_dtype, "kv_scale": kv_scale} if kv_dtype else {})}
    identity = {"model": {"name": "m"}, "task": {"name": "needle"}, "gen": {"seed": 0}, "compression": compression}
    (run_dir / "meta.json").write_text(json.dumps({"identity": identity, "fingerprint": f"fp-{name}"}))


def test_fp8_runs_are_compared_with_the_bf16_full_cache_never_used_as_it(tmp_path):
    # "a_..." sorts first: a reference chosen among every method=none run by name would be the FP8 one
    _run(tmp_path, "a_none_fp8", "none", None, [1, 1, 1, 0, 0, 0], "fp8_e4m3", "one")
    _run(tmp_path, "b_none", "none", None, [1, 1, 1, 1, 1, 1])
    _run(tmp_path, "c_snapkv", "snapkv", 64, [1, 1, 1, 1, 1, 0])
    _run(tmp_path, "d_snapkv_fp8", "snapkv", 64, [1, 1, 1, 1, 0, 0], "fp8_e4m3", "one")
    head = headline(collect(tmp_path))
    labels = dict(zip(head["run"], head["label"]))
    assert labels["b_none"] == "none" and labels["a_none_fp8"] == "none (kv_dtype=fp8_e4m3, kv_scale=one)"
    assert labels["c_snapkv"] == "snapkv" and labels["d_snapkv_fp8"] == "snapkv (kv_dtype=fp8_e4m3, kv_scale=one)"
    deltas = paired_deltas(head).set_index("run")
    assert set(deltas.index) == {"a_none_fp8", "c_snapkv", "d_snapkv_fp8"}  # the FP8 full cache gets its Δ
    assert set(deltas["reference"]) == {"b_none"}
    assert deltas.loc["a_none_fp8", "delta"] == -50.0
    assert round(deltas.loc["c_snapkv", "delta"], 6) == round(-100 / 6, 6)
    assert round(deltas.loc["d_snapkv_fp8", "delta"], 6) == round(-200 / 6, 6)


def test_summaries_without_the_storage_columns_are_in_the_model_dtype(tmp_path):
    """A summary written before the storage knobs existed (no kv_dtype column) is a run in the model's dtype: its
    full cache stays the reference."""
    _run(tmp_path, "none", "none", None, [1, 1, 1, 1, 1, 1])
    _run(tmp_path, "snapkv", "snapkv", 64, [1, 1, 1, 1, 1, 0])
    for name in ("none", "snapkv"):
        path = tmp_path / name / "summary.csv"
        pd.read_csv(path).drop(columns=["kv_dtype", "kv_scale"]).to_csv(path, index=False)
    deltas = paired_deltas(headline(collect(tmp_path))).set_index("run")
    assert deltas.loc["snapkv", "reference"] == "none"


def test_a_run_stored_in_fp8_is_not_comparable_with_a_published_bf16_figure():
    from evals.report.references import reference_rows

    row = {"model": "r1_distill_llama_8b", "task": "aime24", "metric": "pass@1", "group": "all", "value": 48.0,
           "n": 30, "method": "none", "unit": "%", "prompt_budget": float("nan"), "run": "r"}
    bf16 = reference_rows(pd.DataFrame([row]))
    fp8 = reference_rows(pd.DataFrame([{**row, "kv_dtype": "fp8_e4m3", "kv_scale": "one"}]))
    assert len(bf16) == len(fp8) > 0 and bf16["comparable"].all()
    assert not fp8["comparable"].any() and fp8["delta"].isna().all()
    assert fp8["not_comparable"].str.contains("K/V stored as fp8_e4m3 here").all()
