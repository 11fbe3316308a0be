
"""The run directory: a symbolic link planted at a run file is refused and its target left untouched; a read-only
or full disk, and an ``out_root`` that cannot hold files, are one line naming the path; a failed run removes only
the folders it made."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from evals.record.rundir import remove_if_empty
from evals.run import run
from tests.runner_utils import ROOT, cli, compose_cfg
from tests.small_runs import replay_args


@pytest.mark.parametrize("name", ["samples.jsonl", ".meta.json.tmp", ".lock", "summary.csv"])
def test_a_symlink_in_the_run_directory_is_refused_and_its_target_untouched(tmp_path, name):
    """A symlinked ``samples.jsonl`` (or other run file) is refused; the file it points to is never cut."""
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
    """A read-only results folder and a full disk are one line naming the path, never a traceback."""
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


def test_a_folder_of_user_logs_survives_a_failed_run(tmp_path):
    """``hydra.run.dir`` pointing at a folder of ``*.log`` files: a failed run removes its own ``.hydra/`` and
    leaves the user's logs."""
    folder = tmp_path / "mylogs"
    folder.mkdir()
    old = time.time() - 3600
    for name, text in [("run.log", "[2020-01-01 10:00:00,000][x][INFO] - an old run\n"), ("notes.log", "mine\n")]:
        (folder / name).write_text(text)
        os.utime(folder / name, (old, old))
    with (folder / "run.log").open("a") as fh:  # Hydra appends this run's records to an existing job log
        fh.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')},000][evals][ERROR] - failed\n")
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text("a: 1\n")
    remove_if_empty(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.log", "run.log"]  # this run's .hydra/ is gone


def test_a_folder_this_run_made_is_removed_when_it_failed(tmp_path):
    folder = tmp_path / "fresh"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("[]\n")
    (folder / "run.log").write_text(f"[{time.strftime('%Y-%m-%d %H:%M:%S')},000][evals][ERROR] - failed\n")
    remove_if_empty(folder)
    assert not folder.exists()


def test_a_refused_run_leaves_no_empty_folders_up_to_out_root(tmp_path):
    """A refused run removes its own folder and the parents it leaves empty, up to out_root."""
    out_root = tmp_path / "results"
    (out_root / "kept").mkdir(parents=True)
    (out_root / "m" / "other" / "x").mkdir(parents=True)
    folder = out_root / "m" / "task" / "method" / "gen"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("[]\n")
    remove_if_empty(folder, up_to=out_root)
    assert sorted(str(p.relative_to(out_root)) for p in out_root.rglob("*")) == ["kept", "m", "m/other", "m/other/x"]
