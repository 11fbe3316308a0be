"""``+experiment=reasoning_budget``: TriAttention's AIME table (H2O and random eviction beside it) as seven jobs,
costed by ``evals.plan`` before anything loads, each method at a 512-entry footprint; a missing calibration file is
noted in the plan and refused in one line by the run."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from evals.plan.__main__ import main as plan_main
from snapstream_core.calibration import save_stats

R1 = dict(n_layers=32, n_heads=32, head_dim=128)
JOBS = ("none", "snapkv_decode", "rkv", "triattention", "snapstream", "h2o", "random")


def _r1_calibration(cache):
    q = torch.zeros(R1["n_layers"], R1["n_heads"], R1["head_dim"] // 2, dtype=torch.complex64)
    save_stats(cache / "calibration" / "r1_distill_llama_8b.safetensors", q, q.abs(), n_kv_heads=8,
               rope_theta=500000.0, rope_type="llama3")


def test_the_plan_costs_seven_jobs_at_one_footprint_before_anything_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SNAPSTREAM_CACHE", str(tmp_path / "cache"))
    _r1_calibration(tmp_path / "cache")
    assert plan_main(["-m", "+experiment=reasoning_budget", f"out_root={tmp_path}"]) == 0
    plan = pd.read_csv(tmp_path / "plan.csv").set_index("compression")
    assert sorted(plan.index) == sorted(JOBS)
    assert (plan["n_samples"] == 8).all() and (plan["n_items"] == 30).all()
    assert "/triattention-cache-b512-i128-" in plan.loc["triattention", "run_dir"]  # the cap in the run's name
    # the whole cache at 512 entries: a row holds at most 512 + 128 between compactions; snapstream 128 + 384
    assert plan.loc["triattention", "slots"] == plan.loc["rkv", "slots"] == plan.loc["h2o", "slots"] == 640
    assert plan.loc["random", "slots"] == 640  # the prompt (~150 tokens) kept within the 512
    assert plan.loc["snapstream", "slots"] == 512
    assert plan.loc["none", "slots"] > 32768


def test_a_missing_calibration_is_noted_in_the_plan_and_refused_by_the_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SNAPSTREAM_CACHE", str(tmp_path / "empty"))
    assert plan_main(["-m", "+experiment=reasoning_budget", f"out_root={tmp_path}"]) == 0  # planning needs no data
    plan = pd.read_csv(tmp_path / "plan.csv")
    assert sorted(plan["compression"]) == sorted(JOBS)
    out = capsys.readouterr().out.splitlines()
    notes = [line for line in out if line.startswith("note: ")]
    assert len(notes) == 1 and "compression=triattention" in notes[0]
    assert "compression.calibration: no such file yet" in notes[0] and "r1_distill_llama_8b.safetensors" in notes[0]
    assert "evals.run refuses the job" in notes[0] and "python -m evals.calibrate" in notes[0]
    assert not any("x the estimate of this grid" in line for line in out)  # compared with the paper grid only

    from evals.cli import precheck  # the run itself refuses it, in one line, before anything loads

    with pytest.raises(SystemExit) as exit_:
        precheck(["-m", "+experiment=reasoning_budget", f"out_root={tmp_path}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "compression=triattention" in err[0]
    assert "compression.calibration: no such file" in err[0]
