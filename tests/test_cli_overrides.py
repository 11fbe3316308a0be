
"""The command-line check of overrides and sweeps (:func:`evals.cli.precheck`): a value nested too deep,
``hydra.job.chdir=true`` and a ``range`` inside a sweep list are one line naming the key; a sweep is checked whole
before any job runs, and a ``range(...)`` sweep runs every job."""

from __future__ import annotations

import pandas as pd
import pytest

from evals.cli import precheck
from evals.plan.__main__ import main as plan_main
from tests.runner_utils import cli
from tests.small_runs import NEEDLE, PAPER_JOB


def _precheck_line(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        precheck(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("opening", ["[", "{a:"])
def test_a_deeply_nested_override_is_one_line_naming_its_key(opening, capsys, tmp_path):
    """``+task.x=[[[...]]]`` is one line naming the key and the depth, not 'maximum recursion depth exceeded'."""
    closing = {"[": "]", "{a:": "}"}[opening]
    value = opening * 3000 + "1" + closing * 3000
    err = _precheck_line([*NEEDLE, f"+task.x={value}"], capsys)
    assert err == "error: task.x: value nested 3000 levels deep; at most 32\n"
    assert plan_main([*PAPER_JOB, f"+task.x={value}", f"out_root={tmp_path}"]) == 2
    assert "task.x: value nested 3000 levels deep" in capsys.readouterr().err


def test_a_moderately_nested_override_is_read(capsys):
    value = "[" * 8 + "1" + "]" * 8
    precheck([*NEEDLE, f"+task.x={value}", "gen.seed=3"])  # no exit: the value is fine
    assert capsys.readouterr().err == ""


def test_brackets_inside_quotes_do_not_count():
    from evals.cli import check_nesting

    check_nesting("+task.x='" + "[" * 100 + "'")


def test_hydra_job_chdir_is_refused_in_one_line(capsys):
    """``hydra.job.chdir=true`` is refused up front: with it a relative ``task.path`` would pass the check, then the
    job would fail in its output folder with 'no such file', naming neither the cause nor the override."""
    err = _precheck_line([*NEEDLE, "hydra.job.chdir=true"], capsys)
    assert err.startswith("error: hydra.job.chdir: true is not supported")
    precheck([*NEEDLE, "hydra.job.chdir=false"])


def test_a_range_inside_a_sweep_list_is_one_line(capsys):
    """``128,-1,range(0,2)`` is one line from the command-line check, not omegaconf's ValidationError."""
    with pytest.raises(SystemExit) as code:
        precheck(["-m", *NEEDLE, "compression=snapkv", "compression.prompt_budget=128,-1,range(0,2)"])
    err = capsys.readouterr().err
    assert code.value.code == 2 and err.startswith("error: compression.prompt_budget: cannot expand the sweep")
    assert err.count("\n") == 1, err


def test_a_sweep_is_validated_whole_before_any_job_runs(tmp_path, capsys):
    """``evals.run``'s precheck in-process (the whole command runs as a subprocess in the range sweep below)."""
    with pytest.raises(SystemExit) as exit_:
        precheck(["-m", *NEEDLE, "compression=snapkv", "compression.prompt_budget=16,128,24", f"out_root={tmp_path}"])
    assert exit_.value.code == 2
    stderr = capsys.readouterr().err
    err = stderr.strip().splitlines()
    assert len(err) == 2 and "prompt_budget=16:" in err[0] and "prompt_budget=24:" in err[1], stderr
    assert not tmp_path.exists() or not list(tmp_path.rglob("samples.jsonl"))  # 128 did not run either


@pytest.mark.slow  # 9-13 s on 2 cores: make test under 10 minutes
def test_hydra_range_sweep_runs_every_job(tmp_path):
    res = cli(["-m", *NEEDLE, "task.n_items=1", "compression=snapstream", "compression.prompt_budget=range(64,129,32)",
               "compression.window=16", f"out_root={tmp_path}"])
    assert res.returncode == 0, res.stderr[-2000:]
    budgets = sorted(pd.read_csv(p)["prompt_budget"].iloc[0] for p in tmp_path.rglob("summary.csv"))
    assert budgets == [64, 96, 128]
