"""``make gpu-check`` (bench/gpu_check.py): it refuses cleanly without CUDA, and its --tiny CPU dry run goes through
every step and writes its results."""

from __future__ import annotations

import json

import pytest
import torch

from bench.gpu_check import main, wasted_steps


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_it_refuses_with_one_line(tmp_path, capsys):
    assert main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: bench.gpu_check needs a CUDA device")
    assert not list(tmp_path.iterdir())


def test_the_tiny_dry_run_covers_every_step(tmp_path):
    assert main(["--tiny", "--contexts", "96", "--steps", "4", "--max-rows", "3", "--no-planner",
                 "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "check.json").read_text())
    assert result["status"].startswith("DRY RUN")
    assert [t["method"] for t in result["tokens"]] == ["none", "snapstream"]
    assert all(t["equal"] and not t["error"] for t in result["tokens"])
    decode = result["decode"]
    assert {(d["method"], d["rows"]) for d in decode} == {("none", 1), ("none", 3), ("snapstream", 1),
                                                          ("snapstream", 3)}
    assert all("error" not in d and d["ms_per_step"] > 0 and d["floor_ms"] > 0 for d in decode)
    assert result["equal_memory"]["ratio"] > 0
    assert "| snapstream | 96 | 3 | 3 |" in (tmp_path / "check.md").read_text()


def test_row_retirement_wastes_fewer_steps_than_a_batch():
    for w in wasted_steps(samples=256, rows=(8, 32)):
        assert 0 <= w["retirement_wasted_share"] < w["batch_wasted_share"] < 1
