"""``make gpu-check`` (bench/gpu_check.py): it refuses cleanly without CUDA, its --tiny CPU dry run goes through every
stage on the engine and writes its results, and it (with the core and the planner) imports on a Python without hydra,
omegaconf, datasets or lm_eval."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from bench.gpu_check import main
from tests.runner_utils import ROOT

BLOCKED = "hydra,omegaconf,datasets,lm_eval"
FIELDS = {"name", "path", "compiled", "peak_planned_gib", "peak_measured_gib", "ms_per_step", "floor_ms",
          "tokens_per_s", "logits_max_abs_diff"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_it_refuses_with_one_line(tmp_path, capsys):
    assert main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: bench.gpu_check needs a CUDA device")
    assert not list(tmp_path.iterdir())


def test_the_tiny_dry_run_covers_every_stage_on_the_engine(tmp_path):
    assert main(["--tiny", "--no-compile", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["status"].startswith("DRY RUN") and result["versions"]["torch"] == torch.__version__
    stages = result["stages"]
    assert [s["name"] for s in stages] == ["snapstream_decode", "full_decode", "prefill_120k", "equal_memory_full",
                                           "equal_memory_snapstream"]
    for s in stages:
        assert FIELDS <= set(s) and s["path"] == "engine" and "error" not in s and "skipped" not in s, s
        assert s["peak_planned_gib"] > 0 and s["tokens_per_s"] > 0
        assert s["compiled"] is False and s["logits_max_abs_diff"] is None  # --no-compile: nothing to compare
    decode = [s for s in stages if s["name"] != "prefill_120k"]
    assert all(s["ms_per_step"] > 0 and s["floor_ms"] > 0 for s in decode)
    full = stages[1]
    assert full["prompt"] + full["steps"] == 64 + 512 - 1  # rows as full as the job's slots (the last token: no slot)
    assert result["equal_memory"]["ratio"] > 0
    assert "| snapstream_decode | engine | False | 3 (60) |" in (tmp_path / "gpu_check.md").read_text()


def test_a_stage_past_the_deadline_is_skipped_with_the_reason(tmp_path):
    assert main(["--tiny", "--deadline-s", "1", "--only", "full_decode", "--out", str(tmp_path)]) == 0
    (stage,) = json.loads((tmp_path / "gpu_check.json").read_text())["stages"]
    assert stage["skipped"].startswith("time budget") and stage["ms_per_step"] is None


def test_the_gpu_check_core_and_planner_import_without_hydra_omegaconf_datasets_lm_eval():
    code = ("import sys\n"
            "import bench.gpu_check, evals.plan, evals.plan.cost, snapstream_core.engine, snapstream_core.prefill\n"
            "import snapstream_core.memory, snapstream_core.generate\n"
            "try:\n    import omegaconf\nexcept ModuleNotFoundError:\n    print('blocked')\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED.split(',')!r}))\n")
    out = subprocess.run([sys.executable, "-m", "bench.without", BLOCKED, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["blocked", "[]"]
