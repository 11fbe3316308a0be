"""``bench/kv_formats.py`` at a tiny size on ``tiny_llama`` (fp32): its files, an FP8 row at a quarter of the
reference's bytes, and the reference fed its own greedy tokens agreeing with itself at every step."""

from __future__ import annotations

import csv

import pytest

from bench import kv_formats
from bench.kv_formats_out import COLUMNS

NEW = 6


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("kv_formats")
    kv_formats.main(["--model", "tiny_llama", "--items", "1", "--lengths", "40", "--new-tokens", str(NEW),
                     "--arms", "none,fp8_tensor,kivi2,rkv,rkv_fp8", "--budget", "9", "--interval", "4",
                     "--group-size", "16", "--residual", "16", "--out", str(out)])
    with (out / "kv_formats.csv").open() as f:
        rows = list(csv.DictReader(f))
    return out, rows


def by_arm(rows, kind="prompt"):
    return {r["arm"]: r for r in rows if r["row"] == kind}


def test_files_and_columns(result):
    out, rows = result
    assert list(rows[0]) == COLUMNS
    assert (out / "kv_formats.md").read_text().count("| 40 |") == 5
    assert (out / "kv_formats.png").stat().st_size > 0
    assert [r["row"] for r in rows] == ["prompt"] * 5 + ["summary"] * 5


def test_fp8_holds_a_quarter_of_the_bytes(result):
    _, rows = result
    arms = by_arm(rows)
    fp8, ref = arms["fp8_tensor"], arms["none"]
    assert float(fp8["bytes_ratio"]) == pytest.approx(0.25, abs=0.005)
    assert int(fp8["kv_bytes_peak"]) == int(fp8["row_alloc_bytes"]) == int(fp8["planner_kv_bytes"])
    assert int(ref["kv_bytes_peak"]) == int(ref["row_alloc_bytes"]) == int(ref["planner_kv_bytes"])
    assert float(fp8["mean_kl"]) > 0  # the arm decoded through its own FP8 rows, not the reference's
    assert float(fp8["kv_floor_ratio"]) == pytest.approx(0.25, abs=0.005)


def test_kivi_bytes_are_the_planners(result):
    _, rows = result
    kivi = by_arm(rows)["kivi2"]
    assert int(kivi["kv_bytes_peak"]) == int(kivi["row_alloc_bytes"]) == int(kivi["planner_kv_bytes"])
    assert 0 < float(kivi["bytes_ratio"]) < 1 and float(kivi["mean_kl"]) > 0


def test_reference_agrees_with_itself(result):
    _, rows = result
    ref = by_arm(rows)["none"]
    assert float(ref["top1_agree"]) == 1.0 and float(ref["mean_kl"]) == 0.0
    assert int(ref["greedy_prefix"]) == NEW  # forced with its own greedy tokens, it decodes them again
    assert float(ref["bytes_ratio"]) == 1.0 and float(ref["step_ratio"]) == 1.0


def test_rkv_compacts_and_equal_budget_bytes(result):
    _, rows = result
    arms = by_arm(rows)
    assert int(arms["rkv"]["compactions"]) >= 1 and int(arms["rkv_fp8"]["compactions"]) >= 1
    assert int(arms["rkv_fp8"]["budget"]) == 4 * int(arms["rkv"]["budget"])  # fp32: 4 bytes per element
    assert float(arms["rkv"]["bytes_ratio"]) < 1 and float(arms["rkv_fp8"]["bytes_ratio"]) < 1


def test_unknown_arm_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="--arms: unknown arm 'fp4'"):
        kv_formats.main(["--model", "tiny_llama", "--arms", "none,fp4", "--out", str(tmp_path)])
