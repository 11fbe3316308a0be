"""Generation and grading identities (evals/execute/code_identity.py, evals/execute/regrade.py): a row records the code
that generated and graded it; a cached or resumed completion is reused only under the same generation identity and is
re-graded, through ``evals.run``, whenever the grading identity differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evals.execute.code_identity as code_identity
import evals.execute.generate as generate
import evals.execute.prepare as prepare
import tasks.livecodebench as lcb
import tasks.longbench_v2 as longbench
import tasks.needle as needle
from evals.execute.code_identity import REPO, _prompt_files, _task_files, generation_id, sources_sha256
from evals.run import run as run_cfg
from tests.runner_utils import TINY, compose_cfg

NEEDLE = ["task=needle", "task.context_tokens=256", "task.n_items=4", "task.limit=2"]


@pytest.fixture
def generated(monkeypatch):
    """Samples the backend produced; the sample cache turned on for the test."""
    count = {"n": 0}
    monkeypatch.setattr(generate, "produce", counting_from(count))
    monkeypatch.delenv("SNAPSTREAM_SAMPLE_CACHE", raising=False)
    return count


def counting_from(count: dict, produce=generate.produce):
    def counting(*args, **kwargs):
        for ended in produce(*args, **kwargs):
            count["n"] += len(ended)
            yield ended

    return counting


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def run(tmp_path, run_dir=None, *overrides):
    return run_cfg(compose_cfg([*TINY, *NEEDLE, f"out_root={tmp_path}", *overrides]), run_dir)


def a_new_scorer(monkeypatch):
    """A scorer change: another verdict and another grading identity (as an edit of tasks/needle.py gives)."""
    monkeypatch.setattr(needle, "score", lambda item, completion, *, cfg=None: {
        "prediction": "new", "answer": item.answer if hasattr(item, "answer") else None, "correct": False,
        "scored_by": "new"})
    monkeypatch.setattr(code_identity, "_grading_sources", lambda task: "another scorer")


def test_a_scorer_change_regrades_the_reused_completion(tmp_path, generated, monkeypatch):
    first = run(tmp_path)
    old = rows(first)
    assert generated["n"] == 2 and all(r["generation_id"] and r["grading_id"] for r in old)
    a_new_scorer(monkeypatch)
    monkeypatch.setattr(generate, "make_backend", lambda *a, **k: pytest.fail("a backend was built"))
    second = run(tmp_path, tmp_path / "second")
    new = rows(second)
    assert generated["n"] == 2  # the completions were reused ...
    assert [r["completion"] for r in new] == [r["completion"] for r in old]
    assert all(r["cached_from"] == old[0]["run_id"] for r in new)
    assert all(r["scored_by"] == "new" and r["prediction"] == "new" and r["correct"] is False for r in new)  # regraded
    assert {r["regraded_from"] for r in new} == {old[0]["grading_id"]} and new[0]["grading_id"] != old[0]["grading_id"]
    third = run(tmp_path, tmp_path / "third")  # the cache now holds the new verdicts: served as they are
    assert all(r["scored_by"] == "new" and "regraded_from" in r for r in rows(third))
    monkeypatch.undo()  # the backend again, and ...
    monkeypatch.delenv("SNAPSTREAM_SAMPLE_CACHE", raising=False)
    monkeypatch.setattr(generate, "produce", counting_from(generated))
    monkeypatch.setattr(prepare, "generation_id", lambda task, backend="": "other-generating-code")  # ... other code
    fourth = run(tmp_path, tmp_path / "fourth")
    assert generated["n"] == 4 and not any("cached_from" in r for r in rows(fourth))  # never served from the cache


def test_resume_regrades_in_place_and_regenerates_rows_of_other_generating_code(tmp_path, generated, monkeypatch):
    monkeypatch.setenv("SNAPSTREAM_SAMPLE_CACHE", "off")
    first = run(tmp_path)
    assert generated["n"] == 2
    a_new_scorer(monkeypatch)
    again = run(tmp_path)  # the same directory, complete under the old scorer: not "nothing to do"
    assert again == first and generated["n"] == 2
    assert all(r["scored_by"] == "new" for r in rows(first)) and len(rows(first)) == 2
    summary = (first / "summary.csv").read_text()
    assert ",0.0," in summary or ",0," in summary, summary  # the new verdicts (every one wrong) are the headline
    monkeypatch.setattr(prepare, "generation_id", lambda task, backend="": "other-generating-code")
    run(tmp_path)
    assert generated["n"] == 4 and {r["generation_id"] for r in rows(first)} == {"other-generating-code"}
    assert len(rows(first)) == 2


def test_what_is_hashed_for_generation_and_for_grading():
    prompt_files = {p.relative_to(REPO).as_posix() for p in _prompt_files(lcb)}
    assert prompt_files == {"tasks/livecodebench/__init__.py", "tasks/livecodebench/prompts.py"}
    assert {p.relative_to(REPO).as_posix() for p in _prompt_files(longbench)} == {"tasks/longbench_v2/prompts.py"}
    graded = {p.relative_to(REPO).as_posix() for p in _task_files(lcb)}
    assert {"tasks/livecodebench/grader.py", "tasks/livecodebench/values.py", "sandbox/driver.py",
            "sandbox/seccomp.py", "sandbox/run.py"} <= graded
    assert _task_files(needle) == [REPO / "tasks" / "needle.py"]
    assert generation_id(lcb) == generation_id(lcb) and len(generation_id(lcb)) == 16


def test_a_source_hash_follows_every_byte_and_name(tmp_path, monkeypatch):
    monkeypatch.setattr(code_identity, "REPO", tmp_path)
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    before = sources_sha256([a, b])
    assert sources_sha256([b, a]) == before
    a.write_text("x = 2\n")
    assert sources_sha256([a, b]) != before
    a.write_text("x = 1\n")
    a.rename(tmp_path / "c.py")
    assert sources_sha256([tmp_path / "c.py", b]) != before


def test_the_livecodebench_grading_setup_is_the_resolved_mode(monkeypatch):
    from sandbox import modes

    class Iso:
        mode, python = "process", "/usr/bin/python3"

    monkeypatch.setattr(modes, "resolve", lambda requested, python=None: Iso())
    monkeypatch.setattr("os.path.realpath", lambda p: __import__("sys").executable)
    setup = lcb.grading_setup({"sandbox": "auto"})
    assert setup["sandbox"] == "process" and setup["python"] == "/usr/bin/python3" and len(setup["interpreter"]) == 3
