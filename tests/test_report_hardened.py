"""What a report or power command reads can be anything: a FIFO ``meta.json`` hung both commands, a deeply nested one
was a traceback, a summary value of 1e308 stopped the report naming no file, and a model name with a newline and
``<script>`` went raw into report.md's headings. Each is now one line naming the file (the run left out) or text that
stays text."""

from __future__ import annotations

import os
import re
import signal

import pandas as pd
import pytest

from evals import power
from evals.record.files import MAX_JSON_DEPTH, NotReadable, loads, read_json
from evals.report import collect, main
from tests.hang_guard import Hung, raise_hung
from tests.test_report import RUNS, _write


def _no_hang(call):
    old = signal.signal(signal.SIGALRM, raise_hung)
    signal.alarm(60)
    try:
        return call()
    except Hung:
        pytest.fail("the command waited on a FIFO")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _tree(root):
    for run in RUNS:
        run_dir = _write(root, run)
        rows = pd.read_csv(run_dir / "samples.csv")
        rows.assign(sample_idx=0).to_csv(run_dir / "samples.csv", index=False)  # what evals.power pairs on


@pytest.mark.parametrize("command", ["report", "power"])
@pytest.mark.parametrize("name", ["meta.json", "samples.csv"])
def test_a_fifo_in_a_run_is_one_line_and_the_run_left_out(tmp_path, caplog, capsys, command, name):
    _tree(tmp_path)
    (tmp_path / "r_k7" / name).unlink()
    os.mkfifo(tmp_path / "r_k7" / name)
    if command == "report":
        assert _no_hang(lambda: main([str(tmp_path)])) == 0
        assert set(pd.read_csv(tmp_path / "summary_all.csv")["run"]) == {"r_none", "r_k15", "r_stream"}
    else:
        assert _no_hang(lambda: power.main([str(tmp_path), "power.max_loss=10"])) == 0
        assert "r_k7" not in capsys.readouterr().out
    assert [m for m in caplog.messages if "skipped" in m] == [
        f"{tmp_path / 'r_k7' / name}: skipped (a FIFO, not a regular file)"]


@pytest.mark.parametrize("text,why", [("[" * 100_000, "JSON nested too deeply (more than 64 levels)"),
                                      ('{"a": ' * 70 + "1" + "}" * 70, "JSON nested too deeply (more than 64 levels)"),
                                      ("[1, 2", "not JSON (Expecting ',' delimiter: line 1 column 6 (char 5))"),
                                      ("[1, 2]", "not a JSON object")])
def test_a_meta_json_too_deep_or_not_an_object_is_one_line(tmp_path, caplog, text, why):
    """``[[[[...`` (100,000 levels) was a RecursionError traceback from the report."""
    _tree(tmp_path)
    (tmp_path / "r_k15" / "meta.json").write_text(text)
    assert set(collect(tmp_path)["run"]) == {"r_none", "r_k7", "r_stream"}  # what report and power read
    assert [m for m in caplog.messages if "skipped" in m] == [f"{tmp_path / 'r_k15' / 'meta.json'}: skipped ({why})"]


def test_json_depth_is_bounded_without_recursion(tmp_path):
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads(ok, "x") == eval(ok)  # noqa: S307 - a literal of nested lists
    with pytest.raises(NotReadable, match=r"^x: JSON nested too deeply"):
        loads("[" + ok + "]", "x")
    (tmp_path / "d").mkdir()
    with pytest.raises(NotReadable, match=r"d: a folder, not a regular file$"):
        read_json(tmp_path / "d")


@pytest.mark.parametrize("row,col,value", [(2, "value", 1e308), (0, "value", 1e308), (0, "value", -1e305),
                                           (0, "stderr", 1e301), (0, "n", 1e308), (2, "value", 1e299)])
def test_a_huge_finite_value_is_left_out_like_an_infinity(tmp_path, caplog, row, col, value):
    """``value=1e308`` (KV bytes held) gave no report and ``error: Axis limits cannot be NaN or Inf``, naming no
    file."""
    _tree(tmp_path)
    frame = pd.read_csv(tmp_path / "r_k7" / "summary.csv")
    frame[col] = frame[col].astype(float)
    frame.loc[row, col] = value
    frame.to_csv(tmp_path / "r_k7" / "summary.csv", index=False)
    if row == 2:  # the whole command: a report, not an error naming no file (1e299 too: its log axis overflowed)
        assert main([str(tmp_path)]) == 0
        assert (tmp_path / "report.md").stat().st_size > 0
    else:
        assert set(collect(tmp_path)["run"]) == {"r_none", "r_k15", "r_stream"}
    metric = frame.loc[row, "metric"]
    assert [m for m in caplog.messages if "skipped" in m] == [
        f"{tmp_path / 'r_k7' / 'summary.csv'}: skipped (column {col}: too large ({value:g}: metric {metric}, "
        "group all))"]


NAME = "evil\n<script>alert(1)</script> # [x](http://e.test) *b* | $\\frac{$"  # "$...$": TeX to matplotlib


def test_names_in_headings_and_tables_stay_text(tmp_path):
    """A model name with a newline and ``<script>`` went raw into report.md's headings (and one with ``$...$``
    stopped the report: matplotlib read it as TeX)."""
    for run in RUNS:
        run_dir = _write(tmp_path, run)
        frame = pd.read_csv(run_dir / "summary.csv")
        frame["model"] = NAME
        frame.to_csv(run_dir / "summary.csv", index=False)
    assert main([str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "<script>" not in text and "evil\n" not in text
    assert not [line for line in text.splitlines() if re.search(r"(?<!\\)\]\(", line) and not line.startswith("![")]
    headings = [line for line in text.splitlines() if line.startswith("## ") and "evil" in line]
    heading = "evil &lt;script&gt;alert(1)&lt;/script&gt; \\# \\[x\\](http://e.test) \\*b\\* \\| $\\\\frac{$"
    assert headings and all(heading in h for h in headings)
    rows = [line for line in text.splitlines() if line.startswith("|") and "evil" in line]
    assert rows and all("evil &lt;script&gt;alert(1)&lt;/script&gt; # [x]\\(http://e.test) *b* \\| $\\\\frac{$" in r
                        for r in rows)
    assert "<script>" not in (tmp_path / "report.html").read_text()
    assert len(list((tmp_path / "plots").glob("*.png"))) == 2


def test_a_huge_token_count_in_samples_csv_is_left_out_with_one_line(tmp_path, caplog):
    """``gen_tokens=1e308`` made the change in generated tokens ``inf`` in report.md."""
    from evals.report.paired import item_data

    pd.DataFrame({"item_id": ["a", "a", "b"], "correct": [True, False, True],
                  "gen_tokens": [10, 1e308, 30]}).to_csv(tmp_path / "samples.csv", index=False)
    data = item_data(tmp_path)
    assert data.gen.to_dict() == {"a": 10.0, "b": 30.0}
    assert caplog.messages == [f"{tmp_path / 'samples.csv'}: column gen_tokens: 1 values infinite or beyond 1e+100 "
                               "left out of the change in generated tokens (first: 1e+308)"]
