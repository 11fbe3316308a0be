"""Inputs that hung a run or killed a report: a FIFO (or another non-regular file) at a run file's path is one line
naming it, before anything is opened; a summary with an infinity, a NaN headline or a negative count is left out of
the report with one line naming the file and the column, and the rest of the report is written."""

from __future__ import annotations

import os
import signal

import pandas as pd
import pytest

from evals.report import main
from evals.run import run
from tests.hang_guard import Hung, raise_hung
from tests.runner_utils import compose_cfg
from tests.small_runs import replay_args
from tests.test_report import RUNS, _write


@pytest.mark.parametrize("name,kind", [("samples.jsonl", "a FIFO"), ("meta.json", "a FIFO"),
                                       ("summary.csv", "a folder")])
def test_a_non_regular_file_at_a_run_file_is_one_line(tmp_path, name, kind):
    """A FIFO at ``samples.jsonl`` blocked the run forever with no message."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if kind == "a FIFO":
        os.mkfifo(run_dir / name)
    else:
        (run_dir / name).mkdir()
    old = signal.signal(signal.SIGALRM, raise_hung)
    signal.alarm(60)
    try:
        with pytest.raises(ValueError) as err:
            run(compose_cfg(replay_args(tmp_path)), run_dir)
    except Hung:
        pytest.fail(f"the run waited on {name}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert str(err.value) == (f"hydra.run.dir: {run_dir / name} is {kind}, not a regular file; a run reads and writes "
                              "only those (remove it or choose another hydra.run.dir)")
    assert sorted(p.name for p in run_dir.iterdir()) == [name]


BAD = {  # run -> (column, value on the headline row, the reason the report gives)
    "r_k7": ("value", float("inf"), "column value: infinite (inf: metric accuracy, group all)"),
    "r_k15": ("value", float("nan"), "column value: nan for the headline accuracy: metric accuracy, group all"),
    "r_stream": ("n", -5, "column n: negative (-5: metric accuracy, group all)"),
}


def test_a_summary_with_bad_numbers_is_left_out_with_one_line_and_the_report_written(tmp_path, caplog):
    """``inf`` in one run's summary stopped the whole report (``Data cannot be log-scaled``) naming no file;
    ``n=-5`` was printed as is."""
    for r in RUNS:
        run_dir = _write(tmp_path, r)
        if r[0] in BAD:
            col, value, _ = BAD[r[0]]
            frame = pd.read_csv(run_dir / "summary.csv")
            frame.loc[0, col] = value
            frame.to_csv(run_dir / "summary.csv", index=False)
    assert main([str(tmp_path)]) == 0
    skipped = [m for m in caplog.messages if "skipped" in m]
    assert sorted(skipped) == sorted(f"{tmp_path / r / 'summary.csv'}: skipped ({why})"
                                     for r, (_, _, why) in BAD.items())
    summary = pd.read_csv(tmp_path / "summary_all.csv")
    assert set(summary["run"]) == {"r_none"} and (tmp_path / "report.md").stat().st_size > 0
