"""Hostile inputs, round 2 (issue 30, I1-I8): strict booleans and integers, unknown appended keys, bad item
fields, invalid Unicode in replayed completions, symlinks and refused runs in a run directory, names that become
paths or markdown, and one-line errors (never a traceback) for disk and permission failures."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from evals.cli import precheck
from evals.config.spec import check
from tasks.livecodebench.grader import GradeSettings
from tasks.livecodebench.problem import parse_problem
from tests.runner_utils import TINY, compose_cfg
from tests.test_hostile_files import bundled_rows

NEEDLE = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "gen.max_new_tokens=4"]
REPLAY = [*TINY, "task=aime24", "backend=replay"]


def refused(args: list[str], match: str) -> str:
    with pytest.raises(ValueError) as err:
        check(compose_cfg(args))
    text = str(err.value)
    assert match in text and "\n" not in text, text
    return text


@pytest.mark.parametrize("value", ["no", "off", "maybe", "0", "yes"])
def test_overwrite_takes_only_true_or_false(value):
    """I2: ``overwrite=no`` used to be read as true (a non-empty string) and delete finished results."""
    refused([*NEEDLE, f"overwrite={value}"], "overwrite: expected true or false")


def test_hydra_boolean_forms_are_accepted():
    for value in ("true", "false", "True", "FALSE"):
        check(compose_cfg([*NEEDLE, f"overwrite={value}"]))


def test_backend_partial_takes_only_true_or_false(tmp_path):
    """I2: ``backend.partial=maybe`` behaved as true."""
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"item_id": "x", "completion": "y"}) + "\n")
    refused([*REPLAY, f"backend.path={path}", "backend.partial=maybe"], "backend.partial: expected true or false")


@pytest.mark.parametrize("override, match", [
    ("gen.max_new_tokens=2.5", "gen.max_new_tokens: expected an integer, got 2.5"),  # I8: was truncated to 2
    ("gen.seed=abc", "gen.seed: expected an integer, got 'abc'"),  # I7: the error named no field
    ("gen.n_samples=100000000", "gen.n_samples: at most"),  # I6: a traceback after the model loaded
    ("gen.top_k=1.5", "gen.top_k: expected an integer"),
    ("gen.temperature=hot", "gen.temperature: expected a finite number"),
    ("+gen.max_tokens=1", "gen.max_tokens: no such key (did you mean max_new_tokens?)"),  # I8: silently ignored
    ("+foo=1", "foo: no such key"),  # I8: silently accepted
    ("+backend.pathh=x", "backend.pathh: no such key"),
])
def test_bad_generation_knobs_are_one_line(override, match):
    refused([*NEEDLE, override], match)


def test_documented_extension_points_stay_open():
    """``+task.<key>``, ``+model.<key>`` and the keys of an experiment are not refused by the key check."""
    check(compose_cfg([*NEEDLE, "+task.note=mine", "+model.note=mine"]))
    check(compose_cfg([*NEEDLE, "+experiment=smoke"]))


def test_a_python_that_is_not_python_is_refused_naming_the_field():
    """I7: ``task.python=/bin/true`` failed later, in the sandbox probe, naming no field."""
    with pytest.raises(ValueError, match="task.python: /bin/true is not a Python 3.8"):
        GradeSettings.from_cfg(OmegaConf.create({"python": "/bin/true"}))


def test_a_range_inside_a_sweep_list_is_one_line(capsys):
    """I6: ``128,-1,range(0,2)`` raised omegaconf's ValidationError through the command-line check."""
    with pytest.raises(SystemExit) as code:
        precheck(["-m", *NEEDLE, "compression=snapkv", "compression.prompt_budget=128,-1,range(0,2)"])
    err = capsys.readouterr().err
    assert code.value.code == 2 and err.startswith("error: compression.prompt_budget: cannot expand the sweep")
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("value, shown", [(None, "null"), (7, "int"), (["a"], "list")])
def test_a_non_string_question_content_is_refused_naming_item_and_field(value, shown):
    """I8: a null ``question_content`` became a prompt reading "None"."""
    row = dict(bundled_rows()[0], question_content=value)
    with pytest.raises(ValueError, match=rf"f.jsonl line 3: field 'question_content' of item {row['question_id']} "
                                         rf"must be a string, got {shown}"):
        parse_problem(row, "f.jsonl line 3")


def test_report_escapes_names_in_paths_and_tables(tmp_path):
    """I5: a model name with ``/`` crashed ``report`` (a plot path), and a ``|`` in a name split a table row."""
    import re

    from evals.report import write_report
    from tests.test_report import RUNS, _write

    runs = [(f"{r[0]}|x", *r[1:]) for r in RUNS]
    for run in runs:
        _write(tmp_path, run, model="meta-llama/L|3")
    report, head = write_report(tmp_path)
    assert len(head) == len(runs)
    assert sorted(p.parent for p in (tmp_path / "plots").iterdir()) == [tmp_path / "plots"] * 2
    widths: list[int] = []
    for line in report.read_text().splitlines() + [""]:
        if line.startswith("|"):
            widths.append(len(re.split(r"(?<!\\)\|", line)))
        elif widths:
            assert len(set(widths)) == 1, widths  # every row of a table has the header's columns
            widths = []
