"""The quantized KV storages in the config and the planner: the run tag and directory name the storage (an FP8 run
never shares the bf16 run's), the planner's rows are ``KVFormat.row_bytes`` plus one layer's dequantized read, the
model's dtype keeps every figure it had, and a quantized run is never an alias of the bf16 full cache."""

from __future__ import annotations

import pytest

from evals.config.spec import check
from evals.plan import alias_of, choose_rows, job_from_spec, peak_bytes
from evals.plan.cost import step_terms
from evals.plan.job import peak_terms
from snapstream_core.policies.kv_format import KVFormat
from tests.runner_utils import compose_cfg

FP8 = ["compression.kv_dtype=fp8_e4m3"]


def _cfg(*overrides):
    return compose_cfg(["model=llama31_8b_instruct", "task=aime24", *overrides])


def _job(*overrides):
    return job_from_spec(check(_cfg(*overrides), offline=True))


@pytest.mark.parametrize(("overrides", "tag"), [
    (["compression=none"], "none"),
    (["compression=none", *FP8], "none-kvfp8_e4m3-kstensor"),
    (["compression=none", *FP8, "compression.kv_scale=one"], "none-kvfp8_e4m3-ksone"),
    (["compression=rkv", "compression.budget=1024", *FP8, "compression.kv_scale=head"], None),
])
def test_the_tag_and_run_dir_name_the_storage_only_when_it_is_not_the_model_dtype(overrides, tag):
    cfg = _cfg(*overrides)
    spec = check(cfg, offline=True)
    if tag is None:  # a method's own tag, then the storage
        plain = _cfg(*[o for o in overrides if "kv_" not in o])
        tag = f"{plain.compression.tag}-kvfp8_e4m3-kshead"
    assert cfg.compression.tag == tag and spec.compression_tag == tag
    assert cfg.run_dir.split("/")[3] == tag
    assert _job(*overrides).label.split()[2] == tag


def test_the_rows_hold_the_format_bytes_and_one_layer_dequantized_read():
    auto, fp8 = _job("compression=none"), _job("compression=none", *FP8)
    s, S = auto.shape, auto.slots
    assert fp8.slots == S
    a, q = peak_terms(auto, 4), peak_terms(fp8, 4)
    per_auto = a["rows"] // 4
    per_fp8 = q["rows"] // 4
    fmt = KVFormat("fp8_e4m3", scale="tensor")
    kv_auto, kv_fp8 = S * s.kv_bytes_per_token, fmt.row_bytes(S, s.n_layers, s.n_kv_heads, s.head_dim, 2)
    read = fmt.read_bytes(S, s.n_kv_heads, s.head_dim, 2)
    assert kv_fp8 == kv_auto // 2 + s.n_layers * 2 * 4  # one byte an element, an fp32 scale per layer for K and V
    assert per_auto - per_fp8 == kv_auto - kv_fp8  # the rows held differ by their storage only
    assert a["weights"] == q["weights"] and a["prefill"] > q["prefill"]  # the compressed layers too, at prefill
    # the dequantized read is a step's transient beside the rows, never alive with the sampling or the prefill
    assert read > 0 and q["draw"] == max(0, 4 * max(read, s.vocab * fp8.sampling_peak) - q["prefill"] - q["first_draw"])
    big = peak_terms(fp8, 4000)
    assert big["draw"] == 4000 * max(read, s.vocab * fp8.sampling_peak) - big["prefill"] - big["first_draw"] > 0
    assert choose_rows(_job("compression=none", *FP8, "gen.n_samples=64")) > choose_rows(
        _job("compression=none", "gen.n_samples=64"))
    # the step moves the codes, and the unfused path's copy of every layer
    t_auto, t_fp8 = step_terms(auto, 8), step_terms(fp8, 8)
    assert t_auto["compute"] == t_fp8["compute"] and t_auto["bandwidth"] != t_fp8["bandwidth"]


def test_a_quantized_run_is_never_an_alias_of_the_bf16_full_cache():
    keeps = ["compression=snapkv", "compression.prompt_budget=1024"]
    assert alias_of(_job(*keeps), 1024) is not None
    assert alias_of(_job(*keeps, *FP8), 1024) is None
    assert alias_of(_job(*keeps, *FP8, "compression.kv_scale=one"), 1024) is None
    assert peak_bytes(_job(*keeps, *FP8), 1) < peak_bytes(_job(*keeps), 1)


def test_a_sweep_line_states_the_storage_it_did_not_sweep():
    from evals.progress import job_label

    fp8 = {"method": "rkv", "budget": 512, "kv_dtype": "fp8_e4m3", "kv_scale": "one"}
    assert job_label(["compression=rkv"], {"compression"}, fp8) == (
        "compression=rkv compression.budget=512 compression.kv_dtype=fp8_e4m3 compression.kv_scale=one")
    plain = job_label(["compression=rkv"], {"compression"}, {"method": "rkv"})
    assert plain == "compression=rkv compression.budget=512"


def test_an_fp8_run_names_its_storage_in_its_directory_rows_summary_and_headline(tmp_path):
    """tiny_llama (fp32) on two needle items: the FP8 full cache's run directory, rows, summary and headline say
    FP8; its KV bytes are about a quarter of the fp32 full cache's (one byte an element, plus the scales)."""
    import json

    import pandas as pd

    from evals.run import run

    base = ["model=tiny_llama", "task=needle", "task.context_tokens=128", "task.n_items=2", "gen.max_new_tokens=4",
            f"out_root={tmp_path}", "compression=none"]
    plain = run(compose_cfg(base))
    fp8 = run(compose_cfg([*base, *FP8, "compression.kv_scale=one"]))
    assert "/none-kvfp8_e4m3-ksone/" in str(fp8) and "/none/" in str(plain)
    rows = [json.loads(line) for line in (fp8 / "samples.jsonl").read_text().splitlines()]
    assert {(r["kv_dtype"], r["kv_scale"]) for r in rows} == {("fp8_e4m3", "one")}
    bf16 = [json.loads(line) for line in (plain / "samples.jsonl").read_text().splitlines()]
    assert all(r["kv_dtype"] is None and r["kv_scale"] is None for r in bf16)
    summary = pd.read_csv(fp8 / "summary.csv")
    assert set(summary["kv_dtype"]) == {"fp8_e4m3"} and set(summary["kv_scale"]) == {"one"}
    from evals.report.run_headline import headline_text

    head = headline_text(json.loads((fp8 / "results.json").read_text())).splitlines()[0]
    assert head == "result: needle · tiny_llama · none · KV fp8_e4m3/one"
    assert headline_text(json.loads((plain / "results.json").read_text())).splitlines()[0] == (
        "result: needle · tiny_llama · none")
    bytes_of = {p: pd.read_csv(p / "samples.csv")["kv_bytes_peak"].mean() for p in (plain, fp8)}
    assert 0.25 <= bytes_of[fp8] / bytes_of[plain] < 0.27
