"""The benchmark measures what it says: exact KV bytes held, the reference it compares with, the run plan.

No timing is asserted here (timings are figures of ``make bench``); these check the accounting on ``tiny_llama``.
"""

from __future__ import annotations

import csv
import json

import pytest
import torch

from bench import run
from bench.cases import PLAIN, Case, kept_after_prefill, plan
from bench.config import WARM_STEPS, BenchConfig, parse_tokens
from bench.floor import floor_bytes, kv_bytes_per_token, weight_bytes
from bench.measure import measure_group
from bench.models import load
from snapstream_core.methods import METHODS

CFG = BenchConfig(
    model="tiny_llama",
    contexts=(96, 160),
    steps=3,
    reps=2,
    prompt_budget=64,
    recent=16,
    window=8,
    kernel=3,
    batches=(1, 2),
    batch_context=96,
    compile_backend="eager",  # the compiled cases' graph capture without code generation: seconds, not minutes
)
STEPS = WARM_STEPS + CFG.steps  # decode forwards per case (the first ones untimed)
# tiny_llama: 2 layers, 2 KV heads of dim 16, fp32 -> bytes per token per layer for K and V
LAYERS, PER_TOKEN_LAYER = 2, 2 * 2 * 16 * 4


@pytest.fixture(scope="module")
def tiny():
    return load(CFG, 256)


@pytest.mark.parametrize(
    "method, slots, final",
    [
        ("none", 160, 160 + STEPS),  # the full cache grows by every decoded token
        (PLAIN, 160, 160 + STEPS),
        ("snapkv", 64, 64 + STEPS),  # selected prompt + appended tokens
        ("snapstream", 80, 80),  # prompt_budget + recent slots, allocated once
        ("streaming_llm", 80, 80),  # sinks + recent: the same footprint
    ],
)
def test_kv_bytes_are_what_the_cache_holds(tiny, method, slots, final):
    model, prompts = tiny
    (row,) = measure_group(model, prompts, [Case("sdpa", method, 160)], CFG)
    assert row["status"] == "ok"
    assert row["kv_bytes_after_prefill"] == LAYERS * PER_TOKEN_LAYER * slots
    assert row["kv_bytes_final"] == LAYERS * PER_TOKEN_LAYER * final
    assert row["kv_tokens_after_prefill"] == kept_after_prefill(method, 160, CFG)
    assert row["steps"] == CFG.steps
    if method != PLAIN:  # the core's own accounting agrees with the tensors
        assert row["kv_prefill_bytes_peak"] == PER_TOKEN_LAYER * (160 + (slots if method != "none" else 160))


def test_batch_figures_are_per_sequence(tiny):
    model, prompts = tiny
    cases = [Case("sdpa", "snapstream", 96, 1), Case("sdpa", "snapstream", 96, 2), Case("sdpa", PLAIN, 64, 2)]
    one, two, ref = measure_group(model, prompts, cases, CFG)
    assert two["kv_bytes_final"] == one["kv_bytes_final"] == LAYERS * PER_TOKEN_LAYER * 80
    assert ref["kv_bytes_final"] == LAYERS * PER_TOKEN_LAYER * (64 + STEPS)
    assert two["steps"] == ref["steps"] == CFG.steps and two["batch"] == 2


def test_interleaved_decode_gives_the_same_tokens_as_alone(tiny):
    """Decoding cases step-interleaved must not mix their caches: each greedy stream equals its solo run."""
    model, prompts = tiny
    cases = [Case("sdpa", "snapstream", 160), Case("sdpa", PLAIN, 160), Case("sdpa", "none", 160)]
    together = measure_group(model, prompts, cases, CFG, keep_tokens=True)
    alone = [measure_group(model, prompts, [c], CFG, keep_tokens=True)[0] for c in cases]
    assert [r["tokens"] for r in together] == [r["tokens"] for r in alone]
    assert together[1]["tokens"] == together[2]["tokens"]  # none through the core == plain transformers


def test_plan_groups_methods_with_their_references():
    groups = plan(CFG, max_positions=4096)
    reps = [[g for g in groups if g.rep == rep] for rep in range(CFG.reps)]
    assert [sorted(map(repr, g.cases)) for g in reps[0]] == [sorted(map(repr, g.cases)) for g in reps[1]]
    at_160 = [g for g in reps[0] if g.name == "context" and g.context == 160][0]
    assert len(set(at_160.cases)) == len(at_160.cases)  # each case once
    assert at_160.cases[0] != [g for g in reps[1] if g.context == 160][0].cases[0]  # the order rotates
    assert Case("sdpa", PLAIN, 64) in at_160.cases  # the reference of snapkv/snapstream (their kept size)
    assert Case("sdpa", PLAIN, 80) in at_160.cases  # ... of streaming_llm (sinks + recent)
    assert Case("sdpa", PLAIN, 160) in at_160.cases  # ... of none
    batch = [g for g in reps[0] if g.name == "batch"][0]
    assert set(batch.cases) >= {Case("sdpa", "snapstream", 96, 2), Case("sdpa", PLAIN, 64, 2)}


def test_contexts_fit_the_model_positions():
    groups = plan(CFG.with_(contexts=(96, 8192)), max_positions=1024)
    assert max(c.context for g in groups for c in g.cases) == 1024 - STEPS - 1
    assert parse_tokens("1k, 2k,4096") == (1024, 2048, 4096)


def test_bad_knobs_name_the_field():
    with pytest.raises(ValueError, match="bench.prompt_budget"):
        CFG.with_(prompt_budget=8)
    with pytest.raises(ValueError, match="bench.methods"):
        CFG.with_(methods=("no_such_method",))
    with pytest.raises(ValueError, match="bench.compiled"):
        CFG.with_(methods=("snapstream",), compiled=("none",))


@pytest.mark.slow  # 19 s on 2 cores (make test stays under 10 minutes)
def test_run_writes_tables_and_figures(tmp_path):
    argv = ["--model", "tiny_llama", "--contexts", "96,160", "--steps", "3", "--reps", "1",
            "--prompt-budget", "64", "--recent", "16", "--window", "8", "--kernel", "3", "--batches", "1,2",
            "--batch-context", "96", "--compile-backend", "eager", "--compiled", "none,snapstream",
            # kivi's default groups of 32 channels do not divide tiny_llama's head dim (16): its cases would fail
            "--methods", ",".join(m for m in METHODS if m != "kivi"),
            "--out", str(tmp_path)]  # fmt: skip
    assert run.main(argv) == 0
    summary = list(csv.DictReader((tmp_path / "summary.csv").open()))
    by = {(r["method"], r["context"], r["batch"]): r for r in summary if r["group"] == "ctx160"}
    assert float(by[("snapstream", "160", "1")]["kv_full_over_this"]) == pytest.approx((160 + STEPS) / 80)
    figs = json.loads((tmp_path / "figures.json").read_text())["sdpa"]
    at_160 = [c for c in figs["per_context"] if c["context"] == 160][0]
    assert at_160["kv_within_1pct"] and at_160["prefill_peak_within_bound"]
    assert set(figs["batch"]["tokens_per_s"]) == {"1", "2"}
    assert (tmp_path / "figures.md").read_text().startswith("# SnapStream benchmark")
    assert torch.isfinite(torch.tensor(float(by[("plain", "64", "1")]["decode_ms_per_token"])))
    assert float(by[("snapstream", "160", "1")]["limit_context"]) == 64  # compared with plain@64 of its own group
    comp = figs["per_context"][-1]["compiled"]
    assert all(comp["methods"][m]["compiled_vs_floor"] > 0 for m in ("none", "snapstream"))
    assert all(f["eager_vs_floor"] > 0 for f in comp["methods"].values())
    assert comp["full_compiled_over_snapstream_compiled"] > 0
    assert all(comp["methods"][m]["compiled_vs_matmul"] > 0 for m in ("none", "snapstream"))
    assert all(f["matmul_ms"] > 0 for f in comp["methods"].values())
    assert "compiled × matmul" in (tmp_path / "figures.md").read_text()
    assert float(by[("snapstream+compiled", "160", "1")]["kv_full_over_this"]) > 1  # the ring, compiled too
    batch = list(csv.DictReader((tmp_path / "engine_batch.csv").open()))  # the engine at 8 rows vs 1
    assert [int(r["rows"]) for r in batch] == [1, 8]
    assert all(int(r["tokens"]) == 8 * 3 and int(r["prefills"]) == 8 and float(r["tokens_per_s"]) > 0 for r in batch)
    assert "gen.rows=8" in (tmp_path / "figures.md").read_text()


@pytest.mark.parametrize("method", ["none", "snapkv", "streaming_llm", "snapstream"])
def test_a_compiled_case_decodes_the_eager_tokens_and_holds_the_same_kv(tiny, method):
    model, prompts = tiny
    cases = [Case("sdpa", method, 160), Case("sdpa", method + "+compiled", 160)]
    eager, compiled = measure_group(model, prompts, cases, CFG, keep_tokens=True)
    assert compiled["compiled"] and not eager["compiled"]
    assert compiled["tokens"] == eager["tokens"]
    assert compiled["kv_tokens_final"] == eager["kv_tokens_final"]
    assert compiled["floor_bytes"] == eager["floor_bytes"]
    assert compiled["matmul_ms"] == eager["matmul_ms"] > 0  # one timing per group and batch


def test_each_timed_round_gets_the_floor_of_its_own_faster_reading(tiny, monkeypatch):
    """The bandwidth is read before the first timed round and after each one; a round's floor uses the faster of its
    two readings, and a case's floor is the mean over its rounds (the memory's speed drifts within a group)."""
    from bench import measure

    readings = iter([40e9, 50e9, 30e9, 20e9] + [1.0] * 10)  # CFG.steps = 3 timed rounds: 4 readings
    taken = []

    class Probe:
        def __init__(self, device):
            pass

        def __call__(self):
            taken.append(next(readings))
            return taken[-1]

    monkeypatch.setattr(measure, "BandwidthProbe", Probe)
    model, prompts = tiny
    rows = measure_group(model, prompts, [Case("sdpa", "snapstream", 160), Case("sdpa", "none", 160)], CFG)
    assert taken == [40e9, 50e9, 30e9, 20e9]
    for row in rows:
        floors = [row["floor_bytes"] / bw for bw in (50e9, 50e9, 30e9)]  # max of each round's two readings
        assert row["floor_ms"] == pytest.approx(1000 * sum(floors) / 3)
        assert row["decode_vs_floor"] == pytest.approx(row["decode_ms_per_token"] / row["floor_ms"])
        assert row["bandwidth_gbs"] == pytest.approx(row["floor_bytes"] / (row["floor_ms"] / 1000) / 1e9)


def test_the_matmul_reference_runs_every_weight_matrix_once(tiny, monkeypatch):
    from bench import floor

    model, _ = tiny
    seen = []
    real = torch.nn.functional.linear
    monkeypatch.setattr(floor.torch.nn.functional, "linear", lambda x, w: seen.append((x.shape, w)) or real(x, w))
    assert floor.measure_matmul(model, 3, reps=1) > 0
    weights = {id(m.weight): m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)}
    per_pass = seen[: len(weights)]
    assert len(seen) == 2 * len(weights)  # a warm pass and one timed
    assert {id(w) for _, w in per_pass} == set(weights)  # tied head once
    assert all(shape == (3, w.shape[1]) for shape, w in per_pass)


def test_the_floor_counts_weights_once_and_the_kv_held(tiny):
    model, _ = tiny
    cfg = model.config
    emb = cfg.vocab_size * cfg.hidden_size * 4
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    all_params = sum(p.numel() for p in model.parameters()) * 4
    assert weight_bytes(model) == (all_params if tied else all_params - emb + cfg.hidden_size * 4)
    assert kv_bytes_per_token(model) == LAYERS * PER_TOKEN_LAYER
    assert floor_bytes(model, 100, 3) == weight_bytes(model) + 3 * 100 * LAYERS * PER_TOKEN_LAYER


def test_methods_are_built_by_their_classes_at_one_footprint():
    """``from_bench`` gives what the bench always measured: pure SnapKV (sinks=0), SnapStream with the bench's
    sinks, StreamingLLM at SnapStream's footprint (sinks + prompt_budget + recent - sinks)."""
    from bench.cases import build_method
    from snapstream_core.methods import NoCompression, SnapKV, SnapStream, StreamingLLM

    assert build_method("none", CFG) == NoCompression()
    assert build_method("snapkv", CFG) == SnapKV(prompt_budget=64, window=8, kernel=3)
    assert build_method("snapstream+compiled", CFG) == SnapStream(prompt_budget=64, recent=16, window=8, kernel=3)
    assert build_method("streaming_llm", CFG) == StreamingLLM(sinks=4, recent=64 + 16 - 4)
    assert [kept_after_prefill(m, c, CFG) for m in ("snapkv", "streaming_llm", PLAIN) for c in (50, 160)] == [
        50, 64, 50, 80, 50, 160
    ]
    with pytest.raises(ValueError, match="bench.methods: unknown method 'nope'"):
        build_method("nope", CFG)


def test_bench_methods_are_the_registry(monkeypatch):
    from snapstream_core.methods import METHODS
    from tests.test_new_method import KeepFirst

    assert BenchConfig().methods == BenchConfig().compiled == tuple(METHODS)
    with pytest.raises(ValueError, match="bench.methods: 'keep_first' is not one of"):
        CFG.with_(methods=("none", "keep_first"), compiled=())
    monkeypatch.setitem(METHODS, "keep_first", KeepFirst)
    assert "keep_first" in BenchConfig().methods and CFG.with_(methods=("none", "keep_first"), compiled=())


def test_a_registered_toy_method_is_a_bench_case_with_its_kept_size(tiny, monkeypatch):
    from bench.cases import build_method, context_group
    from snapstream_core.methods import METHODS
    from tests.test_new_method import KeepFirst

    monkeypatch.setitem(METHODS, "keep_first", KeepFirst)
    cfg = CFG.with_(methods=("none", "keep_first"), compiled=())
    assert build_method("keep_first", cfg) == KeepFirst()  # no bench knob is a field of it: its defaults
    assert kept_after_prefill("keep_first", 160, cfg) == KeepFirst().first_k == 16
    assert Case("sdpa", PLAIN, 16) in context_group(cfg, "sdpa", 160)  # its physical reference
    model, prompts = tiny
    (row,) = measure_group(model, prompts, [Case("sdpa", "keep_first", 160)], cfg)
    assert row["status"] == "ok" and row["kv_tokens_after_prefill"] == 16
    assert row["kv_bytes_after_prefill"] == LAYERS * PER_TOKEN_LAYER * 16
    assert row["kv_bytes_final"] == LAYERS * PER_TOKEN_LAYER * (16 + STEPS)


@pytest.mark.parametrize("argv,message", [
    (["--methods", "snapkvv"], "bench.methods: 'snapkvv' is not one of"),
    (["--contexts", "1q"], "bench.contexts: cannot read '1q'"),
])
def test_a_bad_knob_is_one_line_and_exit_2_before_any_model_loads(argv, message, caplog, monkeypatch):
    monkeypatch.setattr(run, "Runner", None)  # a model load would fail on calling it
    assert run.main(argv) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0]


def test_the_compiled_cpu_cases_get_the_bench_kernels_unless_turned_off():
    from bench.cpu_decode import KERNELS
    from bench.measure import kernels

    cfg, _ = run.parse_args([])
    assert cfg.cpu_kernels and kernels(cfg) is KERNELS
    off, _ = run.parse_args(["--no-cpu-kernels"])
    assert not off.cpu_kernels and kernels(off) is None
    assert kernels(BenchConfig(device="cuda")) is None  # CPU kernels only on the CPU
