"""``make gpu-check`` (bench/gpu_check.py, its stages in bench/gpu_stages.py): it refuses cleanly without CUDA, every
stage runs on the engine in the --tiny CPU dry run, each stage is stopped at its limit and the check ends by its
deadline, and it (with the core and the planner) imports on a Python without hydra, omegaconf, datasets or lm_eval."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

from bench.gpu_check import ORDER, main
from bench.gpu_stages import main as stage_main
from tests.runner_utils import ROOT

BLOCKED = "hydra,omegaconf,datasets,lm_eval"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_it_refuses_with_one_line(tmp_path, capsys):
    assert main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: bench.gpu_check needs a CUDA device")
    assert not list(tmp_path.iterdir())


STAGE_FIELDS = {"name", "path", "compiled", "rows", "prompt", "peak_planned_gib", "model_build_s", "stage_s",
                "versions"}
DECODE_FIELDS = {"ms_per_step", "floor_ms", "floor_copy_ms", "tokens_per_s", "first_step_s", "record_s", "recompiles",
                 "host_reads_per_step"}


@pytest.mark.parametrize("name", list(ORDER))
def test_each_stage_runs_on_the_engine_in_the_tiny_dry_run(tmp_path, name):
    """Every registered stage, eager (the compiled path: ``python -m bench.gpu_check --tiny``, make test-compat):
    its record has the stage's figures, no host read in its decode steps (top-p on), and the block-mask stage
    measures a long and a short prompt."""
    out = tmp_path / "stage.json"
    context = json.dumps({"full_peak_bytes": 10**7}) if name == "equal_memory_snapstream" else "{}"
    assert stage_main([name, "--tiny", "--no-compile", "--max-rows", "3", "--result", str(out),
                       "--context", context]) == 0
    rec = json.loads(out.read_text())
    assert STAGE_FIELDS <= set(rec) and "error" not in rec and rec["path"] == "engine", rec
    assert rec["compiled"] is False and rec["peak_planned_gib"] > 0 and rec["tokens_per_s"] > 0
    if name != "prefill_120k":
        assert DECODE_FIELDS <= set(rec) and rec["host_reads_per_step"] == 0 and rec["recompiles"] == 0
        assert rec["ms_per_step"] > 0 and rec["floor_ms"] > 0 and rec["floor_copy_ms"] > 0
    if name == "full_decode":
        assert rec["prompt"] + rec["steps"] == 64 + 512 - 1  # rows as full as the job's slots (the last token: none)
    if name == "block_mask":
        assert rec["short_prompt"] < rec["prompt"] and rec["short_ms_per_step"] > 0 and rec["long_over_short"] > 0


def test_every_stage_is_stopped_at_its_limit_and_the_check_ends_by_its_deadline(tmp_path):
    """Stages of 2 s (a process importing torch needs more) within a 9 s deadline: each is killed at its limit and
    recorded so, those the deadline leaves no time are skipped, and the whole check (imports included) ends in
    time."""
    start = time.perf_counter()
    assert main(["--tiny", "--deadline-s", "9", "--stage-limit-s", "2", "--out", str(tmp_path)]) == 0
    assert time.perf_counter() - start < 9 + 3  # + writing the files and the last kill
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    stages = result["stages"]
    assert [s["name"] for s in stages] == list(ORDER)
    stopped = [s for s in stages if "stopped" in s]
    assert stopped and all(s["wall_s"] < s["limit_s"] + 1.5 and s["limit_s"] <= 2 for s in stopped)
    assert all("stopped" in s or s["skipped"].startswith("deadline") for s in stages)
    assert "stopped at its limit" in (tmp_path / "gpu_check.md").read_text()


def test_an_unknown_stage_is_refused_naming_the_option(capsys):
    with pytest.raises(SystemExit):
        main(["--tiny", "--only", "nope"])
    assert "--only: unknown stage nope" in capsys.readouterr().err


def test_the_gpu_check_core_and_planner_import_without_hydra_omegaconf_datasets_lm_eval():
    code = ("import sys\n"
            "import bench.gpu_check, bench.gpu_stages, evals.plan, evals.plan.cost, snapstream_core.engine\n"
            "import snapstream_core.memory, snapstream_core.generate, snapstream_core.prefill\n"
            "try:\n    import omegaconf\nexcept ModuleNotFoundError:\n    print('blocked')\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED.split(',')!r}))\n")
    out = subprocess.run([sys.executable, "-m", "bench.without", BLOCKED, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["blocked", "[]"]
