"""The command line's one-line errors point at the fix: the closest key of the node or the group meant, the ``+``
that appends an experiment."""

from __future__ import annotations

import pytest

from evals.cli import options, validate
from tests.runner_utils import TINY

SEE = " (`python -m evals.run --cfg job` prints every key and its value)"


@pytest.mark.parametrize("args, line", [
    (["compression=snapkv", "compression.prompt_budjet=64"],
     "compression.prompt_budjet: no such key (did you mean compression.prompt_budget?)" + SEE),
    (["compresion=snapkv"], "compresion: no such key (did you mean compression=snapkv?)" + SEE),
    (["task.n_itemz=3"], "task.n_itemz: no such key (did you mean task.n_items?)" + SEE),
    (["ovrwrite=true"], "ovrwrite: no such key (did you mean overwrite?)" + SEE),
    (["gen.zzz=1"], "gen.zzz: no such key" + SEE),  # nothing close: no guess
    (["experiment=paper"], "experiment=paper: experiment is not in the defaults list; add it with a plus: "
                           f"+experiment=paper (options: {', '.join(options('experiment'))})"),
])
def test_a_misspelt_key_group_or_a_missing_plus_gets_the_fix(args, line):
    assert validate([*TINY, *args]) == [line]


def test_a_misspelt_method_gets_the_closest_one():
    (line,) = validate([*TINY, "compression=snapkvv"])
    assert line.startswith("compression=snapkvv: unknown option (did you mean compression=snapkv?); available: ")
    (line,) = validate([*TINY, "compression=zzzzzz"])
    assert line.startswith("compression=zzzzzz: unknown option; available: ")  # nothing close: no guess


@pytest.mark.parametrize("arg, line", [
    # docs/triattention.md's old example: the shell leaves ~ after = alone and Hydra's lexer refuses it
    ("compression.calibration=~/.cache/snapstream/c.safetensors",
     "compression.calibration=~/.cache/snapstream/c.safetensors: Hydra cannot read a value starting with ~ and the "
     "shell does not expand ~ after =; write compression.calibration=$HOME/.cache/snapstream/c.safetensors"),
    ("task.path=a`b", "task.path=a`b: Hydra cannot read this value; quote it: 'task.path=\"a`b\"'"),
])
def test_a_value_hydra_cannot_lex_is_one_line_with_the_fix(arg, line):
    from evals.config.overrides import UserError

    with pytest.raises(UserError) as err:
        validate([*TINY, "compression=triattention", arg])
    assert str(err.value) == line


@pytest.mark.parametrize("value", ["None", "null"])
def test_a_calibration_of_none_says_it_is_required(value):
    (line,) = validate(["compression=triattention", f"compression.calibration={value}"])
    assert line.startswith("compression.calibration: required, the model's query statistics")


def test_a_huge_task_starts_with_an_estimate_of_the_work(capsys):
    from evals.cli import precheck

    precheck([*TINY, "task=needle", "task.n_items=1000000"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("work: 1 job: 1,000,000 samples of 1,000,000 items, ~")
    assert "on one H100" in line and "check task.limit / task.n_items" in line
    precheck([*TINY, "task=needle", "task.n_items=1000000", "task.limit=20000", "gen.max_new_tokens=4"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("work: 1 job: 20,000 samples of 20,000 items, ~") and "at most 80k new tokens" in line
    assert "check task.limit" not in line
    precheck([*TINY, "task=needle", "task.limit=3"])
    assert capsys.readouterr().err == ""  # a small command line prints nothing


def test_the_positions_warning_gives_the_fix_that_applies():
    from evals.execute.backends.hf import positions_advice

    alone = positions_advice(5000, 256, 4096, "m")
    assert alone.startswith("the prompt alone (5000 tokens) fills the 4096 positions m was trained for")
    assert "lowering gen.max_new_tokens cannot help" in alone and "task.max_len" in alone
    both = positions_advice(4000, 256, 4096, "m")
    assert both.startswith("gen.max_new_tokens=256 with a prompt of 4000 tokens") and "to 96 or less" in both
