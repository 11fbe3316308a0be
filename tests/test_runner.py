"""The runner end to end on tiny_llama: run directory contents, resume after kill -9, replay, clear errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from evals.cli import precheck
from evals.record.rows import row_columns
from evals.run import run
from tests.runner_utils import ROOT, TINY, cli, compose_cfg

NEEDLE = ["task=needle", "task.context_tokens=256", "task.n_items=6"]
SNAP = ["compression=snapstream", "compression.prompt_budget=64", "compression.recent=8", "compression.window=16"]


def run_dir_files(path: Path) -> set[str]:
    return {p.name for p in path.iterdir()}


def test_a_run_writes_the_contract_files(tmp_path):
    cfg = compose_cfg([*TINY, *NEEDLE, *SNAP, f"out_root={tmp_path}"])
    out = run(cfg)
    assert {"samples.jsonl", "samples.csv", "summary.csv", "meta.json", "resolved_config.yaml"} <= run_dir_files(out)
    assert out.is_relative_to(tmp_path) and "snapstream-pb64-r8" in str(out)  # named by its config
    samples = pd.read_csv(out / "samples.csv")
    assert set(row_columns()) <= set(samples.columns)
    assert {"depth", "context_tokens"} <= set(samples.columns)  # the task's breakdown
    assert "completion" not in samples.columns  # long texts live in the JSONL only
    assert len(samples) == 6 and samples["kv_tokens_peak"].max() <= 64 + 8
    assert (samples[["prompt_budget", "recent", "window"]].iloc[0] == [64, 8, 16]).all()
    lines = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert all(isinstance(r["completion"], str) for r in lines)
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns[:9]) == ["model", "task", "method", "prompt_budget", "recent", "metric", "group",
                                         "value", "n"]
    assert "accuracy" in set(summary["metric"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["versions"]["transformers"] == "5.23.0"
    assert meta["decode_compile"] == {"gen.compile": "auto", "compiled": False, "first_step_s": 0.0,
                                     "record_s": 0.0}  # CPU: eager


def test_replay_of_a_runs_own_completions_reproduces_its_correct_column(tmp_path):
    cfg = compose_cfg([*TINY, *NEEDLE, "compression=none", f"out_root={tmp_path}/a"])
    out = run(cfg)
    # make one answer right, so that both outcomes are exercised
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    key = rows[0]["answer"]
    rows[0]["completion"] = f" {key}."
    replay_file = tmp_path / "completions.jsonl"
    replay_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = compose_cfg([*TINY, *NEEDLE, "backend=replay", f"backend.path={replay_file}", f"out_root={tmp_path}/b"])
    replayed = pd.read_csv(run(cfg) / "samples.csv")
    original = pd.read_csv(out / "samples.csv")
    original.loc[0, "correct"] = True
    assert replayed["correct"].tolist() == original["correct"].tolist()
    assert replayed["kv_tokens_peak"].tolist() == original["kv_tokens_peak"].tolist()  # measured columns carried


def test_replay_leaves_out_items_without_completion(tmp_path, caplog):
    replay_file = tmp_path / "c.jsonl"
    replay_file.write_text(json.dumps({"item_id": "needle-0-1", "completion": "no idea"}) + "\n")
    cfg = compose_cfg([*TINY, *NEEDLE, "backend=replay", f"backend.path={replay_file}", f"out_root={tmp_path}"])
    out = run(cfg)
    assert len(pd.read_csv(out / "samples.csv")) == 1
    assert "5 of 6 items have no completion" in caplog.text


def test_overwrite_and_a_changed_configuration(tmp_path):
    base = [*TINY, *NEEDLE, "compression=none", f"out_root={tmp_path}"]
    out = run(compose_cfg(base))
    meta = json.loads((out / "meta.json").read_text())
    meta["identity"]["task"]["seed"] = 99
    meta["fingerprint"] = "0"
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="another configuration .*task.seed"):
        run(compose_cfg(base))
    out2 = run(compose_cfg([*base, "overwrite=true"]))
    assert out2 == out and len(pd.read_csv(out / "samples.csv")) == 6


def test_kill_9_then_rerun_loses_nothing_and_duplicates_nothing(tmp_path):
    args = [*TINY, "task=needle", "task.context_tokens=1024", "task.n_items=40", *SNAP]
    interrupted = [*args, f"out_root={tmp_path}/killed"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "evals.run", *interrupted], cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"}, start_new_session=True,
    )
    deadline = time.time() + 240
    samples = None
    while time.time() < deadline:
        found = list((tmp_path / "killed").rglob("samples.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 5:
            samples = found[0]
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert samples is not None, "the run wrote no rows in time"
    written = len(samples.read_text().splitlines())
    assert written < 40, "the run finished before it could be killed"
    assert not (samples.parent / "summary.csv").exists()  # an interrupted run does not look complete
    with samples.open("a") as fh:
        fh.write('{"run_id": "torn')  # what a kill in the middle of a write leaves
    assert run(compose_cfg(interrupted)) == samples.parent  # the resume (in-process: the kill was the process part)
    run(compose_cfg([*args, f"out_root={tmp_path}/clean"]))
    resumed = pd.read_csv(samples.parent / "samples.csv")
    clean = pd.read_csv(next((tmp_path / "clean").rglob("samples.csv")))
    keys = list(zip(resumed["item_id"], resumed["sample_idx"]))
    assert len(keys) == len(set(keys)) == 40
    assert set(keys) == set(zip(clean["item_id"], clean["sample_idx"]))
    summary = pd.read_csv(samples.parent / "summary.csv")
    clean_summary = pd.read_csv(next((tmp_path / "clean").rglob("summary.csv")))
    cols = ["metric", "group", "value", "n"]
    quality = ~summary["metric"].str.startswith("mean_latency")
    pd.testing.assert_frame_equal(summary[quality][cols].reset_index(drop=True),
                                  clean_summary[quality][cols].reset_index(drop=True))


@pytest.mark.parametrize(
    "args,message",
    [
        (["compression=snapkv", "compression.prompt_budget=8"], "compression.prompt_budget: must exceed"),
        (["task=longbench_v2", "task.source=path", "task.path=BAD"], "line 2"),
        (["model=llama31_8b_instruct"], "model.hub_id: meta-llama/Llama-3.1-8B-Instruct is not in the local"),
        (["backend=replay", "backend.path=/nonexistent.jsonl"], "backend.path: no such file"),
        (["backend=replay"], "backend.path: Missing mandatory value"),
        (["gen.temperature=-1"], "gen.temperature: must be >= 0"),
        (["gen.batch_size=0"], "gen.batch_size: must be >= 1"),
        (["gen.compile=yes"], "gen.compile: must be auto, true or false"),
        (["task=needle", "task.depth_lo=0.9", "task.depth_hi=0.1"], "task.depth_lo"),
        (["task=aime24", "task.source=path", "task.path=/nope.jsonl"], "/nope.jsonl"),
    ],
)
def test_bad_input_is_one_clear_error_before_any_model_loads(tmp_path, args, message):
    if args[-1] == "task.path=BAD":
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"_id": "x", "question": "q"}\n{not json\n')
        args = [*args[:-1], f"task.path={bad}"]
    out = tmp_path / "out"
    with pytest.raises(ValueError) as err:
        run(compose_cfg([*TINY, *args, f"out_root={out}"]))
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not list(out.rglob("summary.csv")) and not list(out.rglob("samples.jsonl"))


@pytest.mark.parametrize(
    "args,message",
    [
        (["compression=snapkvv"],
         "compression=snapkvv: unknown option (did you mean compression=snapkv?); available: adakv, "
         "expected_attention, "),
        (["compression.prompt_budgt=8"], "compression.prompt_budgt: no such key"),
        (["hydra/launcher=nope"], "nope"),
        (["compression=snapkv", "compression.prompt_budget=8"], "compression.prompt_budget: must exceed"),
    ],
)
def test_the_command_line_prints_one_line_and_exits_2(tmp_path, capsys, args, message):
    """``evals.run``'s first step, :func:`evals.cli.precheck`, in-process; the whole command as a subprocess once,
    for the first case (the same check, then nothing else runs)."""
    if args == ["compression=snapkvv"]:
        res = cli([*args, f"out_root={tmp_path}/out"], timeout=180)
        code, err = res.returncode, res.stderr
    else:
        with pytest.raises(SystemExit) as exit_:
            precheck([*args, f"out_root={tmp_path}/out"])
        code, err = exit_.value.code, capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("samples.jsonl"))


def test_the_paper_grid_composes_for_slurm():
    """What ``python -m evals.run +experiment=paper hydra/launcher=slurm --cfg hydra`` prints, composed in-process."""
    from omegaconf import OmegaConf

    cfg = compose_cfg(["+experiment=paper", "hydra/launcher=slurm"], return_hydra_config=True)
    hydra_text = OmegaConf.to_yaml(cfg.hydra)
    assert "SlurmLauncher" in hydra_text and "gpus_per_node: 1" in hydra_text
    assert cfg.model.name == "llama31_8b_instruct" and "r1_distill_llama_8b" in cfg.hydra.sweeper.params.model
