"""The sandboxes' folders on the host (:mod:`sandbox.scratch`): named for the harness process, the folders of dead
harnesses removed at the next start, never a live harness's, a link, another user's or a folder of another name; a
harness killed with ``kill -9`` used to leave its ``lcb-*`` folder for good."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from lcb_helpers import REPO, strict_settings

from sandbox import scratch


def dead_owner() -> tuple[int, int]:
    """The pid and start time of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(30)"])
    started = scratch.start_time(proc.pid)
    proc.kill()
    proc.wait()
    assert started is not None and scratch.start_time(proc.pid) is None
    return proc.pid, started


def folder(base: Path, pid: int, started: int) -> Path:
    path = base / f"lcb-{pid}-{started}-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    (path / "job").mkdir()
    (path / "job" / "driver.py").write_text("x")
    os.chmod(path / "job", 0)  # a folder a run closed: removed all the same
    return path


def test_a_root_is_named_for_its_harness(tmp_path):
    root = Path(scratch.make_root(str(tmp_path)))
    pid, started, _ = root.name.removeprefix("lcb-").split("-", 2)
    assert (int(pid), int(started)) == (os.getpid(), scratch.start_time(os.getpid()))
    assert root.stat().st_mode & 0o777 == 0o700
    assert scratch.remove_stale(str(tmp_path)) == [] and root.is_dir()  # its harness (this process) runs


def test_dead_harnesses_folders_go_and_the_rest_stay(tmp_path):
    pid, started = dead_owner()
    dead = folder(tmp_path, pid, started)
    reused = folder(tmp_path, os.getpid(), scratch.start_time(os.getpid()) + 1)  # our pid, another start: reused
    live = folder(tmp_path, os.getpid(), scratch.start_time(os.getpid()))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x")
    link = tmp_path / f"lcb-{pid}-{started}-link0000"
    link.symlink_to(elsewhere)
    plain = tmp_path / f"lcb-{pid}-{started}-file0000"
    plain.write_text("x")
    old_form = tmp_path / "lcb-abc12345"
    old_form.mkdir()
    removed = scratch.remove_stale(str(tmp_path))
    assert sorted(removed) == sorted([str(dead), str(reused)])
    assert not dead.exists() and not reused.exists()
    assert live.is_dir() and link.is_symlink() and (elsewhere / "keep").exists() and plain.is_file()
    assert old_form.is_dir()


def test_another_users_folder_stays(tmp_path):
    pid, started = dead_owner()
    other = folder(tmp_path, pid, started)
    assert scratch.remove_stale(str(tmp_path), uid=os.geteuid() + 1) == [] and other.is_dir()
    if os.geteuid() == 0:  # a real folder of another owner
        os.chown(other, 65534, 65534)
        assert scratch.remove_stale(str(tmp_path)) == [] and other.is_dir()
        os.chown(other, 0, 0)
    assert scratch.remove_stale(str(tmp_path)) == [str(other)]


def running(base: Path, pid: int) -> list[Path]:
    """The folders of harness ``pid`` whose job is the sleeping program (not the mode's probe) and whose sandbox
    has started (its filter file is written just before)."""
    out = []
    for path in base.glob(f"lcb-{pid}-*"):
        try:
            if "sleep(60)" in (path / "job" / "job.json").read_text() and (path / "seccomp.bpf").exists():
                out.append(path)
        except OSError:
            continue
    return out


def test_a_killed_harness_folder_is_removed_at_the_next_start(tmp_path):
    """``kill -9`` of a harness while its program runs leaves its folder (no ``finally`` runs); the next harness
    process removes it when it grades its first program."""
    strict_settings("bwrap")  # skip where bwrap cannot run
    program = "import time\ntime.sleep(60)\n"
    harness = (f"import sys, tempfile\ntempfile.tempdir = {str(tmp_path)!r}\n"
               f"sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}]\n"
               "from lcb_helpers import make_problem\nfrom tasks.livecodebench.grader import GradeSettings, grade\n"
               "s = GradeSettings.from_cfg({'sandbox': 'bwrap', 'protocol': 'strict', 'timeout_s': 100.0})\n"
               "print(grade(make_problem('scratch', [('\\n', 'x\\n')]), sys.argv[1], s).outcome)\n")
    proc = subprocess.Popen([sys.executable, "-c", harness, program], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not (left := running(tmp_path, proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)  # until the program's sandbox has started (the mode's probe runs first)
        assert left, "the harness never made its folder"
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert left[0].is_dir()  # what a killed harness left
    done = subprocess.run([sys.executable, "-c", harness, "print('x')"], cwd=REPO, capture_output=True, text=True)
    assert done.stdout.strip() == "passed", done.stderr[-2000:]
    assert not left[0].exists() and list(tmp_path.glob("lcb-*")) == []


@pytest.mark.parametrize("name", ["lcb-12-x-abc", "lcb-abc", "lcb-1-2", "other-1-2-abc"])
def test_names_not_of_the_form_are_left_alone(tmp_path, name):
    (tmp_path / name).mkdir()
    assert scratch.remove_stale(str(tmp_path)) == [] and (tmp_path / name).is_dir()
