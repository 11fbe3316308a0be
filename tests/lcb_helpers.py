"""Shared helpers of the LiveCodeBench and sandbox tests: isolation modes and settings, small problems, what a
program printed, leftover and file-tree checks."""

from __future__ import annotations

import functools
import os
import sys
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sandbox import cgroup, isolation, modes, seccomp
from tasks.livecodebench import load
from tasks.livecodebench.grader import GradeSettings, Verdict, grade
from tasks.livecodebench.problem import Problem, TestCase

REPO = Path(__file__).resolve().parents[1]
MODES = ("bwrap", "process")
SCRATCH = ".lcb_"  # prefix of the folders tests make inside the project (visible, read-only, to sandboxed programs)


@functools.lru_cache(maxsize=1)
def bundled() -> dict[str, Problem]:
    return {p.item_id: p for p in load(OmegaConf.create({"source": "bundled"}))}


def fenced(code: str, prose: str = "Here is my solution.") -> str:
    """A completion as a chat model writes it: prose, then the program in a fenced block."""
    return f"{prose}\n\n```python\n{code.rstrip()}\n```\n\nThis reads the input and prints the answer.\n"


@functools.lru_cache(maxsize=4)
def process_python() -> str:
    """The interpreter that gives process mode its strongest form: one a fresh uid can run, when running as root."""
    if os.geteuid() != 0 or isolation.readable_by_others(sys.executable):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK) and isolation.readable_by_others(candidate):
            return candidate
    return sys.executable


def cfg_for(mode: str, **knobs: object) -> dict:
    """A ``task`` config that grades in ``mode`` (short timeouts); skips the test when the mode cannot run here."""
    python = None if mode == "bwrap" else process_python()
    try:
        modes.resolve(mode, python)
    except ValueError as exc:
        pytest.skip(f"{mode} isolation is not available here: {exc}")
    return {"sandbox": mode, "python": python, "timeout_s": 1.5, "memory_mb": 1024, "exec_workers": 2, **knobs}


def settings_for(mode: str, **knobs: object) -> GradeSettings:
    return GradeSettings.from_cfg(cfg_for(mode, **knobs))


def strict_settings(mode: str, python: str | None = None, **knobs: object) -> GradeSettings:
    """``task.protocol=strict`` (no lcb_runner guard in the way), process mode on ``python`` or the harness's own
    interpreter (not :func:`process_python`: under a 0700 home as root, the case that used to keep root's
    capabilities); skips the test where the mode cannot run at all."""
    python = python or (None if mode == "bwrap" else sys.executable)
    try:
        modes.resolve(mode, python)
    except ValueError as exc:
        pytest.skip(f"{mode} isolation is not available here: {exc}")
    return GradeSettings.from_cfg({"sandbox": mode, "python": python, "protocol": "strict", "timeout_s": 3.0,
                                   "memory_mb": 1024, "exec_workers": 1, **knobs})


def output_of(mode: str, code: str, problem: Problem | None = None, python: str | None = None,
              **knobs: object) -> str:
    """What ``code`` printed under :func:`strict_settings` (from the wrong-answer detail of a public test that
    expects a uuid)."""
    problem = problem or make_problem("out", [("\n", uuid.uuid4().hex + "\n")])
    verdict = grade(problem, code, strict_settings(mode, python, **knobs))
    assert verdict.outcome == "wrong_answer", verdict
    return verdict.error.split("got ", 1)[1].rsplit(", expected", 1)[0].strip("'\"")


def run_strict(mode: str, code: str, expected: str, **knobs: object) -> Verdict:
    """Grade ``code`` on one stdin test expecting ``expected`` with ``task.protocol=strict``: the sandbox must hold
    without lcb_runner's guard (os.remove, os.fork ...)."""
    return grade(make_problem("proc", [("\n", expected)]), code, settings_for(mode, **{"protocol": "strict", **knobs}))


def needs_cgroup() -> None:
    """Skip unless this process can make sandbox cgroups."""
    if cgroup.base() is None:
        pytest.skip("no cgroup can be made here: the sandbox keeps per-process limits")


def needs_filter() -> None:
    """Skip unless a seccomp filter is built on this machine."""
    if not seccomp.filter_bytes():
        pytest.skip("no seccomp filter is built on this machine")


def require(mode: str, guarantee: str) -> None:
    """Skip unless the isolation of ``mode`` here gives ``guarantee`` (see Isolation.guarantees)."""
    iso = modes.resolve(mode, None if mode == "bwrap" else process_python())
    if not iso.guarantees[guarantee]:
        pytest.skip(f"{mode} mode here ({iso.reason or 'as configured'}) does not guarantee {guarantee}")


def make_problem(qid: str, tests: list[tuple[str, str]], func_name: str | None = None) -> Problem:
    kind = "functional" if func_name else "stdin"
    return Problem(question_id=qid, question_title=qid, question_content="(test problem)", platform="atcoder",
                   contest_id="t", contest_date=datetime(2024, 9, 1), starter_code="", difficulty="easy",
                   tests=tuple(TestCase(i, o, kind) for i, o in tests), n_public=1, func_name=func_name)


def become_subreaper() -> None:
    """Make this process the child subreaper of everything it starts (``prctl(PR_SET_CHILD_SUBREAPER)``): a process
    that outlives its parent (a daemon that escaped its sandbox) is re-parented to us, not to init, so it stays our
    descendant and :func:`leftover_sandbox_processes` finds it. Linux only; a no-op where prctl is missing."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _descendants(root: int) -> set[int]:
    """The pids below ``root`` in the process tree, from ``/proc/<pid>/stat`` (field 4: the parent pid)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])  # after "pid (comm) state"
        children.setdefault(ppid, []).append(int(name))
    found, todo = set(), [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            if pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def leftover_sandbox_processes(marker: str = "job/driver.py") -> list[str]:
    """Command lines of running processes started by this test process (its descendants, orphans included once
    :func:`become_subreaper` ran) that contain ``marker`` (a sandbox driver or a test's daemon). Only our own: under
    pytest-xdist another worker's sandboxes run at the same time."""
    found = []
    for pid in sorted(_descendants(os.getpid())):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def tree_snapshot(root: Path = REPO) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file under the project, caches and virtual environments excluded: what a program
    could have changed. The environment (``.venv``: ~46k files, walked twice per attack) is covered instead by
    ``test_writing_into_the_project_fails``, which tries to write into the interpreter's own ``sys.prefix``. The
    tests' own scratch folders (``SCRATCH`` prefix: victims, sockets; other xdist workers make and remove theirs
    meanwhile) are left out too: each test checks its own, e.g. the victim file's content."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__", ".pytest_cache")
                       and not d.startswith((".venv", SCRATCH))]
        for f in filenames:
            path = os.path.join(dirpath, f)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            snap[path] = (st.st_size, st.st_mtime_ns)
    return snap
