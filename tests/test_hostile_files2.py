"""Hostile files, round 2 (issue 30, I1 I3 I4 I6): invalid Unicode in a replayed completion, a symlink planted in
a run directory, a refused re-run next to a finished run, and read-only / full disks. Nothing outside the run
directory changes, no row is lost, and every failure is one line naming the path or field."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from evals.rows import read_rows
from evals.run import run
from tests.runner_utils import ROOT, TINY, cli, compose_cfg

NEEDLE = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "gen.max_new_tokens=4"]
IDS = ("needle-0-0", "needle-0-1")


def replay_file(path, completions=("x", "y")):
    path.write_text("".join(json.dumps({"item_id": i, "completion": c}) + "\n" for i, c in zip(IDS, completions)))
    return path


def replay_args(tmp_path, completions=("x", "y")):
    return [*NEEDLE, "backend=replay", f"backend.path={replay_file(tmp_path / 'c.jsonl', completions)}"]


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_lone_surrogate_in_a_replayed_completion_is_repaired_for_that_row(tmp_path):
    """I1: ``"\\ud800"`` aborted the run at every resume (UTF-8 cannot hold it) and named no field."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"item_id": "needle-0-0", "completion": "a\\ud800b"}\n'
                    '{"item_id": "needle-0-1", "completion": "\\ud83d\\ude00 fine"}\n')
    args = [*NEEDLE, "backend=replay", f"backend.path={path}"]
    out = run(compose_cfg(args), tmp_path / "run")
    rows = {r["item_id"]: r for r in read_rows(out / "samples.jsonl")}
    assert rows["needle-0-0"]["completion"] == "a\ufffdb" and rows["needle-0-1"]["completion"] == "\U0001f600 fine"
    again = run(compose_cfg(args), tmp_path / "run")  # resumes: nothing to redo
    assert len(read_rows(again / "samples.jsonl")) == 2


@pytest.mark.parametrize("name", ["samples.jsonl", ".meta.json.tmp", ".lock", "summary.csv"])
def test_a_symlink_in_the_run_directory_is_refused_and_its_target_untouched(tmp_path, name):
    """I3: a symlinked ``samples.jsonl`` had the harness cut the file it points to."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n{torn")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / name).symlink_to(victim)
    with pytest.raises(ValueError) as err:
        run(compose_cfg(replay_args(tmp_path)), run_dir)
    assert f"{run_dir / name} is a symbolic link" in str(err.value) and "\n" not in str(err.value)
    assert victim.read_bytes() == b"precious\n{torn"
    assert sorted(p.name for p in run_dir.iterdir()) == [name]


def test_a_refused_rerun_leaves_a_finished_run_as_it_was(tmp_path):
    """I4: a re-run with another configuration in the same ``hydra.run.dir`` was refused, but deleted the finished
    run's ``.hydra/`` (and Hydra had overwritten it with the refused configuration)."""
    run_dir = tmp_path / "run"
    args = replay_args(tmp_path)
    first = cli([*args, f"hydra.run.dir={run_dir}"])
    assert first.returncode == 0, first.stderr
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    before = snapshot(run_dir)
    second = cli([*args, "gen.seed=7", f"hydra.run.dir={run_dir}"])
    assert second.returncode == 2 and "holds results of another configuration" in second.stderr
    assert "Traceback" not in second.stderr
    after = snapshot(run_dir)
    assert {k: v for k, v in after.items() if k != "run.log"} == {k: v for k, v in before.items() if k != "run.log"}


def _in_small_mount(tmp_path, options: str, fill_kib: int, args: list[str]) -> subprocess.CompletedProcess:
    """Run the CLI with ``out_root`` on a private tmpfs (``unshare --mount``; as non-root a user namespace)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux unshare")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    fill = f"dd if=/dev/zero of={mnt}/fill bs=1k count={fill_kib} 2>/dev/null; " if fill_kib else ""
    ro = f"mount -o remount,ro {mnt}; " if "ro" in options.split(",") else ""
    script = (f"mount -t tmpfs -o size=64k tmpfs {mnt} && {fill}{ro}exec {sys.executable} -m evals.run "
              + " ".join(f"'{a}'" for a in [*args, f"out_root={mnt}/results"]))
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    probe = subprocess.run(["unshare", *user, "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("mount namespaces are not available here")
    return subprocess.run(["unshare", *user, "--mount", "sh", "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.parametrize("options, fill_kib, message", [
    ("ro", 0, "Read-only file system"),
    ("rw", 64, "No space left on device"),  # full before the run: refused by the command-line check
    ("rw", 58, "No space left on device"),  # fills up during the run
])
def test_read_only_and_full_disks_are_one_line_naming_the_path(tmp_path, options, fill_kib, message):
    """I6: a read-only results folder and a full disk gave tracebacks."""
    done = _in_small_mount(tmp_path, options, fill_kib, replay_args(tmp_path))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert str(tmp_path / "mnt") in lines[0]



def test_an_out_root_on_a_virtual_file_system_is_named_as_out_root():
    """``out_root=/proc/x`` said "hydra.run.dir: /proc: No space left on device": the user set out_root, and /proc
    is not full but cannot hold files."""
    done = cli(["task=needle", "task.limit=1", "out_root=/proc/x"])
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: out_root: /proc: not a folder that can hold files (a virtual file system)"], done.stderr
