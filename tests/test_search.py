"""``python -m evals.search`` end to end on tiny_llama (runs reused, a killed search resumed, every value of
search.csv as evals.report gives it), its fixed sequence on made-up measurements, and its one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from evals.analysis.noninferiority import NonInferiority
from evals.search import run_sequence, split_args
from evals.search.__main__ import main
from evals.search.runs import check_searchable

ARGS = ["model=tiny_llama", "task=needle", "task.context_tokens=128", "task.n_items=12", "gen.max_new_tokens=2",
        "compression=snapkv"]


def _fake(results: dict[int, bool]):
    def measure(budget):
        return SimpleNamespace(test=NonInferiority(0.0, 0.01 if results[budget] else 0.5, results[budget], 12, "t"))
    return measure


def test_the_sequence_runs_from_the_largest_budget_down_and_stops_at_the_first_failure():
    lines, asked = [], []

    def measure(budget):
        asked.append(budget)
        return _fake({64: True, 128: False, 256: True, 512: True})(budget)

    steps = run_sequence([64, 128, 256, 512], measure, 0.05, lines.append)
    assert asked == [512, 256, 128]  # 64 never run: the sequence ended at 128
    assert [s.verdict for s in steps] == ["not_tested", "not_shown", "safe", "safe"]
    assert lines[0] == "search: testing budget 512 (the largest budget: first in the fixed sequence)"
    assert "testing budget 256 (512 was shown safe; the next smaller budget)" in lines[2]
    assert "budgets 64 not tested" in lines[-1]


def test_a_budget_whose_loss_is_shown_beyond_the_margin_is_shown_to_lose():
    from evals.search.output import answer_line, rows

    def measure(budget):
        lose = budget == 128
        test = NonInferiority(-40.0 if lose else 0.0, 1.0 if lose else 0.01, not lose, 30, "t", lose=lose,
                              p_lose=0.001 if lose else 1.0, estimand="these_items")
        run = SimpleNamespace(value=60.0 if lose else 100.0, run_dir="r")
        return SimpleNamespace(test=test, delta=test.delta, ci_low=-56.7, ci_high=-23.3, n_items=30, run=run,
                               reference=SimpleNamespace(value=100.0))

    lines = []
    steps = run_sequence([64, 128, 256], measure, 0.05, lines.append)
    assert [s.verdict for s in steps] == ["not_tested", "shown_to_lose", "safe"]
    assert lines[-1].startswith("search: budget 128 shown to lose more than the margin: Δ -40, one-sided p 1 "
                                "(t, 30 items, on these items); p 0.001 <= alpha 0.05 for a loss beyond it; stopping")
    table = rows("m", "needle", "snapkv", steps, 20.0, 0.05, {}, estimand="these_items")
    assert list(table["verdict"]) == ["not_tested", "shown_to_lose", "safe"]
    assert list(table["estimand"]) == ["these_items"] * 3 and table["p_lose"].iloc[1] == 0.001
    steps[2] = type(steps[2])(256, "not_tested")  # the largest tested budget is the one shown to lose
    assert answer_line(steps, 20.0, 0.05, "%", {}) == (
        "no tested budget is shown safe: the largest, 128, has Δ -40 [-56.7, -23.3] points on 30 items: shown to "
        "lose more than 20 points on these items (one-sided p 0.001 ≤ 0.05)")


@pytest.mark.parametrize("args,message", [
    (["search.max_loss=0"], "search.max_loss: must be a number > 0"),
    (["search.max_loss=inf"], "search.max_loss: must be a number > 0"),
    (["search.max_loss=2", "search.budgets=[64,2.5]"], "search.budgets: must be an integer >= 1, got 2.5"),
    (["search.max_loss=2", "search.budgets=[abc]"], "search.budgets: must be an integer >= 1, got 'abc'"),
    (["search.max_loss=-1"], "search.max_loss: must be a number > 0"),
    ([], "search.max_loss: required"),
    (["search.max_loss=2", "search.budgets=[256,128]"], "search.budgets: must be strictly ascending"),
    (["search.max_loss=2", "search.alpha=0.7"], "search.alpha: must be a number in (0, 0.5)"),
    (["search.max_loss=2", "search.margin=3"], "search.margin: no such search knob"),
    (["search.max_loss=2", "search.estimand=items"], "search.estimand: these_items or population, got 'items'"),
    (["search.max_loss=2", "compression.prompt_budget=64"], "compression.prompt_budget: set by the search"),
    (["search.max_loss=2", "hydra/launcher=slurm"], "hydra/launcher: evals.search runs the jobs"),
])
def test_bad_search_knobs_are_one_line(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        split_args(["compression=snapkv", *args])


@pytest.mark.parametrize("args,message", [
    (["compression=none"], "error: compression: the search needs a compression method"),
    (["compression=snapkv", "task=lm_eval", "task.name=gsm8k"], "error: task=lm_eval (gsm8k): no paired headline"),
    (["compression=snapkv", "search.budgets=[64,64]"], "error: search.budgets: must be strictly ascending"),
    (["compression=snapkv", "gen.temperature=abc"], "error: gen.temperature"),
    (["compression=snapkv", "search.budgets=[16,64]"], "error: compression.prompt_budget"),
    (["compression=snapkv", "search.budgets=[1000000000000000000000000000000]"],
     "error: search.budgets: 1000000000000000000000000000000 is beyond the context of model tiny_llama "
     "(model.max_context 4096 prompt tokens)"),
])
def test_bad_jobs_are_refused_before_anything_runs(args, message, tmp_path, capsys):
    assert main(["model=tiny_llama", f"out_root={tmp_path}", "search.max_loss=2", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err
    assert not any(tmp_path.iterdir())


def test_a_method_without_a_budget_is_refused(monkeypatch):
    class Fixed:
        budget_knob = "prompt_budget"

        @staticmethod
        def field_names():
            return ["sinks", "recent"]

    monkeypatch.setitem(__import__("evals.search.runs", fromlist=["METHODS"]).METHODS, "fixed", Fixed)
    with pytest.raises(ValueError, match="compression=fixed: has no budget to search over"):
        check_searchable("fixed", "needle", "needle")


def _rows(run_dir: str) -> int:
    return sum(1 for line in open(Path(run_dir) / "samples.jsonl") if line.strip())


@pytest.mark.slow  # 9-13 s on 2 cores: make test under 10 minutes
def test_search_end_to_end_reuses_resumes_and_agrees_with_the_report(tmp_path, capsys, monkeypatch):
    args = [*ARGS, f"out_root={tmp_path}", "search.max_loss=40", "search.budgets=[64,128,512]"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == ("smallest budget with loss ≤ 40 points at 95%: 64, KV 3.4× smaller than "
                                           "the full cache at the longest prompt (on these items)")
    first = pd.read_csv(tmp_path / "search.csv")
    assert list(first.columns[:13]) == ["search_id", "model", "task", "method", "budget", "kv_ratio", "n_items",
                                        "value", "reference", "delta", "ci_low", "ci_high", "verdict"]
    assert first["search_id"].nunique() == 1 and set(first["max_loss"]) == {40} and set(first["budgets"]) == {
        "64 128 512"} and "compression=snapkv" in first["overrides"].iloc[0]
    assert list(first["verdict"]) == ["safe"] * 3 and (tmp_path / "plots/search__needle__tiny_llama__snapkv.png"
                                                      ).stat().st_size > 0
    copied = json.loads((Path(first.set_index("budget").loc[512, "run_dir"]) / "meta.json").read_text())
    assert copied.get("same_as")  # 512 keeps every token of these prompts: copied from the full cache

    # Every value is what evals.report gives for that run.
    from evals.report import write_report

    write_report(tmp_path)
    deltas = pd.read_csv(tmp_path / "deltas.csv").set_index("budget")
    for _, row in first.iterrows():
        d = deltas.loc[row["budget"]]
        for col in ("value", "reference", "delta", "ci_low", "ci_high", "n_items"):
            assert row[col] == d[col] or (pd.isna(row[col]) and pd.isna(d[col])), (row["budget"], col)

    # A second search generates nothing: no backend is ever built.
    def no_generation(*a, **k):
        raise AssertionError("a finished search generated again")

    monkeypatch.setattr("evals.execute.generate.make_backend", no_generation)
    assert main(args) == 0
    assert pd.read_csv(tmp_path / "search.csv").equals(first)

    # A search killed in the middle of budget 128 resumes it (and only it) and ends as before.
    run128 = first.set_index("budget").loc[128, "run_dir"]
    lines = open(Path(run128) / "samples.jsonl").read().splitlines(keepends=True)
    Path(run128, "samples.jsonl").write_text("".join(lines[:5]))
    meta = json.loads(Path(run128, "meta.json").read_text())
    Path(run128, "meta.json").write_text(json.dumps({**meta, "status": "running"}))
    monkeypatch.undo()
    assert main(args) == 0
    assert _rows(run128) == 12
    assert pd.read_csv(tmp_path / "search.csv").drop(columns="run_dir").equals(first.drop(columns="run_dir"))


def test_a_budget_not_shown_safe_ends_the_search(tmp_path, capsys):
    args = [*ARGS, "task.n_items=6", f"out_root={tmp_path}", "search.max_loss=10", "search.budgets=[64,128]"]
    assert main(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("no tested budget is shown safe: the largest, 128, has Δ +0 [n.m.] points on 6 items")
    table = pd.read_csv(tmp_path / "search.csv")
    assert list(table["verdict"]) == ["not_tested", "not_shown"]
    assert not any("pb64" in p.name for p in tmp_path.rglob("*"))  # the untested budget was never run


def test_a_sweep_runs_one_search_per_combination_over_one_full_cache(tmp_path, capsys):
    args = ["-m", *ARGS[:-1], "task.n_items=6", "compression=snapkv,streaming_llm", f"out_root={tmp_path}",
            "search.max_loss=10", "search.budgets=[128]"]
    assert main(args) == 0
    answers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("no tested budget")]
    assert len(answers) == 2
    table = pd.read_csv(tmp_path / "search.csv")
    assert sorted(table["method"]) == ["snapkv", "streaming_llm"] and set(table["reference"]) == {0.0}
    assert len(list(tmp_path.rglob("none/*/fp-*/meta.json"))) == 1  # both searches share the full-cache run


def test_search_knobs_read_numbers_as_evals_run_does():
    """``5e-1`` is a number for the search's knobs as for evals.run's (Hydra's grammar, evals/record/numbers.py)."""
    opts, rest = split_args(["compression=snapkv", "search.max_loss=5e-1", "search.alpha=2.5e-2",
                             "search.budgets=[256,512]"])
    assert (opts.max_loss, opts.alpha, opts.budgets) == (0.5, 0.025, (256, 512)) and rest == ["compression=snapkv"]
    assert split_args(["search.max_loss=2", "search.budgets=128"])[0].budgets == (128,)


def _search_rows(max_loss: float, budgets=(64, 128), overrides=("compression=snapkv",)):
    from evals.analysis.sequential import NOT_TESTED, Step
    from evals.search.output import rows

    return rows("m", "needle", "snapkv", [Step(b, NOT_TESTED) for b in budgets], max_loss, 0.05, {},
                overrides=list(overrides))


def test_search_csv_keeps_every_search_and_replaces_only_a_rerun(tmp_path):
    from evals.search.output import write_csv

    write_csv(tmp_path, _search_rows(2.0))
    write_csv(tmp_path, _search_rows(5.0))  # the same job under another margin: another search
    write_csv(tmp_path, _search_rows(2.0, overrides=("compression=snapkv", "task.limit=10")))
    write_csv(tmp_path, _search_rows(2.0))  # the first search again: its rows replaced, not doubled
    table = pd.read_csv(tmp_path / "search.csv")
    assert len(table) == 6 and table["search_id"].nunique() == 3
    assert sorted(table.groupby("search_id")["max_loss"].first()) == [2.0, 2.0, 5.0]


def _write_one(root: str, margin: float) -> None:
    from evals.search.output import write_csv

    write_csv(Path(root), _search_rows(margin, budgets=tuple(range(64, 64 + 40))))


def test_concurrent_searches_all_keep_their_rows(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_one, args=(str(tmp_path), 1.0 + i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    table = pd.read_csv(tmp_path / "search.csv")
    assert len(table) == 4 * 40 and sorted(table["max_loss"].unique()) == [1.0, 2.0, 3.0, 4.0]


def _special(path: Path, kind: str) -> None:
    if kind == "folder":
        path.mkdir()
    elif kind == "link":
        path.symlink_to(path.parent / "elsewhere")
    else:
        os.mkfifo(path)


@pytest.mark.parametrize("name,kind,why", [
    (".search.csv.lock", "link", "a symbolic link, not a regular file"),
    (".search.csv.lock", "folder", "a folder, not a regular file"),
    ("search.csv", "folder", "a folder, not a regular file"),
    ("search.csv", "fifo", "a FIFO, not a regular file"),
    ("search.csv", "link", "a symbolic link, not a regular file"),
])
def test_a_special_file_at_search_csv_or_its_lock_is_one_line(tmp_path, name, kind, why):
    """A linked or folder lock, or a folder search.csv, was a traceback after every budget had run."""
    from evals.search.output import record, write_csv

    _special(tmp_path / name, kind)
    with pytest.raises(ValueError) as err:
        write_csv(tmp_path, _search_rows(2.0))
    assert str(err.value) == f"{tmp_path / name}: {why}; the search writes only a regular file there (remove it)"
    assert not (tmp_path / "elsewhere").exists()  # nothing written through the link
    said: list[str] = []
    record(tmp_path, "needle · m · snapkv", _search_rows(2.0), [], 2.0, 0.05, said.append)  # never raises
    assert said == [f"search: needle · m · snapkv: search.csv not written: {err.value}"]


def test_an_empty_search_csv_is_named_and_this_search_keeps_its_rows(tmp_path, caplog):
    from evals.search.output import write_csv

    (tmp_path / "search.csv").write_bytes(b"")
    write_csv(tmp_path, _search_rows(2.0))
    assert len(pd.read_csv(tmp_path / "search.csv")) == 2
    assert caplog.messages == [f"{tmp_path / 'search.csv'}: empty; read as holding no earlier search"]


def test_a_search_csv_that_is_not_a_table_is_left_as_it_is(tmp_path):
    from evals.search.output import write_csv

    (tmp_path / "search.csv").write_bytes(b'a,b\n"x,1\n')
    with pytest.raises(ValueError, match=r"search.csv: not a CSV table \(.*\); left as it is"):
        write_csv(tmp_path, _search_rows(2.0))
    assert (tmp_path / "search.csv").read_bytes() == b'a,b\n"x,1\n'


def test_the_answer_line_is_printed_when_search_csv_cannot_be_written(tmp_path, capsys):
    (tmp_path / "search.csv").mkdir()
    args = [*ARGS, "task.n_items=6", f"out_root={tmp_path}", "search.max_loss=10", "search.budgets=[128]"]
    assert main(args) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("no tested budget is shown safe: the largest, 128, has Δ +0 [n.m.] points on 6 items")
    assert f"search: needle · tiny_llama · snapkv: search.csv not written: {tmp_path / 'search.csv'}: a folder, " \
           "not a regular file; the search writes only a regular file there (remove it)" in out
    assert (tmp_path / "plots/search__needle__tiny_llama__snapkv.png").stat().st_size > 0


def test_the_population_estimand_is_named_with_its_limit(tmp_path, capsys):
    args = [*ARGS, "task.n_items=6", f"out_root={tmp_path}", "search.max_loss=10", "search.budgets=[128]",
            "search.estimand=population"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ("population: 6 items cannot show a loss below 10 at alpha 0.05 (any valid test needs at least 29 "
            "unchanged items: log(alpha)/log(1 - margin)); search.estimand=these_items asks about these items") in out
    assert out.strip().splitlines()[-1].endswith("for a loss below 10 on the population of items (more items or "
                                                 "samples, or a larger margin or budget)")
    assert list(pd.read_csv(tmp_path / "search.csv")["estimand"]) == ["population"]
