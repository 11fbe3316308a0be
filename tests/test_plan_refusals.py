
"""``evals.plan`` refuses exactly what ``evals.run`` refuses, with the same line (one check,
:func:`evals.config.spec.check`), and writes no ``plan.csv`` then; ``plan.memory_gib`` is a finite number > 0."""

from __future__ import annotations

import pytest

from evals.config.spec import check
from evals.plan.__main__ import main as plan_main
from tests.runner_utils import compose_cfg
from tests.small_runs import NEEDLE, PAPER_JOB


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
    """nan, inf and 1e400 are one line (no traceback from the int of NaN); a negative or zero budget is refused."""
    err = plan_refuses([*PAPER_JOB, f"plan.memory_gib={value}"], tmp_path, capsys)
    assert "plan.memory_gib: expected a finite number > 0, got" in err
    assert run_refuses([*NEEDLE, f"plan.memory_gib={value}"]).startswith("plan.memory_gib: expected a finite number")


def test_a_usual_budget_still_plans(tmp_path, capsys):
    assert plan_main([*PAPER_JOB, "plan.memory_gib=40.5", f"out_root={tmp_path}"]) == 0
    assert "plan.memory_gib=40.5" in capsys.readouterr().out


@pytest.mark.parametrize("override", ["overwrite=no", "gen.max_new_tokens=2.5", "gen.n_samples=0",
                                      "gen.temperature=nan", "task.limit=-1", "log_every=-3"])
def test_plan_refuses_what_run_refuses_with_the_same_line(override, tmp_path, capsys):
    """Values ``evals.run`` refuses are not planned: exit code 2 and the run's line."""
    line = run_refuses([*PAPER_JOB, override])
    err = plan_refuses([*PAPER_JOB, override], tmp_path, capsys)
    assert err.rstrip("\n").endswith(f": {line}"), (err, line)
