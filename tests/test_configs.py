"""Every config group option composes and builds what it names, without loading weights."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from evals.cli import options
from snapstream_core import METHODS, compression_from_config
from tasks import TASKS, get_task
from tasks.source import source_of
from tests.runner_utils import compose_cfg
from tests.runner_utils import plan_cfg as plan


@pytest.mark.parametrize("name", options("compression"))
def test_every_compression_option_builds_its_method(name):
    cfg = compose_cfg([f"compression={name}"])
    method = compression_from_config(OmegaConf.to_container(cfg.compression, resolve=True))
    assert method.method == name
    assert set(METHODS) == set(options("compression"))


@pytest.mark.parametrize("name", options("task"))
def test_every_task_option_is_a_registered_task_with_a_tag(name):
    cfg = compose_cfg([f"task={name}"])
    module_name = cfg.task.get("module") or cfg.task.name  # lm_eval: one module, the lm-eval task in task.name
    assert module_name in TASKS
    module = get_task(module_name)
    assert cfg.task.tag and "$" not in str(cfg.task.tag)
    assert hasattr(module, "PRIMARY_METRIC")


@pytest.mark.parametrize("name", options("model"))
def test_every_model_option_has_the_fields_tasks_read(name):
    cfg = compose_cfg([f"model={name}"])
    for key in ("name", "source", "family", "thinking", "max_context", "dtype", "attn_implementation"):
        assert key in cfg.model


def test_generation_precedence_cli_over_model_over_task():
    lb = compose_cfg(["task=longbench_v2"]).gen
    assert (lb.temperature, lb.max_new_tokens) == (0.1, 128)  # the benchmark's defaults
    r1 = compose_cfg(["task=longbench_v2", "model=r1_distill_llama_8b"]).gen
    assert (r1.temperature, r1.top_p, r1.max_new_tokens) == (0.6, 0.95, 32768)  # the R1 family wins
    cli = compose_cfg(["task=longbench_v2", "model=r1_distill_llama_8b", "gen.temperature=0.3"]).gen
    assert cli.temperature == 0.3


def test_the_smoke_experiments_size_every_task():
    needle = compose_cfg(["+experiment=smoke"])  # part 1: the measured needle sweep
    assert needle.model.name == "smollm2_135m" and needle.task.name == "needle" and needle.task.limit == 6
    assert (needle.task.depth_lo, needle.task.depth_hi) == (0.05, 0.95)  # early, middle and late keys
    plan(needle)
    for task in ("longbench_v2", "aime24", "livecodebench"):  # part 2: pipeline checks
        cfg = compose_cfg(["+experiment=smoke_pipeline", f"task={task}"])
        assert cfg.model.name == "smollm2_135m" and source_of(cfg.task) == "bundled"
        assert cfg.task.limit <= 2 and cfg.gen.max_new_tokens <= 96 and cfg.gen.n_samples == 1
        assert cfg.out_root == needle.out_root  # one report for both parts
        plan(cfg)  # every knob valid, the data reachable


def test_the_paper_experiment_resolves_per_model_and_task_settings():
    r1_aime = compose_cfg(["+experiment=paper", "model=r1_distill_llama_8b", "task=aime24",
                           "compression.prompt_budget=2048"])
    assert r1_aime.gen.n_samples == 64 and r1_aime.compression.recent == 2048  # R1 card: pass@1 over 64, cons@64
    assert source_of(r1_aime.task) == "hub"
    llama_lb = compose_cfg(["+experiment=paper", "task=longbench_v2"])
    assert llama_lb.gen.n_samples == 1 and llama_lb.compression.recent == 1024
    assert llama_lb.model.hub_id == "meta-llama/Llama-3.1-8B-Instruct"
