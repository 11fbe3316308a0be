"""The planner: ``python -m evals.plan`` on the paper grid offline, its totals and CSV, one-line
refusals, the deduplication of identical jobs and the step-time model (the memory model: tests/test_memory_model.py)."""

from __future__ import annotations

import csv
import re
import socket
import subprocess
import sys

import pytest

from evals.config.spec import check
from evals.plan import alias_of, check_fits, choose_rows, job_from_spec, peak_bytes, with_prompt
from evals.plan.__main__ import main
from evals.plan.device import GIB
from evals.plan.job import job_budget
from evals.plan.table import COLUMNS, TODAY_COMPILED_GPU_HOURS
from tests.runner_utils import ROOT, compose_cfg

PAPER_GOAL_GPU_HOURS = 150  # the grid's goal by the planner's estimate, with the step model adding bytes and FLOPs


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    """The paper grid planned in-process with every socket refused, its wall clock on 8 GPUs: (exit code, stdout,
    plan.csv rows)."""
    out = tmp_path_factory.mktemp("paper")
    mp = pytest.MonkeyPatch()

    def refuse(*a, **k):
        raise OSError("the planner must not reach the network")

    mp.setattr(socket.socket, "connect", refuse)
    mp.setattr(socket, "create_connection", refuse)
    mp.delenv("HF_HUB_OFFLINE", raising=False)
    import contextlib
    import io

    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            code = main(["-m", "+experiment=paper", f"out_root={out}", "plan.gpus=8", "plan.shards=auto"])
    finally:
        mp.undo()
    with open(out / "plan.csv") as fh:
        rows = list(csv.DictReader(fh))
    return code, buf.getvalue(), rows


def test_paper_grid_fits_an_80_gb_card_with_headroom_and_costs_at_most_150_gpu_hours(paper):
    code, text, rows = paper
    assert code == 0
    assert len(rows) == 72 and tuple(rows[0]) == COLUMNS
    assert all(0 < float(r["peak_gib"]) <= 77 and int(r["rows"]) >= 1 for r in rows)  # of ~79.1 GiB allocatable
    hours = sum(float(r["gpu_hours"]) for r in rows)
    assert 0 < hours <= min(TODAY_COMPILED_GPU_HOURS / 3, PAPER_GOAL_GPU_HOURS)
    printed = float(text.split("GPU-hours: ", 1)[1].split()[0])
    assert printed == pytest.approx(hours, abs=0.1)
    assert "without deduplication) of one NVIDIA H100 SXM5 80GB; " in text  # the unit the README quotes
    assert "x the estimate of this grid before rows were planned" in text  # the paper grid's own earlier estimate
    assert "every job fits" in text


def test_the_paper_grid_on_8_gpus(paper):
    """On 8 GPUs the grid's GPU-hours / 8 are about its longest job: the wall clock is within LPT's 4/3 of the bound,
    never slower than no split (``auto`` keeps that when splitting does not help: splitting adds GPU-hours), and the
    line is the one docs/plan.md quotes (evals/plan/wallclock.py)."""
    code, text, rows = paper
    gpus, wall, _ = re.search(r"wall clock on (\d+) GPU\(s\): ([\d.]+) h for ([\d.]+) GPU-hours", text).groups()
    total = float(re.search(r"GPU-hours: ([\d.]+)", text).group(1))
    longest = max(float(r["gpu_hours"]) for r in rows)
    assert gpus == "8" and max(total / 8, longest) - 0.05 <= float(wall) <= max(total / 8, longest) * 4 / 3
    line = next(line for line in text.splitlines() if line.startswith("wall clock"))
    assert float(wall) <= float(re.search(r"([\d.]+) h without shards", line).group(1))
    assert line in _quoted("docs/plan.md")


def test_the_full_cache_longbench_estimate_holds_the_weights_and_a_128k_cache(paper):
    rows = [r for r in paper[2] if r["task"] == "longbench_v2" and r["compression"] == "none"]
    weights = 8_030_261_248 * 2 / GIB
    kv_128k = 128_000 * 128 * 1024 / GIB  # 128 KiB per token (32 layers x 8 KV heads x 128 x 2 x bf16)
    assert rows and all(float(r["peak_gib"]) >= max(32, weights + kv_128k) for r in rows)
    assert all(int(r["rows"]) <= 3 for r in rows)  # the full cache fits three 120k-128k sequences at most


def test_none_at_every_budget_is_one_run_and_short_prompt_jobs_point_at_it(paper):
    rows = paper[2]
    dirs = {r["run_dir"] for r in rows}
    assert len(dirs) == 60  # 72 jobs: none's three budgets share one directory
    same_dir = [r for r in rows if r["reason"] == "same run directory"]
    assert len(same_dir) == 12 and all(r["compression"] == "none" and r["same_as"] == r["run_dir"] for r in same_dir)
    aliased = [r for r in rows if r["reason"].startswith("keeps every token")]
    none_dirs = {r["run_dir"] for r in rows if r["compression"] == "none"}
    assert aliased and all(r["same_as"] in none_dirs and float(r["gpu_hours"]) == 0 for r in aliased)
    # AIME's prompts (<= 400 tokens) fit every budget: SnapKV equals the full cache at all three
    aime_snapkv = {(r["model"], r["prompt_budget"]) for r in aliased
                   if r["task"] == "aime24" and r["compression"] == "snapkv"}
    models = ("llama31_8b_instruct", "r1_distill_llama_8b")
    assert aime_snapkv == {(m, b) for m in models for b in ("1024", "2048", "4096")}
    assert not [r for r in aliased if r["task"] == "longbench_v2"]  # long prompts are always compressed


def test_the_planner_imports_no_torch_reads_no_data_and_is_quick(tmp_path):
    code = (
        "import sys, time; t = time.time()\n"
        "import snapstream_core.methods\n"
        "torch_before = 'torch' in sys.modules\n"
        "from evals.plan.__main__ import main\n"
        f"rc = main(['model=llama31_8b_instruct', 'task=aime24', 'compression=snapstream', 'out_root={tmp_path}'])\n"
        # the task modules check their knobs (evals.config.spec.check, as evals.run does); no data library loads
        "print(rc, torch_before, 'torch' in sys.modules, 'datasets' in sys.modules,"
        " round(time.time() - t, 1))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    rc, torch_before, torch_after, data, _seconds = out.stdout.split()[-5:]
    assert rc == "0" and data == "False", out.stderr
    if torch_before == "False":  # once snapstream_core.methods imports no torch, neither may the planner
        assert torch_after == "False"


def test_a_job_that_cannot_fit_exits_2_with_one_line_naming_it_and_its_need(tmp_path, capsys):
    code = main(["model=llama31_8b_instruct", "task=longbench_v2", "compression=none", "plan.memory_gib=30",
                 f"out_root={tmp_path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error: plan.memory_gib: llama31_8b_instruct longbench_v2 none n=1 needs ")
    assert "GiB at 1 row(s)" in err[0] and "plan.memory_gib=30" in err[0]


def test_a_bad_override_is_one_line(tmp_path, capsys):
    assert main(["model=llama31_8b_instruct", "compression.no_such_knob=3", f"out_root={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_knob" in err[0]


def _job(*overrides):
    return job_from_spec(check(compose_cfg(["model=llama31_8b_instruct", "task=aime24", *overrides]), offline=True))


def test_rows_fill_the_budget_and_respect_gen_rows():
    job = _job("compression=snapstream", "compression.prompt_budget=1024", "compression.recent=1024",
               "gen.n_samples=64")
    rows = choose_rows(job)
    assert rows > 1 and peak_bytes(job, rows) <= job_budget(job) < peak_bytes(job, rows + 1)
    assert job_budget(job) <= 77 * GIB
    assert choose_rows(job, memory_gib=40) < rows
    assert choose_rows(_job("task.limit=1", "gen.n_samples=3")) == 3  # never more rows than samples
    assert choose_rows(_job("gen.rows=7")) == 7
    with pytest.raises(ValueError, match=r"^gen\.rows: llama31_8b_instruct aime24 none n=1 needs .* GiB at 10000 row"):
        check_fits(_job("gen.rows=10000"))


@pytest.mark.parametrize(
    ("overrides", "longest", "same"),
    [
        (["compression=snapkv", "compression.prompt_budget=1024"], 1024, True),
        (["compression=snapkv", "compression.prompt_budget=1024"], 1025, False),
        (["compression=snapkv", "compression.ratio=0.5"], 300, False),  # a ratio always drops half
        (["compression=snapstream", "compression.prompt_budget=1024", "compression.recent=32768"], 500, True),
        (["compression=snapstream", "compression.prompt_budget=1024", "compression.recent=1024"], 500, False),
        (["compression=streaming_llm", "compression.prompt_budget=40000"], 500, True),
        (["compression=none"], 500, False),  # the full cache is the reference, never an alias
        (["compression=snapkv", "compression.prompt_budget=1024", "compression.positions=in_cache"], 500, False),
    ],
)
def test_alias_of_names_the_full_cache_when_the_method_keeps_every_token(overrides, longest, same):
    job = _job(*overrides)
    alias = alias_of(job, longest)
    assert (alias is not None) == same
    if same:
        assert alias.compression == "none" and "/none/" in alias.run_dir and alias.max_prompt_tokens == longest
        assert alias.run_dir == _job("compression=none").run_dir


def test_rows_shrink_when_the_runner_sees_longer_prompts():
    job = _job("compression=none")
    assert choose_rows(with_prompt(job, 20_000)) < choose_rows(job)
    assert choose_rows(job, max_prompt_tokens=20_000) == choose_rows(with_prompt(job, 20_000))


def test_a_step_adds_its_bandwidth_and_compute_time_and_reads_only_filled_kv():
    from evals.plan.cost import read_slots, step_seconds, step_terms
    from evals.plan.device import Device

    ring = _job("compression=snapstream", "compression.prompt_budget=1024", "compression.recent=1024",
                "gen.n_samples=64")
    t = step_terms(ring, 400)
    assert t["compute"] > 0.3 * t["bandwidth"]  # at 400 rows both matter
    assert step_seconds(ring, 400) == pytest.approx(t["bandwidth"] + t["compute"] + t["overhead"])
    assert read_slots(ring) == ring.slots  # a ring is full
    full = job_from_spec(check(compose_cfg(["model=r1_distill_llama_8b", "task=aime24", "compression=none"]),
                               offline=True))
    assert read_slots(full) < full.slots / 2  # the filled slots on average, not the 33k allocated
    assert read_slots(full, Device(reads_all_slots=True)) == full.slots
    assert step_seconds(full, 15) < step_seconds(full, 15, Device(reads_all_slots=True))



def test_the_runs_sampling_settings_reach_the_rows_the_step_time_and_the_compile():
    """Greedy rows need no sampling scratch and move 4 bytes per vocabulary entry; a run with temperature and top-p
    30 + 20 and 404 (memory.sampling_peak_per_entry, sampling_traffic_per_entry): more rows fit greedy, and each
    step is shorter. A decode-time method compiles a second graph."""
    from evals.plan.cost import job_cost, step_terms

    greedy = _job("compression=snapstream", "compression.prompt_budget=1024", "compression.recent=1024",
                  "gen.n_samples=64", "gen.temperature=0")
    sampled = _job("compression=snapstream", "compression.prompt_budget=1024", "compression.recent=1024",
                   "gen.n_samples=64", "gen.temperature=0.6", "gen.top_p=0.95")
    assert (greedy.sampling_peak, greedy.sampling_traffic) == (0, 4)
    assert (sampled.sampling_peak, sampled.sampling_traffic) == (50, 404)
    assert choose_rows(greedy) > choose_rows(sampled)
    assert step_terms(greedy, 64)["bandwidth"] < step_terms(sampled, 64)["bandwidth"]
    rkv = _job("compression=rkv", "gen.n_samples=64")
    assert job_cost(rkv, 8).compile_s > job_cost(sampled, 8).compile_s > 0

def _quoted(doc: str) -> str:
    """``doc``'s text with line breaks as spaces (figures wrap across lines)."""
    return " ".join((ROOT / doc).read_text().split())


def test_the_paper_grid_figures_in_the_readme_and_docs_are_the_planners(paper):
    """README.md and docs/plan.md quote the planner's own totals for the paper grid, so they cannot drift."""
    code, text, rows = paper
    hours, without = (float(x) for x in re.search(r"GPU-hours: ([\d.]+) \(([\d.]+) without", text).groups())
    jobs, dirs, aliased, computed = re.search(
        r"jobs (\d+), run directories (\d+) \(\d+ jobs share one\), (\d+) identical to the full cache, (\d+) computed",
        text).groups()
    peak = max(float(r["peak_gib"]) for r in rows)
    r1_lcb = sum(float(r["gpu_hours"]) for r in rows if r["model"] == "r1_distill_llama_8b"
                 and r["task"] == "livecodebench")
    readme, plan_md = _quoted("README.md"), _quoted("docs/plan.md")
    assert f"{jobs} jobs, {dirs} run directories, {aliased} identical to the full cache, {computed} computed" in readme
    assert f"largest peak {peak:.1f} GiB" in readme
    assert f"**{hours:.1f} GPU-hours** ({without:.1f} without deduplication) of one H100" in readme  # as printed
    assert f"{jobs} jobs, {dirs} run directories, {aliased} jobs identical to the full cache, {computed} computed" \
        in plan_md
    assert f"**{hours:.1f} GPU-hours** ({without:.1f} without deduplication)" in plan_md
    assert f"R1 on LiveCodeBench is {r1_lcb:.0f} of them" in plan_md


def test_a_grid_that_cannot_fit_prints_one_line_per_cause_and_no_table(tmp_path, capsys):
    """Weights larger than the budget fail every job of a model: one line per model, not one per job, no table."""
    code = main(["-m", "model=llama31_8b_instruct,r1_distill_llama_8b", "task=aime24", "compression=none,snapkv",
                 "compression.prompt_budget=1024,2048", "plan.memory_gib=10", f"out_root={tmp_path}"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and not (tmp_path / "plan.csv").exists()
    assert len(lines) == 2, lines
    for model, line in zip(("llama31_8b_instruct", "r1_distill_llama_8b"), lines):
        assert line.startswith(f"error: plan.memory_gib: the weights of {model} alone are 15.0 GiB > ")
        assert line.endswith("of plan.memory_gib=10: none of its 3 run(s) can fit")
