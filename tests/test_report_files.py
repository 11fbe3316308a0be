"""The report's files: ``evals.report`` writes every file whole or not at all, never through a planted link, with
names escaped in paths and tables; a ``summary.csv`` that is a FIFO, a folder, empty or not a table is skipped with
one line naming it; a full or read-only disk is one line and the earlier report stays as it was."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys

import pytest

import evals.report.output
from evals.report import main
from tests.hang_guard import Hung, raise_hung
from tests.test_report import RUNS, _write

REPORT_FILES = ("report.md", "report.html", "summary_all.csv", "deltas.csv")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "results"
    for run in RUNS[:2]:
        _write(root, run)
    return root


def digest(root) -> dict[str, str]:
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in REPORT_FILES}


def test_links_planted_at_the_outputs_are_replaced_never_written_through(tree, tmp_path):
    """``report.md`` (or another output) planted as a link to a victim is replaced; the victim is never written."""
    names = [*REPORT_FILES, "plots/frontier__needle__m.png"]
    (tree / "plots").mkdir()
    for i, name in enumerate(names):
        (tmp_path / f"victim{i}").write_bytes(b"precious")
        (tree / name).symlink_to(tmp_path / f"victim{i}")
    assert main([str(tree)]) == 0
    for i, name in enumerate(names):
        assert (tmp_path / f"victim{i}").read_bytes() == b"precious"
        assert not (tree / name).is_symlink() and (tree / name).stat().st_size > 0
    assert not [p for p in tree.rglob(".*.tmp")]


def test_a_planted_plots_link_is_refused_in_one_line(tree, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tree / "plots").symlink_to(elsewhere)
    assert main([str(tree)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tree / 'plots'}: is a symbolic link; a report never writes through one (remove it)\n"
    assert list(elsewhere.iterdir()) == []


def test_a_fifo_named_summary_csv_is_skipped_not_waited_on(tree, caplog):
    """A FIFO named ``summary.csv`` is skipped; the report never waits on it."""
    (tree / "pipe").mkdir()
    os.mkfifo(tree / "pipe" / "summary.csv")
    old = signal.signal(signal.SIGALRM, raise_hung)
    signal.alarm(60)
    try:
        assert main([str(tree)]) == 0
    except Hung:
        pytest.fail("evals.report waited on a FIFO")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert caplog.messages == [f"{tree / 'pipe' / 'summary.csv'}: skipped (a FIFO, not a regular file)"]


BAD = {  # folder -> (how its summary.csv is made, the reason the report gives)
    "folder": (lambda p: p.mkdir(), "a folder, not a regular file"),  # C3
    "empty": (lambda p: p.write_bytes(b""), "empty"),  # C4
    "blank": (lambda p: p.write_bytes(b"\n \n"), "empty"),
    "columns": (lambda p: p.write_bytes(b"a,b\n1,2\n"), "no column model, task, method, metric, value"),
    "quote": (lambda p: p.write_bytes(b'model,task\n"m,x\n'), "not a CSV table: "),
    "header": (lambda p: p.write_bytes(b"model,task,method,metric,value\n"), "no rows"),
}


def test_bad_summary_csv_entries_are_skipped_with_one_line_naming_each(tree, caplog):
    """A ``summary.csv`` that is a folder, empty, not a table or without rows is skipped with one line naming it;
    the other runs are reported."""
    for folder, (make, _) in BAD.items():
        (tree / folder).mkdir()
        make(tree / folder / "summary.csv")
    assert main([str(tree)]) == 0
    lines = sorted(m for m in caplog.messages if "skipped" in m)
    assert len(lines) == len(BAD), lines
    for line, (folder, (_, reason)) in zip(lines, sorted(BAD.items())):
        assert line.startswith(f"{tree / folder / 'summary.csv'}: skipped ({reason}") and "\n" not in line, line
    assert "2 runs" in (tree / "report.md").read_text()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_summary_csv_is_skipped(tree, caplog):
    (tree / "bad").mkdir()
    (tree / "bad" / "summary.csv").write_text("x")
    (tree / "bad" / "summary.csv").chmod(0)
    assert main([str(tree)]) == 0
    assert "bad/summary.csv: skipped (Permission denied)" in caplog.text


def test_only_bad_summaries_is_one_error(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.csv").write_bytes(b"")
    assert main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith(f"error: DIR: no readable summary.csv under {tmp_path} (1 skipped)\n")


def test_a_disk_filling_up_midway_keeps_the_earlier_report_whole(tree, capsys, monkeypatch):
    """A full disk is one line and leaves the earlier report whole, never half-written. Here the third of the four
    files does not fit."""
    assert main([str(tree)]) == 0
    before = digest(tree)
    _write(tree, RUNS[2])  # a new run: every file of the report would change
    real, calls = evals.report.output._stage, []

    def full(path, data):
        calls.append(path.name)
        if path.name in REPORT_FILES and len([c for c in calls if c in REPORT_FILES]) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, data)

    monkeypatch.setattr(evals.report.output, "_stage", full)
    capsys.readouterr()
    assert main([str(tree)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "No space left on device" in err, err
    assert digest(tree) == before
    assert not [p for p in tree.rglob(".*.tmp")]


@pytest.mark.parametrize("options, fill", [
    ("ro", False),
    pytest.param("rw", True, marks=pytest.mark.slow),  # also covered, fast: test_a_disk_filling_up_midway...
])
def test_read_only_and_full_disks_are_one_line_and_the_old_report_stays(tree, tmp_path, options, fill):
    """The same on a real file system: a private tmpfs holding the report, remounted read-only or filled up."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux unshare")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    if subprocess.run(["unshare", *user, "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("mount namespaces are not available here")
    assert main([str(tree)]) == 0
    _write(tree, RUNS[2])
    mnt, sums = tmp_path / "mnt", tmp_path / "sums"
    mnt.mkdir()
    files = " ".join(REPORT_FILES)
    step = (f"mount -o remount,ro {mnt}" if options == "ro"
            else f"dd if=/dev/zero of={mnt}/fill bs=4k 2>/dev/null; true")
    script = (f"mount -t tmpfs -o size=4m tmpfs {mnt} && cp -a {tree}/. {mnt}/ && {step} && "
              f"(cd {mnt} && sha256sum {files}) > {sums}.before && "
              f"{sys.executable} -m evals.report {mnt}; rc=$?; (cd {mnt} && sha256sum {files}) > {sums}.after; "
              f"ls -a {mnt} {mnt}/plots > {sums}.ls; exit $rc")
    done = subprocess.run(["unshare", *user, "--mount", "sh", "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    message = "Read-only file system" if options == "ro" else "No space left on device"
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert (tmp_path / "sums.before").read_text() == (tmp_path / "sums.after").read_text()
    assert ".tmp" not in (tmp_path / "sums.ls").read_text()


def test_report_escapes_names_in_paths_and_tables(tmp_path):
    """A model name with ``/`` stays one plot file name, and a ``|`` in a name is escaped in every table row."""
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
