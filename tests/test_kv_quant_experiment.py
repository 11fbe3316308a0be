"""``+experiment=kv_quant``: the full cache, KIVI and an eviction method (R-KV on the reasoning tasks, SnapKV on
LongBench-v2) in three arms each, composed as documented (conf/experiment/kv_quant.yaml) and costed by the planner
before anything loads, each job's storage in plan.csv."""

from __future__ import annotations

import pandas as pd
import pytest

from evals.plan.__main__ import main as plan_main
from snapstream_core.methods import METHODS
from tests.runner_utils import compose_cfg

ARMS = {  # (method, arm) -> the knobs the arm sets (the others at the method's defaults)
    ("none", "a"): {"kv_dtype": None, "kv_scale": None},
    ("none", "b"): {"kv_dtype": "fp8_e4m3", "kv_scale": "one"},
    ("none", "c"): {"kv_dtype": "fp8_e4m3", "kv_scale": "tensor"},
    ("rkv", "a"): {"budget": 1024, "kv_dtype": None},
    ("rkv", "b"): {"budget": 2048, "kv_dtype": "fp8_e4m3", "kv_scale": "one"},
    ("rkv", "c"): {"budget": 2048, "kv_dtype": None},
    ("snapkv", "a"): {"prompt_budget": 1024, "kv_dtype": None},
    ("snapkv", "b"): {"prompt_budget": 2048, "kv_dtype": "fp8_e4m3", "kv_scale": "one"},
    ("snapkv", "c"): {"prompt_budget": 2048, "kv_dtype": None},
    ("kivi", "a"): {"bits": 4, "kv_dtype": None},
    ("kivi", "b"): {"bits": 2, "kv_dtype": None},
    ("kivi", "c"): {"bits": 2, "kv_dtype": None},
}
NEEDS_KIVI = pytest.mark.skipif("kivi" not in METHODS, reason="the kivi method is not registered in this checkout")


@pytest.mark.parametrize(("method", "arm"), [pytest.param(*k, marks=[NEEDS_KIVI] if k[0] == "kivi" else [])
                                             for k in ARMS])
def test_each_arm_sets_what_the_experiment_says(method, arm):
    cfg = compose_cfg(["+experiment=kv_quant", f"compression={method}", f"kv_quant.arm={arm}"])
    for knob, value in ARMS[method, arm].items():
        assert cfg.compression[knob] == value, (method, arm, knob)
    fp8 = ARMS[method, arm]["kv_dtype"] is not None
    assert cfg.compression.tag.endswith(f"-kvfp8_e4m3-ks{ARMS[method, arm].get('kv_scale')}") == fp8


def test_the_reasoning_arms_plan_with_their_storage(tmp_path):
    """The full cache and R-KV on both models and both reasoning tasks (KIVI's arms: the test below)."""
    assert plan_main(["-m", "+experiment=kv_quant", "compression=none,rkv", f"out_root={tmp_path}"]) == 0
    plan = pd.read_csv(tmp_path / "plan.csv")
    assert len(plan) == 24 and plan["run_dir"].nunique() == 24
    assert set(plan["kv_storage"]) == {"auto", "fp8_e4m3/one", "fp8_e4m3/tensor"}
    full = plan[plan["compression"] == "none"].set_index(["model", "task", "kv_storage"])
    for model, task in {(m, t) for m, t, _ in full.index}:
        assert full.loc[(model, task, "fp8_e4m3/one"), "rows"] > full.loc[(model, task, "auto"), "rows"]
    rkv = plan[plan["compression"] == "rkv"]
    assert sorted(set(zip(rkv["prompt_budget"], rkv["kv_storage"]))) == [(1024, "auto"), (2048, "auto"),
                                                                          (2048, "fp8_e4m3/one")]


def test_the_longbench_command_plans_snapkv_for_eviction(tmp_path):
    assert plan_main(["-m", "+experiment=kv_quant", "task=longbench_v2", "compression=none,snapkv",
                      f"out_root={tmp_path}"]) == 0
    plan = pd.read_csv(tmp_path / "plan.csv")
    assert len(plan) == 12 and set(plan["task"]) == {"longbench_v2"}
    assert set(plan["kv_storage"]) == {"auto", "fp8_e4m3/one", "fp8_e4m3/tensor"}


@NEEDS_KIVI
@pytest.mark.slow  # 10 s; the README's `python -m evals.plan -m +experiment=kv_quant` is planned by test_docs_commands
def test_the_whole_grid_plans(tmp_path):
    assert plan_main(["-m", "+experiment=kv_quant", f"out_root={tmp_path}"]) == 0
    plan = pd.read_csv(tmp_path / "plan.csv")
    assert len(plan) == 36 and plan["run_dir"].nunique() == 32  # KIVI's arms b and c share one directory
    assert {s for s in plan["kv_storage"] if s.startswith("kivi")} == {"kivi4/g32/r128", "kivi2/g32/r128"}
