"""Hostile command lines, round 3: ``plan.memory_gib`` is a finite number > 0, ``evals.plan`` refuses exactly what
``evals.run`` refuses (one check, :func:`evals.config.spec.check`), and a deeply nested override or
``hydra.job.chdir=true`` is one line naming the key, never a traceback or an unnamed error."""

from __future__ import annotations

import pytest

from evals.cli import precheck
from evals.config.spec import check
from evals.plan.__main__ import main as plan_main
from tests.runner_utils import TINY, compose_cfg

PAPER_JOB = ["model=llama31_8b_instruct", "task=aime24", "compression=snapstream"]
NEEDLE = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "gen.max_new_tokens=4"]


def run_refuses(args: list[str]) -> str:
    with pytest.raises(ValueError) as err:
        check(compose_cfg(args))
    return str(err.value)


def plan_refuses(args: list[str], tmp_path, capsys) -> str:
    assert plan_main([*args, f"out_root={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert not (tmp_path / "plan.csv").exists()
    return err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-5", "0"])
def test_plan_memory_gib_must_be_finite_and_positive(value, tmp_path, capsys):
    """P1: nan, inf and 1e400 ended in a traceback (int of NaN); P2: a negative budget was accepted."""
    err = plan_refuses([*PAPER_JOB, f"plan.memory_gib={value}"], tmp_path, capsys)
    assert "plan.memory_gib: expected a finite number > 0, got" in err
    assert run_refuses([*NEEDLE, f"plan.memory_gib={value}"]).startswith("plan.memory_gib: expected a finite number")


def test_a_usual_budget_still_plans(tmp_path, capsys):
    assert plan_main([*PAPER_JOB, "plan.memory_gib=40.5", f"out_root={tmp_path}"]) == 0
    assert "plan.memory_gib=40.5" in capsys.readouterr().out


@pytest.mark.parametrize("override", ["overwrite=no", "gen.max_new_tokens=2.5", "gen.n_samples=0",
                                      "gen.temperature=nan", "task.limit=-1", "log_every=-3"])
def test_plan_refuses_what_run_refuses_with_the_same_line(override, tmp_path, capsys):
    """P3: values ``evals.run`` refuses were planned with exit code 0."""
    line = run_refuses([*PAPER_JOB, override])
    err = plan_refuses([*PAPER_JOB, override], tmp_path, capsys)
    assert err.rstrip("\n").endswith(f": {line}"), (err, line)


def _precheck_line(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        precheck(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("opening", ["[", "{a:"])
def test_a_deeply_nested_override_is_one_line_naming_its_key(opening, capsys, tmp_path):
    """R7: ``+task.x=[[[...]]]`` gave 'maximum recursion depth exceeded' naming nothing."""
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
    """R8: with ``hydra.job.chdir=true`` a relative ``task.path`` passed the check, then the job failed in its
    output folder with 'no such file', naming neither the cause nor the override."""
    err = _precheck_line([*NEEDLE, "hydra.job.chdir=true"], capsys)
    assert err.startswith("error: hydra.job.chdir: true is not supported")
    precheck([*NEEDLE, "hydra.job.chdir=false"])
