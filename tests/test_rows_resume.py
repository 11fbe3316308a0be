
"""What a run resumes: only rows of its own configuration, beside its own ``meta.json``; a corrupt ``meta.json`` is
one line naming it; ``overwrite=true`` takes the old headline away first; a no-op or a refused re-run leaves the
finished run as it was; a row holding a program's lone surrogate is read back on resume."""

from __future__ import annotations

import json

import pytest

from evals.record.rows import read_rows
from evals.run import run
from tests.refusals import one_line_error
from tests.runner_utils import cli, compose_cfg
from tests.small_runs import replay_args


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_program_raising_a_lone_surrogate_neither_crashes_the_run_nor_its_resume(tmp_path):
    """``raise ValueError(chr(0xD800))`` puts U+D800 in the grader's message: the row is written repaired (no
    ``UnicodeEncodeError``), and the resume reads it back instead of redoing the sample."""
    from lcb_helpers import bundled, fenced

    qid = next(iter(bundled()))
    path = tmp_path / "replay.jsonl"
    path.write_text(json.dumps({"item_id": qid, "completion": fenced("raise ValueError(chr(0xD800))")}) + "\n")
    args = ["task=livecodebench", "task.source=bundled", "task.limit=1", "backend=replay", f"backend.path={path}",
            f"out_root={tmp_path}"]
    out = run(compose_cfg(args), tmp_path / "run")
    (row,) = read_rows(out / "samples.jsonl")
    assert row["outcome"] == "runtime_error" and "\ufffd" in row["error"]
    assert run(compose_cfg(args), tmp_path / "run") == out  # the resume reads the row back
    assert len(read_rows(out / "samples.jsonl")) == 1


def test_rows_without_meta_json_are_never_resumed(tmp_path):
    """Run B never resumes run A's rows copied beside no meta.json (it would report A's score)."""
    a = run(compose_cfg(replay_args(tmp_path, ("a1", "a2"), "a.jsonl")), tmp_path / "a")
    b = tmp_path / "b"
    b.mkdir()
    (b / "samples.jsonl").write_bytes((a / "samples.jsonl").read_bytes())
    with pytest.raises(ValueError) as err:
        run(compose_cfg(replay_args(tmp_path, ("b1", "b2"), "b.jsonl")), b)
    assert f"{b / 'samples.jsonl'} has no meta.json beside it" in one_line_error(err)
    assert "overwrite=true" in str(err.value)
    out = run(compose_cfg([*replay_args(tmp_path, ("b1", "b2"), "b.jsonl"), "overwrite=true"]), b)
    assert sorted(r["completion"] for r in read_rows(out / "samples.jsonl")) == ["b1", "b2"]


def test_every_resumed_row_carries_this_runs_fingerprint(tmp_path):
    """A row of another configuration among a run's rows (meta.json is this run's) is refused, not resumed."""
    args = replay_args(tmp_path)
    out = run(compose_cfg(args), tmp_path / "run")
    first, _ = (out / "samples.jsonl").read_text().splitlines()
    foreign = {**json.loads(first), "fingerprint": "0123456789abcdef"}
    (out / "samples.jsonl").write_text(json.dumps(foreign) + "\n")  # one row lost, the other foreign: a resume
    with pytest.raises(ValueError) as err:
        run(compose_cfg(args), out)
    text = one_line_error(err)
    assert f"{out / 'samples.jsonl'} line 1: a row of another configuration" in text and "0123456789abcdef" in text


@pytest.mark.parametrize("content", [b"{", b"[1, 2]", b"\xff\xfe"])
def test_a_corrupt_meta_json_is_one_line_naming_it(tmp_path, content):
    """A damaged meta.json beside rows is one line naming it, not json's 'Expecting ...'."""
    out = run(compose_cfg(replay_args(tmp_path)), tmp_path / "run")
    (out / "meta.json").write_bytes(content)
    with pytest.raises(ValueError) as err:
        run(compose_cfg(replay_args(tmp_path)), out)
    assert f"{out / 'meta.json'} is not a JSON object" in one_line_error(err)


def test_a_meta_json_that_is_not_an_object_with_no_rows_beside_it_is_replaced(tmp_path):
    """``meta.json`` holding ``[1]`` with no rows to resume is replaced (no ``AttributeError: 'list' object``)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "meta.json").write_text("[1]")
    out = run(compose_cfg(replay_args(tmp_path)), run_dir)
    assert json.loads((out / "meta.json").read_text())["status"] == "complete"


def test_overwrite_takes_the_old_headline_away_before_anything_else(tmp_path, monkeypatch):
    """``overwrite=true`` removes ``results.json`` first: a re-run killed early leaves no old scores beside no
    rows."""
    import evals.execute.loop

    args = replay_args(tmp_path)
    out = run(compose_cfg(args), tmp_path / "run")
    assert (out / "results.json").is_file()

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(evals.execute.loop, "_generate_and_score", killed)
    with pytest.raises(KeyboardInterrupt):
        run(compose_cfg([*args, "overwrite=true"]), out)
    assert not (out / "results.json").exists() and not (out / "summary.csv").exists()


def test_a_no_op_rerun_leaves_the_hydra_record_alone(tmp_path):
    """Re-running a complete run leaves ``.hydra/`` untouched: nothing is done, so nothing is recorded."""
    run_dir = tmp_path / "run"
    args = [*replay_args(tmp_path), f"hydra.run.dir={run_dir}"]
    first = cli(args)
    assert first.returncode == 0, first.stderr
    files = sorted((run_dir / ".hydra").glob("*.yaml"))
    assert len(files) == 3
    before = {f.name: (f.stat().st_ino, f.stat().st_mtime_ns, f.read_bytes()) for f in files}
    second = cli([*args, "log_every=5"])  # outside the identity: the same, complete run
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stderr + second.stdout
    assert {f.name: (f.stat().st_ino, f.stat().st_mtime_ns, f.read_bytes()) for f in files} == before


def test_a_refused_rerun_leaves_a_finished_run_as_it_was(tmp_path):
    """A re-run with another configuration in the same ``hydra.run.dir`` is refused and leaves the finished run's
    files, ``.hydra/`` included, as they were."""
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
