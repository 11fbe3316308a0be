"""The engine through the runner: sampled completions do not depend on gen.batch_size, gen.rows or resume; rows
are written as samples end; gen.rows is checked before any model loads."""

from __future__ import annotations

import json

import pytest

from evals.run import run
from tests.runner_utils import TINY, compose_cfg

NEEDLE = ["task=needle", "task.context_tokens=256", "task.n_items=3"]
SAMPLED = ["gen.n_samples=3", "gen.temperature=0.8", "gen.top_p=0.95", "gen.max_new_tokens=12"]
SNAP = ["compression=snapstream", "compression.prompt_budget=64", "compression.recent=8", "compression.window=16"]


def completions(path) -> dict[tuple[str, int], tuple[str, int]]:
    rows = [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]
    return {(r["item_id"], r["sample_idx"]): (r["completion"], r["gen_tokens"]) for r in rows}


def test_sampled_completions_equal_across_batch_size_rows_and_resume(tmp_path):
    base = [*TINY, *NEEDLE, *SAMPLED, *SNAP]
    runs = {}
    for name, extra in {"b1r1": ["gen.batch_size=1", "gen.rows=1"], "b3r4": ["gen.batch_size=3", "gen.rows=4"],
                        "b1r2": ["gen.rows=2"]}.items():
        runs[name] = completions(run(compose_cfg([*base, *extra, f"hydra.run.dir={tmp_path / name}"]),
                                     tmp_path / name))
    assert len(runs["b1r1"]) == 9 and len({c for c, _ in runs["b1r1"].values()}) > 3
    assert runs["b1r1"] == runs["b3r4"] == runs["b1r2"]
    decode = json.loads((tmp_path / "b1r2" / "meta.json").read_text())["decode_rows"]
    assert decode["prefills"] == 3 and decode["kv_allocations"] == 1  # each item once; rows sized once per run
    # a run killed after some samples: keep 4 of its rows, resume with other rows
    resumed = tmp_path / "resumed"
    first = run(compose_cfg([*base, "gen.rows=3", f"hydra.run.dir={resumed}"]), resumed)
    lines = (first / "samples.jsonl").read_text().splitlines()
    (first / "samples.jsonl").write_text("\n".join(lines[:4]) + "\n")
    run(compose_cfg([*base, "gen.rows=2", f"hydra.run.dir={resumed}"]), resumed)
    assert completions(resumed) == runs["b1r1"]
    meta = json.loads((resumed / "meta.json").read_text())
    assert meta["decode_rows"]["gen.rows"] == 2 and meta["decode_rows"]["rows"] == 2


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_a_bad_gen_rows_is_one_line_naming_the_knob(tmp_path, value):
    with pytest.raises(ValueError, match="gen.rows: must be auto or an integer >= 1") as err:
        run(compose_cfg([*TINY, *NEEDLE, f"gen.rows={value}", f"out_root={tmp_path}"]))
    assert "\n" not in str(err.value)


def test_longbench_cot_second_call_runs_after_the_engine(tmp_path):
    cfg = compose_cfg([*TINY, "task=longbench_v2", "task.source=bundled", "task.cot=true", "task.limit=2",
                       "task.max_len=300", "task.cot_tokens=6", "task.answer_tokens=4", f"out_root={tmp_path}"])
    out = run(cfg)
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for r in rows:
        assert len(r["completions"]) == 2 and r["completion"] == r["completions"][1]
        assert r["gen_tokens"] > 6 - 1 and r["prompt_hash"]
    decode = json.loads((out / "meta.json").read_text())["decode_rows"]
    assert decode["engines"] == 1 and decode["kv_allocations"] == 1  # the answer calls reuse the first call's rows
    assert decode["prefills"] == 4 and decode["compiles"] == 0  # eager on the CPU


@pytest.mark.slow
def test_longbench_cot_compiled_with_inductor_is_one_engine_and_one_compile(tmp_path):
    """The run and its answer calls, compiled with Inductor: one engine, one graph (the same count with Dynamo's
    eager backend, fast: tests/test_engine_settings.py)."""
    cfg = compose_cfg([*TINY, "task=longbench_v2", "task.source=bundled", "task.cot=true", "task.limit=2",
                       "task.max_len=300", "task.cot_tokens=6", "task.answer_tokens=4", "gen.compile=true",
                       f"out_root={tmp_path}"])
    out = run(cfg)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["decode_compile"]["compiled"] is True
    assert meta["decode_rows"]["engines"] == 1 and meta["decode_rows"]["compiles"] == 1
