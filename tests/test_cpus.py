"""Busy cores: thread counts from the CPUs a process may use (affinity, cgroup quota) and passive
OpenMP waiting, set by each entry point before torch loads and kept when the user set them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from evals.cpus import PASSIVE, THREAD_VARS, cgroup_cpu_limit, prepare, thread_env, usable_cpus
from tests.runner_utils import ROOT


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_cgroup_v2_quota_caps_the_cpus_and_the_tightest_parent_wins(tmp_path):
    _write(tmp_path / "job" / "step" / "cpu.max", "max 100000\n")
    _write(tmp_path / "job" / "cpu.max", "150000 100000\n")
    _write(tmp_path / "cpu.max", "400000 100000\n")
    assert cgroup_cpu_limit(tmp_path, "0::/job/step\n") == 1.5
    assert usable_cpus(tmp_path, "0::/job/step\n") == min(len(os.sched_getaffinity(0)), 2)
    _write(tmp_path / "job" / "cpu.max", "50000 100000\n")
    assert usable_cpus(tmp_path, "0::/job/step\n") == 1  # half a CPU: one thread, never zero


def test_a_cgroup_v1_quota_counts_and_minus_one_is_unlimited(tmp_path):
    _write(tmp_path / "cpu" / "a" / "cpu.cfs_quota_us", "-1\n")
    _write(tmp_path / "cpu" / "a" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path, "4:cpu,cpuacct:/a\n") is None
    _write(tmp_path / "cpu" / "cpu.cfs_quota_us", "100000\n")
    _write(tmp_path / "cpu" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path, "4:cpu,cpuacct:/a\n") == 1.0
    assert usable_cpus(tmp_path, "4:cpu,cpuacct:/a\n") == 1


def test_no_cgroup_means_the_affinity_mask(tmp_path):
    assert cgroup_cpu_limit(tmp_path, "") is None
    assert usable_cpus(tmp_path, "") == len(os.sched_getaffinity(0))


def test_prepare_fills_only_what_the_user_left_unset(monkeypatch):
    for var in (*THREAD_VARS, *PASSIVE):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    import torch

    before = torch.get_num_threads()
    try:
        chosen = prepare(threads=3)
        assert torch.get_num_threads() == 3  # torch already loaded: its intra-op pool is resized
    finally:
        torch.set_num_threads(before)  # the worker's own share, for the tests after this one
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE" and "OMP_WAIT_POLICY" not in chosen
    assert {k: os.environ[k] for k in chosen} == {k: v for k, v in thread_env(3).items() if k != "OMP_WAIT_POLICY"}
    assert os.environ["KMP_BLOCKTIME"] == "0" and os.environ["OMP_NUM_THREADS"] == "3"


PROBE = """
import os, runpy, sys
sys.argv = [{module!r}, "--help"]
try:
    runpy.run_module({module!r}, run_name="__main__")
except SystemExit:
    pass
print("PROBE", os.environ.get("OMP_WAIT_POLICY"), os.environ.get("OMP_NUM_THREADS"), "torch" in sys.modules)
"""


@pytest.mark.parametrize("module", ["evals.run", "evals.plan", "evals.search"])
def test_each_entry_point_waits_passively_with_the_usable_cpus_before_torch_loads(module):
    env = {k: v for k, v in os.environ.items() if k not in (*THREAD_VARS, *PASSIVE)}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    probe = next(line for line in done.stdout.splitlines() if line.startswith("PROBE")).split()
    assert probe[1:] == ["PASSIVE", str(usable_cpus()), "False"], done.stdout + done.stderr


def test_importing_the_library_sets_nothing():
    env = {k: v for k, v in os.environ.items() if k not in (*THREAD_VARS, *PASSIVE)}
    env["PYTHONPATH"] = str(ROOT)
    code = "import os, evals.cpus, evals.run, evals.execute.loop; print(os.environ.get('OMP_WAIT_POLICY'))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split()[-1] == "None", done.stderr


def test_the_test_processes_share_the_usable_cpus_and_wait_passively():
    """conftest.py: each pytest-xdist worker gets the usable CPUs / workers threads, and a wait policy."""
    import torch

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"]) == max(1, usable_cpus() // workers)
    assert os.environ.get("OMP_WAIT_POLICY") and os.environ.get("KMP_BLOCKTIME")
