"""The sampling terms of the memory model and the step time against one ``pick_rows`` call measured on CPU, for
greedy, temperature, top-p and top-k + top-p rows: the bytes allocated at the peak (``LiveBytes``; top-p's sort
scratch, inside one op, is not trackable and is modelled apart) and the bytes the ops read and write
(``OpTraffic``), each never below the tracked figure and at most 15% above it. Measured by ``bench.planner_terms``
in a fresh process (the peak depends on when a long-lived process releases intermediate storages)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMALL = 1024  # the (rows,) and (vocab,) vectors beside the per-entry terms: tokens, keys, the vocabulary index


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("planner_terms")
    done = subprocess.run([sys.executable, "-m", "bench.planner_terms", "--only", "sampling", "--out", str(out),
                           "--sampling-shapes", "4x32000,8x8192"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out / "sampling.csv") as f:
        return list(csv.DictReader(f))


def test_every_setting_and_shape_was_measured(measured):
    assert {(r["settings"], r["rows"]) for r in measured} == {
        (s, r) for s in ("greedy", "temperature", "top_p", "top_k_top_p") for r in ("4", "8")}


def test_the_sampling_peak_per_entry_bounds_the_tracked_peak_within_15_percent(measured):
    for r in measured:
        entries = int(r["rows"]) * int(r["vocab"])
        tracked, modelled = int(r["tracked_peak_bytes"]), int(r["modelled_peak_per_entry"]) * entries
        assert tracked <= modelled + SMALL, r
        if r["settings"] != "greedy":  # greedy allocates only its (rows,) argmax
            assert modelled <= 1.15 * tracked, r


def test_the_sampling_traffic_per_entry_bounds_the_counted_bytes_within_15_percent(measured):
    for r in measured:
        entries = int(r["rows"]) * int(r["vocab"])
        tracked, modelled = int(r["tracked_traffic_bytes"]), int(r["modelled_traffic_per_entry"]) * entries
        assert tracked <= modelled + SMALL <= 1.15 * tracked + SMALL, r
