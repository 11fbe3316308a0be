"""Per-sample geometry (did compression drop anything, mean KV held over decoding), whether a run keeps every token,
and throughput as generated tokens per wall second of generation, in the headline and results.json."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pandas as pd
import pytest

from evals.record.geometry import dropped, keeps_every_token, mean_held, row_geometry
from evals.record.throughput import GenClock
from evals.report.run_headline import headline_text, run_results
from snapstream_core.methods import METHODS

SHAPES = [(10, 0), (10, 5), (100, 3), (100, 50), (30, 200), (64, 1), (500, 1000)]


@pytest.mark.parametrize("name", list(METHODS))
def test_mean_held_is_the_mean_of_the_footprint_over_decoding_steps(name):
    method = METHODS[name]()  # every registered method, with its defaults
    for T, G in SHAPES:
        brute = sum(method.tokens_held(T, k) for k in range(1, G + 1)) / G if G else method.tokens_held(T, 0)
        assert mean_held(method, T, G) == pytest.approx(brute), (name, T, G)
        assert dropped(method, T, G) == (method.footprint(T, G) < T + G)


def test_a_ring_holds_its_size_for_most_of_a_long_generation_and_the_full_cache_never_drops():
    snap = METHODS["snapstream"](prompt_budget=64, recent=16)
    # 65..72 over 8 steps; 64 + 16 slots (the ring's free slots are allocated)
    assert row_geometry(snap, 200, 8) == {"compressed": True, "kv_tokens_mean": 68.5, "kv_slots_peak": 80}
    assert row_geometry(snap, 20, 8) == {"compressed": False, "kv_tokens_mean": 24.5, "kv_slots_peak": 36}  # whole
    assert row_geometry(snap, 20, 100)["compressed"]  # the ring overflowed
    assert row_geometry(METHODS["none"](), 5000, 100)["compressed"] is False
    # a replay without lengths
    assert row_geometry(snap, None, 8) == {"compressed": None, "kv_tokens_mean": None, "kv_slots_peak": None}


def test_keeps_every_token_from_the_method_and_the_measured_lengths():
    knobs = {"method": "snapstream", "prompt_budget": 1024, "recent": 256}
    assert keeps_every_token(knobs, [(150, 200), (300, 256)]) is True  # prompts kept whole, ring never full
    assert keeps_every_token(knobs, [(150, 200), (1200, 10)]) is False  # a prompt beyond the budget
    assert keeps_every_token(knobs, [(150, 512)]) is False  # 512 new tokens through a 256-token ring
    assert keeps_every_token({"method": "none"}, [(150, 512)]) is None  # the full cache is the reference
    assert keeps_every_token(knobs, [(150, None)]) is None
    assert keeps_every_token({"method": "no_such"}, [(1, 1)]) is None


def test_gen_clock_counts_the_time_inside_generation_not_scoring():
    def produce():
        for _ in range(3):
            time.sleep(0.02)
            yield [(None, SimpleNamespace(gen_tokens=10))]

    clock = GenClock(rows="auto")
    for _batch in clock.timed(produce()):
        time.sleep(0.3)  # scoring: not generation (0.9 s in all: a wide gap that oversleeping at load 30 keeps)
    gen = clock.meta({"decode_rows": {"rows": 8}})["generation"]
    assert (gen["gen_tokens"], gen["samples"], gen["rows"]) == (30, 3, 8)
    assert 0.06 <= gen["wall_s"] < 0.6
    assert gen["tokens_per_s"] == pytest.approx(30 / gen["wall_s"], rel=1e-3)  # wall_s is rounded
    assert GenClock(measured=False).meta()["generation"]["tokens_per_s"] is None


def _run_dir(tmp_path, rows, meta_extra):
    pd.DataFrame([{"model": "m", "task": "needle", "method": "snapstream", "metric": "accuracy", "group": "all",
                   "value": 50.0, "n": 2, "unit": "%", "ci_lo": 10.0, "ci_hi": 90.0}]).to_csv(
        tmp_path / "summary.csv", index=False)
    pd.DataFrame(rows).to_csv(tmp_path / "samples.csv", index=False)
    meta = {"identity": {"compression": {"method": "snapstream", "prompt_budget": 1024, "recent": 256}},
            "config": {"model": {"name": "m"}}, **meta_extra}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    return tmp_path


def test_the_headline_says_keeps_every_token_and_reports_throughput_beside_latency(tmp_path):
    """8 rows held at once: each sample's latency spans the batch (4 s), the generation took 5 s of wall time for
    800 tokens: 160 tokens/s, not 800 / (8 * 4) = 25."""
    rows = [{"item_id": f"i{k}", "prompt_tokens": 150, "gen_tokens": 100, "latency_s": 4.0, "correct": k % 2}
            for k in range(8)]
    run = _run_dir(tmp_path, rows, {"generation": {"wall_s": 5.0, "gen_tokens": 800, "samples": 8, "rows": 8,
                                                   "measured": True, "tokens_per_s": 160.0}})
    res = run_results(run)
    assert res["keeps_every_token"] is True and res["gen_tokens_per_s"] == 160.0 and res["latency_s_mean"] == 4.0
    assert res["throughput"]["rows"] == 8
    text = headline_text(res)
    assert "keeps every token (= full cache)" in text
    assert "throughput 160 generated tokens/s" in text and "rows held 8" in text and "latency 4 s per sample" in text
    rows[0]["prompt_tokens"] = 5000  # one prompt beyond the budget: compression acted
    res = run_results(_run_dir(tmp_path, rows, {}))
    assert res["keeps_every_token"] is False and res["gen_tokens_per_s"] is None
    assert "keeps every token" not in headline_text(res)


def test_the_sweep_table_carries_throughput_with_rows_and_latency(tmp_path, caplog):
    from evals.progress import SweepProgress

    rows = [{"item_id": f"i{k}", "prompt_tokens": 150, "gen_tokens": 100, "latency_s": 4.0, "correct": 1}
            for k in range(8)]
    res = run_results(_run_dir(tmp_path, rows, {"generation": {"wall_s": 5.0, "gen_tokens": 800, "samples": 8,
                                                               "rows": 8, "measured": True, "tokens_per_s": 160.0}}))
    sweep = SweepProgress()
    sweep.jobs = [("compression=snapstream", res, "done")]
    with caplog.at_level("INFO", logger="evals.sweep"):
        sweep.on_multirun_end(None)
    assert "throughput 160 tok/s (rows 8) · latency 4 s/sample · keeps every token (= full cache)" in caplog.text


@pytest.mark.parametrize("method, knobs, shown", [
    ("rkv", {"budget": 512, "interval": 128, "window": 8}, " (budget=512 (cache))"),  # a decode-time budget
    ("snapstream", {"prompt_budget": 128, "recent": 256, "sinks": 4}, " (prompt_budget=128 (prompt), recent=256)"),
    ("streaming_llm", {"prompt_budget": 1024, "recent": 1020}, " (prompt_budget=1024 (cache), recent=1020)"),
    ("none", {}, ""),
])
def test_the_headline_names_the_methods_own_budget_and_what_it_caps(method, knobs, shown):
    from evals.report.run_headline import budget_text

    assert budget_text(method, knobs) == shown
