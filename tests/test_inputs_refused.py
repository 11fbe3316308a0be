
"""Configuration values are used or refused: a wrong boolean, integer or number, an unknown key, a conflicting or
missing input, a device or attention the machine lacks and a grading knob that cannot hold are each one line naming
the key, raised before any weights load; a ``max_new_tokens`` past the model's positions is a warning."""

from __future__ import annotations

import importlib.util
import json
import logging

import pytest
import torch
from omegaconf import OmegaConf

from evals.config.spec import check
from snapstream_core.generate import SamplingConfig
from tasks import get_task
from tasks.livecodebench.grader import GradeSettings
from tests.runner_utils import TINY, compose_cfg
from tests.small_runs import NEEDLE

REPLAY = [*TINY, "task=aime24", "backend=replay"]


def refused(args: list[str], match: str) -> str:
    with pytest.raises(ValueError) as err:
        check(compose_cfg(args))
    text = str(err.value)
    assert match in text and "\n" not in text, text
    return text


@pytest.mark.parametrize("value", ["no", "off", "maybe", "0", "yes"])
def test_overwrite_takes_only_true_or_false(value):
    """``overwrite=no`` is refused, not read as true (a non-empty string) with finished results deleted."""
    refused([*NEEDLE, f"overwrite={value}"], "overwrite: expected true or false")


def test_hydra_boolean_forms_are_accepted():
    for value in ("true", "false", "True", "FALSE"):
        check(compose_cfg([*NEEDLE, f"overwrite={value}"]))


def test_backend_partial_takes_only_true_or_false(tmp_path):
    """``backend.partial=maybe`` is refused, not taken as true."""
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"item_id": "x", "completion": "y"}) + "\n")
    refused([*REPLAY, f"backend.path={path}", "backend.partial=maybe"], "backend.partial: expected true or false")


@pytest.mark.parametrize("override, match", [
    ("gen.max_new_tokens=2.5", "gen.max_new_tokens: expected an integer, got 2.5"),  # not truncated to 2
    ("gen.seed=abc", "gen.seed: expected an integer, got 'abc'"),  # the line names the field
    ("gen.n_samples=100000000", "gen.n_samples: at most"),  # refused before the model loads
    ("gen.top_k=1.5", "gen.top_k: expected an integer"),
    ("gen.temperature=hot", "gen.temperature: expected a finite number"),
    ("+gen.max_tokens=1", "gen.max_tokens: no such key (did you mean max_new_tokens?)"),  # never silently ignored
    ("+foo=1", "foo: no such key"),  # never silently accepted
    ("+backend.pathh=x", "backend.pathh: no such key"),
])
def test_bad_generation_knobs_are_one_line(override, match):
    refused([*NEEDLE, override], match)


@pytest.mark.parametrize("knob", ["temperature", "top_p"])
def test_nan_and_inf_generation_knobs_are_refused(knob):
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"gen.{knob}: must be finite"):
            SamplingConfig(**{knob: value})


def test_documented_extension_points_stay_open():
    """``+task.<key>``, ``+model.<key>`` and the keys of an experiment are not refused by the key check."""
    check(compose_cfg([*NEEDLE, "+task.note=mine", "+model.note=mine"]))
    check(compose_cfg([*NEEDLE, "+experiment=smoke"]))


def test_a_given_task_path_is_not_silently_ignored(tmp_path):
    data = tmp_path / "my.jsonl"
    data.write_text(json.dumps({"id": "x", "problem": "1+1?", "answer": "2"}) + "\n")
    # given alone, the path is the source (task.source=auto); an explicit conflicting source is refused in one line
    items = get_task("aime24").load(compose_cfg([*TINY, "task=aime24", f"task.path={data}"]).task)
    assert [i.item_id for i in items] == ["x"]
    refused([*TINY, "task=aime24", "task.source=bundled", f"task.path={data}"], "task.source=path")
    refused([*TINY, "task=aime24", "task.source=path", "task.path=/nope.jsonl"], "/nope.jsonl")
    refused([*TINY, "task=aime24", "task.path=/nope.jsonl"], "/nope.jsonl")


def test_an_explicit_recent_is_never_replaced_by_the_budget():
    refused([*NEEDLE, "compression=streaming_llm", "compression.prompt_budget=128", "compression.recent=32"],
                   "compression.recent: 32 conflicts with compression.prompt_budget=128")


def test_a_family_without_a_template_is_refused_before_loading():
    refused([*TINY, "task=aime24", "model.family=qwen"], "model.family: 'qwen' has no prompt template")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a CPU-only torch")
def test_cuda_on_a_cpu_torch_is_one_line():
    refused([*NEEDLE, "model.device=cuda"], "model.device: cuda")


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed")
def test_flash_attention_without_flash_attn_is_one_line():
    refused([*NEEDLE, "model.attn_implementation=flash_attention_2"], "needs the flash-attn package")


@pytest.mark.parametrize("knob, value, message", [
    ("timeout_s", float("inf"), "task.timeout_s: expected a finite number"),
    ("timeout_s", float("nan"), "task.timeout_s: expected a finite number"),
    ("max_output_mb", 10_000_000, r"task.max_output_mb: must be a finite number in \[1, 1024\]"),
    ("memory_mb", 2048.5, "task.memory_mb: expected a finite integer"),
    ("python", "/usr", "task.python: not an executable file"),
])
def test_impossible_grading_knobs_are_refused(knob, value, message):
    with pytest.raises(ValueError, match=message):
        GradeSettings.from_cfg(OmegaConf.create({knob: value}))


def test_a_python_that_is_not_python_is_refused_naming_the_field():
    """``task.python=/bin/true`` is refused by the check naming the field, not later in the sandbox probe."""
    with pytest.raises(ValueError, match="task.python: /bin/true is not a Python 3.8"):
        GradeSettings.from_cfg(OmegaConf.create({"python": "/bin/true"}))


def test_a_log_likelihood_task_through_lm_eval_is_refused_before_loading(capsys):
    from evals.lm_eval_cli import precheck
    from tests.lm_eval_helpers import MC_TASK, TASKS_DIR

    with pytest.raises(SystemExit) as exit_:
        precheck(["run", "--model", "snapstream", "--model_args", "pretrained=/nonexistent", "--tasks", MC_TASK,
                  "--include_path", str(TASKS_DIR)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "is a log-likelihood task" in err[0], err


def test_max_new_tokens_past_the_model_positions_warns(caplog):
    from evals.execute.backends.base import Request
    from evals.execute.backends.hf import HFBackend
    from snapstream_core import compression_from_config
    from tasks.base import Prompt

    cfg = compose_cfg(["model=tiny_llama", "model.arch.max_position_embeddings=24"])
    backend = HFBackend(cfg.model, compression_from_config({"method": "none"}), SamplingConfig(max_new_tokens=16))
    with caplog.at_level(logging.WARNING, logger="evals.execute.backends.hf"):
        backend.generate([Request(None, Prompt("hello there, a prompt of about a dozen tokens"), (0,))])
    assert "goes past the 24 positions tiny_llama was trained for" in caplog.text
