"""A job whose data or weights come from an unreachable hub fails in seconds with one line naming the knob and exit
2 (no retry loop), and a model already in the local cache loads without the hub. The hub is a closed local port;
HF_HUB_OFFLINE is unset, as on a user's machine whose network is down."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runner_utils import ROOT

CLOSED = "http://127.0.0.1:9"  # discard: nobody serves it, a connection is refused at once
LIMIT_S = 12.0  # huggingface_hub's retry loop sleeps 1+2+4+8+8 s per file before it gives up: the time allowed
# beyond the offline refusal's own (``limit_s``)


def _env(tmp_path: Path) -> dict[str, str]:
    drop = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HF_DATASETS_CACHE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "HF_ENDPOINT": CLOSED, "HF_HOME": str(tmp_path / "hf")}  # an empty cache: nothing to fall back on


def _job(args: list[str], tmp_path: Path, offline: bool = False) -> tuple[subprocess.CompletedProcess, float]:
    env = {**_env(tmp_path), **({"HF_HUB_OFFLINE": "1"} if offline else {})}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "evals.run", *args, "task.limit=1", f"out_root={tmp_path / 'out'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=180, env=env)
    return proc, time.monotonic() - start


@pytest.fixture(scope="module")
def limit_s(tmp_path_factory) -> float:
    """LIMIT_S on top of what the same refusal costs with HF_HUB_OFFLINE=1 (no request at all) on this machine now:
    a retry loop's sleeps show on any machine, a loaded machine's slower start does not fail the test."""
    _, offline = _job(["task=aime24", "model=tiny_llama", "task.source=hub"], tmp_path_factory.mktemp("offline"),
                      offline=True)
    return LIMIT_S + offline


@pytest.mark.parametrize("task, what", [
    ("aime24", "HuggingFaceH4/aime_2024"),
    ("longbench_v2", "THUDM/LongBench-v2"),
    ("livecodebench", "livecodebench/code_generation_lite/test.jsonl"),
])
def test_an_unreachable_hub_dataset_is_one_line_naming_task_source(task, what, tmp_path, limit_s):
    proc, seconds = _job([f"task={task}", "model=tiny_llama", "task.source=hub"], tmp_path)
    assert proc.stderr.strip().splitlines() == [
        f"error: task.source: hub dataset {what} unreachable (ConnectError at {CLOSED}) and not in the local cache; "
        "set task.path=FILE (a local export) or task.source=bundled (the small bundled sample)"], proc.stderr
    assert proc.returncode == 2 and seconds < limit_s, (proc.returncode, seconds)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("samples.jsonl"))


def test_an_unreachable_hub_model_is_one_line_naming_model_hub_id(tmp_path, limit_s):
    proc, seconds = _job(["task=aime24", "model=llama31_8b_instruct", "task.source=bundled"], tmp_path)
    assert proc.stderr.strip().splitlines() == [
        f"error: model.hub_id: meta-llama/Llama-3.1-8B-Instruct unreachable (ConnectError at {CLOSED}) and not in "
        "the local Hugging Face cache; pass model.source=path model.path=DIR, or download it where the hub answers"
    ], proc.stderr
    assert proc.returncode == 2 and seconds < limit_s, (proc.returncode, seconds)


def test_a_cached_hub_model_loads_without_the_hub(tmp_path, tiny_llama_dir, limit_s):
    """A saved tiny Llama laid out as a hub cache snapshot: checked, identified and loaded with the hub down."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "hub" / "models--local--tiny"
    shutil.copytree(tiny_llama_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    script = (
        "from omegaconf import OmegaConf\n"
        "from evals.config.models import check_model_config, load_model, weights_identity\n"
        "cfg = OmegaConf.create({'source': 'hub', 'hub_id': 'local/tiny', 'revision': None, 'dtype': 'float32',"
        " 'device': 'cpu', 'attn_implementation': 'sdpa', 'path': None})\n"
        "check_model_config(cfg)\n"
        "model, tok = load_model(cfg)\n"
        "print('OK', weights_identity(cfg), type(model).__name__, len(tok))\n"
    )
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env=_env(tmp_path))
    seconds = time.monotonic() - start
    assert f"OK hub:local/tiny@{commit} LlamaForCausalLM 49152" in proc.stdout, proc.stdout + proc.stderr
    assert "thrown while requesting" not in proc.stderr and seconds < limit_s + 8, (seconds, proc.stderr)  # no request


HUB_TASK = """task: hub_sample
dataset_path: someorg/some_dataset
test_split: test
output_type: generate_until
doc_to_text: "{{question}}"
doc_to_target: answer
metric_list:
  - metric: exact_match
"""


def test_an_unreachable_lm_eval_dataset_is_the_same_one_probe_and_one_line(tmp_path, limit_s):
    """``task=lm_eval`` asks the hub as the other tasks do: one probe, then the datasets cache alone, then one line
    naming ``task.name`` (not huggingface_hub's retry loop and a traceback)."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "hub_sample.yaml").write_text(HUB_TASK)
    proc, seconds = _job(["task=lm_eval", "task.name=hub_sample", f"task.include_path={tasks}",
                          "task.include_defaults=false", "model=tiny_llama"], tmp_path)
    assert proc.stderr.strip().splitlines() == [
        f"error: task.name: the dataset of lm-eval task 'hub_sample' is unreachable (ConnectError at {CLOSED}) and "
        "not in the local cache; run it once where the hub answers (the datasets cache is then read offline), or give "
        "task.include_path a task YAML whose dataset is a local file"], proc.stderr
    assert proc.returncode == 2 and seconds < limit_s, (proc.returncode, seconds)
