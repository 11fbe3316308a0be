"""``make gpu-check`` (bench/gpu_check.py, one stage per process: bench/gpu_stages.py, its pieces in bench/gpu/): it
refuses cleanly without CUDA; every stage runs on the engine in the --tiny CPU dry run; the stages are planned to
fit the deadline (limits summing to no more, the most informative first, the rest skipped with a reason); a stage
writes its record as it goes, so a stopped one says how far it got; the stages die with the check, however it
ends; and it imports on a Python without hydra, omegaconf, datasets or lm_eval."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.gpu.schedule import RESERVE_S, plan
from bench.gpu.table import COSTS, ORDER, TABLE
from bench.gpu_check import DEADLINE_S, main
from bench.gpu_stages import main as stage_main

ROOT = Path(__file__).resolve().parent.parent
BLOCKED = "hydra,omegaconf,datasets,lm_eval"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_it_refuses_with_one_line(tmp_path, capsys):
    assert main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: bench.gpu_check needs a CUDA device")
    assert not list(tmp_path.iterdir())


STAGE_FIELDS = {"name", "path", "compiled", "rows", "prompt", "peak_planned_gib", "model_build_s", "stage_s",
                "versions", "phase", "phases"}
DECODE_FIELDS = {"ms_per_step", "floor_ms", "floor_copy_ms", "tokens_per_s", "first_step_s", "record_s", "recompiles",
                 "host_reads_per_step"}


@pytest.mark.parametrize("name", list(ORDER))
def test_each_stage_runs_on_the_engine_in_the_tiny_dry_run(tmp_path, name):
    """Every stage, eager (the compiled path: ``python -m bench.gpu_check --tiny``, make test-compat): its record
    has the stage's figures and its phases, no host read in its decode steps (top-p on); ``full_decode``'s engine
    agrees exactly (fp32) with plain transformers' greedy tokens; ``compaction`` counts and times the engine's
    compactions; ``block_mask`` measures a long and a short prompt."""
    out = tmp_path / "stage.json"
    context = json.dumps({"full_peak_bytes": 10**7}) if name == "equal_memory_snapstream" else "{}"
    assert stage_main([name, "--tiny", "--no-compile", "--max-rows", "3", "--result", str(out),
                       "--context", context]) == 0
    rec = json.loads(out.read_text())
    assert STAGE_FIELDS <= set(rec) and "error" not in rec and rec["path"] == "engine", rec
    assert rec["phase"] == "done" and list(rec["phases"])[:3] == ["start", "import", "model"]
    assert rec["compiled"] is False and rec["peak_planned_gib"] > 0 and rec["tokens_per_s"] > 0
    if name != "prefill_120k":
        assert DECODE_FIELDS <= set(rec) and rec["host_reads_per_step"] == 0 and rec["recompiles"] == 0
        assert rec["ms_per_step"] > 0 and rec["floor_ms"] > 0 and rec["floor_copy_ms"] > 0
    if name == "full_decode":
        assert rec["prompt"] + rec["steps"] == 64 + 512 - 1  # rows as full as the job's slots (the last token: none)
        v = rec["agreement"]["engine_eager"]
        assert v["passed"] and v["agreement"] == 1.0 and v["min_agreement"] == 1.0 and v["positions"] == 8
    if name == "compaction":
        assert rec["compaction_calls"] > 0 and 0 < rec["compaction_share"] < 1
        assert all(rec[f"{m}_agreement"]["passed"] and rec[f"{m}_agreement"]["reference_compactions"] > 0
                   for m in ("rkv", "triattention"))
    if name == "block_mask":
        assert rec["short_prompt"] < rec["prompt"] and rec["short_ms_per_step"] > 0 and rec["long_over_short"] > 0


def test_the_engine_counts_and_times_its_own_compactions():
    """What the compaction stage reads instead of wrapping the engine's compaction call: ``EngineStats.compactions``
    (one per call, every due row in it) follows the method's own schedule, and ``compaction_s`` is their time."""
    import snapstream_core as ss
    from bench.gpu.model import build_model
    from snapstream_core.engine import Engine, EngineItem

    model, _ = build_model(tiny=True)
    method = ss.compression_from_config({"method": "rkv", "budget": 32, "interval": 8})
    engine = Engine(model, method, ss.SamplingConfig(max_new_tokens=24), eos=[], rows=2)
    for _ in engine.run([EngineItem(list(range(3, 51)), 0, (0, 1), 24)]):
        pass
    due = [k for k in range(1, 24) if method.compacts(48, k)]
    assert engine.stats.compactions == len(due) == 3 and engine.stats.compaction_s > 0
    engine = Engine(model, ss.compression_from_config({"method": "none"}), ss.SamplingConfig(max_new_tokens=8), eos=[],
                    rows=1)
    for _ in engine.run([EngineItem(list(range(3, 51)), 0, (0,), 8)]):
        pass
    assert engine.stats.compactions == 0 and engine.stats.compaction_s == 0


@pytest.mark.parametrize("deadline", [0, 30, 200, 333, DEADLINE_S, 615, 2000])
@pytest.mark.parametrize("tiny", [False, True])
def test_the_plan_fits_the_deadline_most_informative_first_and_names_what_it_skips(deadline, tiny):
    """The limits planned sum to at most the deadline (less the parent's reserve), every stage is in the plan in
    the table's order, a skipped one says why; at the 8-minute deadline the first stages run (their own limits
    sum to more than it)."""
    p = plan(TABLE, deadline, tiny)
    assert [s.name for s in p] == list(ORDER)
    assert sum(s.limit_s or 0 for s in p) <= max(0.0, deadline - RESERVE_S) + 1e-9
    assert all(s.reason for s in p if s.limit_s is None)
    ran = [s.name for s in p if s.limit_s is not None]
    if deadline == DEADLINE_S and not tiny:
        assert sum(c.limit_s for c in TABLE) > DEADLINE_S  # not every stage fits: the plan chooses
        assert ran[:3] == ["snapstream_decode", "full_decode", "compaction"]
        assert len(ran) < len(ORDER)


def test_a_stage_whose_input_is_missing_is_skipped_naming_it():
    full_cost = COSTS["equal_memory_full"]
    p = plan([full_cost, COSTS["equal_memory_snapstream"]], full_cost.tiny_est_s - 1, tiny=True)
    assert p[0].limit_s is None and p[1].limit_s is None
    assert "needs equal_memory_full" in p[1].reason and "skipped" in p[1].reason
    p = plan([COSTS["equal_memory_snapstream"]], 1e4, True, unavailable={"equal_memory_full": "was stopped"})
    assert p[0].limit_s is None and "equal_memory_full was stopped" in p[0].reason


@pytest.mark.slow  # 16 s on 2 cores (make test stays under 10 minutes)
def test_a_deadline_too_short_for_every_stage_returns_every_stage(tmp_path):
    """The acceptance of issue 52's item 4: stages of 4 s within a 14 s deadline. Every stage is in the output: the
    ones run with the record they had written when stopped (their phase, when each began), the others skipped with
    their reason; the whole check ends by its deadline."""
    start = time.perf_counter()
    assert main(["--tiny", "--deadline-s", "14", "--stage-limit-s", "4", "--out", str(tmp_path)]) == 0
    assert time.perf_counter() - start < 14 + 3  # + writing the files and the last kill
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    stages = result["stages"]
    assert [s["name"] for s in stages] == list(ORDER) == [p["name"] for p in result["plan"]]
    assert sum(p["limit_s"] or 0 for p in result["plan"]) <= 14
    ran = [s for s in stages if "skipped" not in s]
    assert ran and all(s["wall_s"] < s["limit_s"] + 1.5 and s["limit_s"] <= 4 for s in ran)
    for s in ran:  # the stage's own record, as far as it got
        assert "stopped" in s or s.get("phase") == "done"
        if "stopped" in s:
            assert s["phase"] in s["phases"] and f"in phase '{s['phase']}'" in s["stopped"]
    skipped = [s for s in stages if "skipped" in s]
    assert skipped and all(s["skipped"].startswith(("does not fit the deadline", "needs ")) for s in skipped)
    md = (tmp_path / "gpu_check.md").read_text()
    assert "stopped at its limit" in md and "does not fit the deadline" in md
    assert main(["--tiny", "--deadline-s", "14", "--stage-limit-s", "4", "--strict", "--out", str(tmp_path)]) == 1


def test_a_killed_stage_keeps_the_figures_it_had_written(tmp_path):
    """A stage killed once its warm-up run is over (SIGKILL: it writes nothing more) has left its phase and the
    warm-up's figures in its record."""
    out = tmp_path / "stage.json"
    proc = subprocess.Popen([sys.executable, "-m", "bench.gpu_stages", "full_decode", "--tiny", "--no-compile",
                             "--max-rows", "3", "--result", str(out)], cwd=ROOT)
    try:
        rec = wait_for(lambda: (r := read(out)) and "timed run" in r.get("phases", {}) and r, 120)
    finally:
        proc.kill()
        proc.wait()
    rec = read(out)
    assert rec["name"] == "full_decode" and rec["phase"] in ("timed run", "bandwidth floor", "token agreement", "done")
    assert rec["warmup_s"] > 0 and rec["rows"] == 3 and "model_build_s" in rec


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_check_leaves_no_stage_process_behind(tmp_path, sig):
    """The check killed (SIGKILL: none of its own code runs; SIGTERM: as ``timeout`` or SLURM end it) while a stage
    runs: the stage's process and anything in its session are gone within seconds; on SIGTERM the check also
    writes the record the stage had written so far."""
    check = subprocess.Popen([sys.executable, "-m", "bench.gpu_check", "--tiny", "--only", "full_decode",
                              "--out", str(tmp_path)], cwd=ROOT, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stage = None
    try:
        stage = wait_for(lambda: next(iter(children(check.pid)), None), 60)
        assert stage, "the stage's process did not start"
        time.sleep(0.5)
        os.kill(check.pid, sig)
        code = check.wait(timeout=30)
        assert wait_for(lambda: not in_session(stage), 10), f"left behind: {in_session(stage)}"
        if sig == signal.SIGTERM:  # the check's own exit path: it writes what the stage had found, then exits 130
            assert code == 130
            rec = read(tmp_path / "gpu_check.json")["stages"][0]
            assert rec["name"] == "full_decode" and rec["stopped"].startswith("stopped when the check was interrupted")
            assert rec["phase"] in rec["phases"]
    finally:
        with_suppressed_kill(check.pid)
        if stage:
            with_suppressed_kill(stage)


# ------------------------------------------------------------------------------------------------ helpers
def read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def wait_for(probe, timeout_s: float):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = probe()
        if got:
            return got
        time.sleep(0.1)
    return probe()


def _stat(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...


def children(pid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p)) and s[1] == str(pid)
            and s[0] != "Z"]


def in_session(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid`` (a stage's: it is its session's leader)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p)) and s[3] == str(sid)
            and s[0] != "Z"]


def with_suppressed_kill(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def test_the_gpu_check_core_and_planner_import_without_hydra_omegaconf_datasets_lm_eval():
    code = ("import sys\n"
            "import bench.gpu_check, bench.gpu_stages, bench.gpu.stages, bench.gpu.model, evals.plan, evals.plan.cost\n"
            "import snapstream_core.engine, snapstream_core.memory, snapstream_core.generate, snapstream_core.prefill\n"
            "try:\n    import omegaconf\nexcept ModuleNotFoundError:\n    print('blocked')\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED.split(',')!r}))\n")
    out = subprocess.run([sys.executable, "-m", "bench.without", BLOCKED, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["blocked", "[]"]


def test_the_gpu_check_modules_are_small():
    """One concept per file: no module of the GPU check is longer than 200 lines."""
    files = [ROOT / "bench" / "gpu_check.py", ROOT / "bench" / "gpu_stages.py", *(ROOT / "bench" / "gpu").glob("*.py")]
    long = {f.name: n for f in files if (n := len(f.read_text().splitlines())) > 200}
    assert not long, long
