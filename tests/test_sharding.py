"""``shard=K/N``: one job's items over N processes, one run directory (docs/sharding.md).

The shards together equal one unsharded run row for row; a shard killed with SIGKILL resumes on its own; a plain run
after some shards resumes exactly the missing samples, and after all of them has nothing to do; bad values are one
line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evals.config.shard import Shard, parse_shard
from evals.config.spec import check
from evals.report.load import collect
from evals.run import run
from tests.runner_utils import ROOT, TINY, compose_cfg

# 5 items (shard 0/2 takes 0, 2, 4; shard 1/2 takes 1, 3), 2 sampled samples each: sample indices and seeds matter
JOB = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=5", "gen.max_new_tokens=4", "gen.n_samples=2",
       "gen.temperature=0.8"]
TIMING = ("latency_s", "prefill_s", "decode_s")  # the only columns two generations of one sample differ in


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_key(run_dir: Path) -> dict[tuple[str, int], dict]:
    out = {}
    for r in rows(run_dir / "samples.jsonl"):
        key = (r["item_id"], r["sample_idx"])
        assert key not in out, f"duplicate row {key}"
        out[key] = {k: v for k, v in r.items() if k not in TIMING}
    return out


def meta(run_dir: Path) -> dict:
    return json.loads((run_dir / "meta.json").read_text())


def quality_lines(run_dir: Path) -> list[str]:
    """``summary.csv`` less its latency rows (timing)."""
    return [line for line in (run_dir / "summary.csv").read_text().splitlines() if "latency" not in line]


def test_the_split_is_a_partition_in_the_tasks_order():
    items = list(range(11))
    parts = [Shard(k, 4).select(items) for k in range(4)]
    assert parts[1] == [1, 5, 9] and sorted(sum(parts, [])) == items
    assert parse_shard("0/1") is None and parse_shard(None) is None and parse_shard(" 3/8") == Shard(3, 8)


def test_two_shards_equal_one_unsharded_run_row_for_row(tmp_path):
    shard0 = run(compose_cfg([*JOB, f"out_root={tmp_path}/sharded", "shard=0/2"]))
    assert meta(shard0)["status"] == "running" and not (shard0 / "summary.csv").exists()
    assert {k[0] for k in by_key(shard0)} == {"needle-0-0", "needle-0-2", "needle-0-4"}  # merged: no other writes
    shard1 = run(compose_cfg([*JOB, f"out_root={tmp_path}/sharded", "shard=1/2"]))
    assert shard1 == shard0  # the shard count is not in the identity: one run directory
    assert not list(shard0.glob("samples.shard-*")) and not list(shard0.glob("prompts.shard-*"))
    whole = run(compose_cfg([*JOB, f"out_root={tmp_path}/whole"]))
    assert whole.relative_to(tmp_path / "whole") == shard0.relative_to(tmp_path / "sharded")  # same fp-<fingerprint>
    sharded, plain = by_key(shard0), by_key(whole)
    assert len(plain) == 10 and sharded.keys() == plain.keys()
    for key in plain:
        assert sharded[key] == plain[key], key  # completions, tokens, seeds, predictions, prompt hashes
    m = meta(shard0)
    assert m["status"] == "complete" and m["n_rows"] == 10 and set(m["shards"]) == {"0/2", "1/2"}
    assert m["generation"]["samples"] == 10 and m["generation"]["shards"] == 2
    assert quality_lines(shard0) == quality_lines(whole)  # the tables, bootstrap intervals included
    # a plain run of the same job afterwards: nothing left to do, the record as it was (the headline is re-printed)
    record = ("samples.jsonl", "samples.csv", "summary.csv", "meta.json", "prompts.jsonl.gz")
    before = {name: (shard0 / name).stat().st_mtime_ns for name in record}
    assert run(compose_cfg([*JOB, f"out_root={tmp_path}/sharded"])) == shard0
    assert {name: (shard0 / name).stat().st_mtime_ns for name in record} == before


def test_a_plain_run_after_one_shard_generates_only_the_missing_samples(tmp_path, caplog):
    out = f"out_root={tmp_path}"
    run_dir = run(compose_cfg([*JOB, out, "shard=1/2"]))
    first = rows(run_dir / "samples.jsonl")
    assert len(first) == 4
    with pytest.raises(ValueError, match="no summary.csv"):  # the report: not a run yet, and says so
        collect(tmp_path)
    assert f"{run_dir}: not in the report: a sharded run not finished (shards 1/2 ended" in caplog.text
    caplog.set_level("INFO")
    run(compose_cfg([*JOB, out]))
    assert "4 rows already there, 3 items to go" in caplog.text
    after = rows(run_dir / "samples.jsonl")
    assert after[:4] == first and len({(r["item_id"], r["sample_idx"]) for r in after}) == len(after) == 10
    assert meta(run_dir)["status"] == "complete"


def test_a_shard_killed_with_sigkill_resumes_and_loses_nothing(tmp_path):
    args = [*TINY, "task=needle", "task.context_tokens=1024", "task.n_items=12", "compression=snapstream",
            "compression.prompt_budget=64", "compression.recent=8", "compression.window=16",
            f"out_root={tmp_path}", "shard=0/2"]
    proc = subprocess.Popen([sys.executable, "-m", "evals.run", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            start_new_session=True)
    deadline, own = time.time() + 240, None
    while time.time() < deadline:
        found = list(tmp_path.rglob("samples.shard-0-of-2.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 2:
            own = found[0]
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert own is not None, "the shard wrote no rows in time"
    kept = own.read_text().splitlines()
    assert len(kept) < 6, "the shard finished before it could be killed"
    with own.open("a") as fh:
        fh.write('{"run_id": "torn')  # what a kill in the middle of a write leaves
    run_dir = run(compose_cfg(args))  # the same command resumes (in-process: the kill was the process part)
    assert run_dir == own.parent and not own.exists()  # merged into the run's samples.jsonl
    merged = (run_dir / "samples.jsonl").read_text().splitlines()
    assert merged[:len(kept)] == kept  # the rows written before the kill, kept as they were (not generated again)
    keys = [(json.loads(line)["item_id"], json.loads(line)["sample_idx"]) for line in merged]
    assert len(keys) == len(set(keys)) == 6
    assert {k for k, _ in keys} == {f"needle-0-{i}" for i in range(0, 12, 2)}
    assert meta(run_dir)["status"] == "running"  # shard 1/2 has not run: the run is not complete


@pytest.mark.parametrize("args,message", [
    (["shard=2/2"], "shard: K/N needs N >= 1 and K in 0..N-1, got 2/2"),
    (["shard=0/0"], "shard: K/N needs N >= 1 and K in 0..N-1, got 0/0"),
    (["shard=1"], "shard: expected K/N"),
    (["shard=a/b"], "shard: expected K/N"),
    (["shard='-1/2'"], "shard: expected K/N"),
    (["shard=0/2", "overwrite=true"], "shard: overwrite=true clears the run directory"),
    (["plan.gpus=8"], "plan.gpus: read by python -m evals.plan only"),
    (["plan.shards=auto"], "plan.shards: read by python -m evals.plan only"),
])
def test_bad_shard_values_are_one_line(args, message):
    with pytest.raises(ValueError) as err:
        check(compose_cfg([*JOB, *args]), offline=True)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_command_line_refuses_a_bad_shard_in_one_line(tmp_path, capsys):
    """``evals.run``'s first step (:func:`evals.cli.precheck`): exit 2, one line, nothing written."""
    from evals.cli import precheck

    with pytest.raises(SystemExit) as exit_:
        precheck([*JOB, "shard=3/2", f"out_root={tmp_path}/out"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and lines == ["error: shard: K/N needs N >= 1 and K in 0..N-1, got 3/2"]
    assert not (tmp_path / "out").exists()


def test_two_shards_running_at_once_complete_one_run(tmp_path):
    """Both shards as processes at the same time (the locks are the subject; replayed completions, so no weights
    load): one run directory, every sample once, complete, both shards recorded; the plain command afterwards has
    nothing to do."""
    ids = [f"needle-0-{i}" for i in range(6)]
    replay = tmp_path / "c.jsonl"
    replay.write_text("".join(json.dumps({"item_id": i, "completion": f"x{i}"}) + "\n" for i in ids))
    args = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=6", "backend=replay",
            f"backend.path={replay}", f"out_root={tmp_path}/out"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "evals.run", *args, f"shard={k}/2"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k in range(2)]
    outs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    (run_dir,) = {p.parent for p in (tmp_path / "out").rglob("meta.json")}
    m = meta(run_dir)
    assert m["status"] == "complete" and m["n_rows"] == 6 and set(m["shards"]) == {"0/2", "1/2"}
    assert sorted(k for k, _ in by_key(run_dir)) == ids and not list(run_dir.glob("samples.shard-*"))
    assert run(compose_cfg(args)) == run_dir and meta(run_dir) == m  # nothing to do: the record as it was
