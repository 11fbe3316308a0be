"""One GPU per process on one machine (docs/gpus.md): ``gpus=`` read and checked, slots claimed through lock files by
concurrent processes, a crashed holder's slot freed, extra processes waiting, ``CUDA_VISIBLE_DEVICES`` set at job
start. Everything here runs on the CPU: a fake driver folder stands for the GPUs where a count matters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evals.cli import validate
from evals.config.gpus import (
    DRIVER_GPUS,
    Devices,
    check_slots,
    joblib_workers,
    parse_gpus,
    physical_device,
    visible_devices,
)
from evals.execute.gpu_slot import pin
from tests.runner_utils import ROOT, TINY, cli

JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
HOLDER = """
import logging, sys
from pathlib import Path
from evals.config.gpus import Devices
from evals.execute.gpu_slot import pin
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
names = tuple(sys.argv[2].split(","))
slot = pin(tuple(range(len(names))), Devices(names, "test"), folder=Path(sys.argv[1]), poll_s=0.05)
import os
print(slot.index, os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
sys.stdin.read()  # hold the slot until the test closes stdin (or kills this process)
"""


def holder(folder: Path, names: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), names], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def claimed(proc: subprocess.Popen) -> tuple[int, str]:
    index, device = proc.stdout.readline().split()
    return int(index), device


def end(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_gpus_is_a_count_or_a_list_of_distinct_indices():
    assert parse_gpus(None) is None
    assert parse_gpus(3) == (0, 1, 2)
    assert parse_gpus([4, 1]) == (4, 1)
    for bad, words in [(0, "from 1"), (True, "number of GPUs"), ([], "empty"), ([1, 1], "twice"),
                       ([0, -1], "-1"), ([0, "a"], "'a'"), ("0-7", "'0-7'"), (1.5, "1.5")]:
        with pytest.raises(ValueError, match="^gpus: ") as err:
            parse_gpus(bad)
        assert words in str(err.value)


def test_devices_are_counted_from_the_driver_or_taken_from_an_inherited_cuda_visible_devices(tmp_path):
    driver = tmp_path / "gpus"
    for bus in ("0000:01:00.0", "0000:41:00.0"):
        (driver / bus).mkdir(parents=True)
    assert visible_devices({}, driver).names == ("0", "1")
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "5, 7"}, driver).names == ("5", "7")
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}, driver).names == ()
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "5"}, tmp_path / "none").names is None  # no driver: no CUDA


def test_a_gpu_that_does_not_exist_is_refused_in_one_line_where_cuda_is_present(tmp_path):
    two = Devices(("0", "1"), "2 GPU(s) in /proc/driver/nvidia/gpus")
    check_slots((0, 1), two, "auto")
    with pytest.raises(ValueError) as err:
        check_slots((0, 1, 2, 3), two, "auto")
    assert str(err.value) == ("gpus: GPU 2 does not exist: this process sees 2 (2 GPU(s) in "
                              "/proc/driver/nvidia/gpus; indices 0-1)")
    with pytest.raises(ValueError, match="sees 0 .*indices none"):
        check_slots((0,), Devices((), "CUDA_VISIBLE_DEVICES=''"), "auto")
    check_slots((0, 1, 2, 3), Devices(None, "no CUDA driver"), "auto")  # a CPU machine: nothing to check against
    for device in ("cpu", "cuda:3"):
        with pytest.raises(ValueError, match=f"^gpus: .*model.device={device} cannot hold"):
            check_slots((0,), two, device)


def test_rows_name_the_device_as_the_machine_does():
    assert physical_device("cuda", {"CUDA_VISIBLE_DEVICES": "6"}) == "cuda:6"
    assert physical_device("cuda:1", {"CUDA_VISIBLE_DEVICES": "4,6"}) == "cuda:6"
    assert physical_device("cuda", {}) == "cuda:0"
    assert physical_device("cpu", {"CUDA_VISIBLE_DEVICES": "6"}) == "cpu"


def test_joblib_runs_one_worker_per_gpu_and_refuses_more():
    assert joblib_workers(JOBLIB, -1, (0, 1, 2)) == 3  # joblib's default (one per CPU) becomes one per GPU
    assert joblib_workers(JOBLIB, 2, (0, 1, 2)) is None  # fewer workers than GPUs: as given
    assert joblib_workers("hydra._internal.core_plugins.basic_launcher.BasicLauncher", -1, (0, 1)) is None
    assert joblib_workers(JOBLIB, -1, None) is None
    with pytest.raises(ValueError, match=r"^hydra.launcher.n_jobs: 8 joblib workers for 3 GPU slot\(s\)"):
        joblib_workers(JOBLIB, 8, (0, 1, 2))


def test_the_command_line_refuses_gpus_that_differ_between_jobs_and_gpus_with_replay(tmp_path):
    bad = validate(["-m", *TINY, "model.device=auto", "gpus=1,2", f"out_root={tmp_path}"])
    assert bad == ["gpus: one value for the whole command line (the machine's GPUs), got [0] and [0, 1]"]
    replay = tmp_path / "c.jsonl"
    replay.write_text('{"item_id": "x", "completion": "a"}\n')
    assert validate(["backend=replay", f"backend.path={replay}", "gpus=2", f"out_root={tmp_path}"]) == [
        "gpus: backend=replay generates nothing on a GPU; drop gpus"]
    too_many = validate(["-m", *TINY, "model.device=auto", "compression=none,snapkv", "gpus=2", "hydra/launcher=joblib",
                         "hydra.launcher.n_jobs=3", f"out_root={tmp_path}"])
    assert len(too_many) == 1 and too_many[0].startswith("hydra.launcher.n_jobs: 3 joblib workers for 2 GPU")


def test_concurrent_processes_claim_distinct_gpus_and_a_killed_holders_gpu_is_freed(tmp_path):
    procs = [holder(tmp_path, "3,5,7") for _ in range(3)]
    try:
        got = [claimed(p) for p in procs]
        assert sorted(got) == [(0, "3"), (1, "5"), (2, "7")]  # slot i pins the i-th visible device
        victim = procs[1]
        freed = got[1]
        os.kill(victim.pid, signal.SIGKILL)  # no cleanup runs: the kernel drops the lock with the process
        victim.wait()
        late = holder(tmp_path, "3,5,7")
        procs.append(late)
        assert claimed(late) == freed
    finally:
        end(procs)


def test_more_processes_than_gpus_wait_for_one_to_free(tmp_path):
    procs = [holder(tmp_path, "0,1") for _ in range(2)]
    try:
        got = [claimed(p) for p in procs]
        waiting = holder(tmp_path, "0,1")
        procs.append(waiting)
        deadline = time.monotonic() + 60
        line = ""
        while "waiting for one to free" not in line and time.monotonic() < deadline:
            line = waiting.stderr.readline()
        assert "all 2 GPU slot(s) [0, 1] are held" in line and waiting.poll() is None
        procs[0].stdin.close()  # the first holder ends normally
        procs[0].wait()
        assert claimed(waiting) == got[0]
    finally:
        end(procs)


SECOND_JOB = """
import os, sys
from pathlib import Path
from evals.config.gpus import check_slots, visible_devices
from evals.execute.gpu_slot import pin
driver, folder = Path(sys.argv[1]), Path(sys.argv[2])
first = pin((0, 1), visible_devices(os.environ, driver), folder=folder)
devices = visible_devices(os.environ, driver)  # the next job of this process checks gpus again
check_slots((0, 1), devices, "auto")
second = pin((0, 1), devices, folder=folder)
print(os.environ["CUDA_VISIBLE_DEVICES"], devices.names, second is first)
"""


def test_a_process_that_pinned_itself_checks_its_next_jobs_against_the_gpus_it_was_given(tmp_path):
    """A joblib worker (or a plain sweep's one process) runs several jobs: after the first pinned
    ``CUDA_VISIBLE_DEVICES=4``, the next job's ``gpus=2`` still indexes the two GPUs the process was given."""
    driver = tmp_path / "gpus"
    for bus in ("0000:01:00.0", "0000:41:00.0"):
        (driver / bus).mkdir(parents=True)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "4,6"}
    res = subprocess.run([sys.executable, "-c", SECOND_JOB, str(driver), str(tmp_path / "locks")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split("\n")[0] == "4 ('4', '6') True"


def test_a_gpu_is_not_pinned_after_cuda_started_in_the_process(tmp_path):
    env: dict[str, str] = {}
    with pytest.raises(ValueError, match="^gpus: CUDA was initialised in this process before a GPU was claimed"):
        pin((0,), Devices(("0",), "test"), environ=env, folder=tmp_path, cuda_initialized=lambda: True)
    assert env == {} and not list(tmp_path.iterdir())  # nothing claimed, nothing set


def test_a_lock_folder_others_can_write_is_refused(tmp_path):
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    with pytest.raises(ValueError, match="^gpus: the lock folder .* is writable by others"):
        pin((0,), Devices(None, "test"), environ={}, folder=folder, cuda_initialized=lambda: False)


@pytest.mark.slow  # 9-13 s on 2 cores: make test under 10 minutes
def test_a_job_pins_its_gpu_before_torch_loads_and_records_it_in_meta_and_rows(tmp_path):
    """``gpus=[1]``: the job claims slot 1, sets ``CUDA_VISIBLE_DEVICES=1`` before torch loads (on this CPU machine
    nothing reads it: the rows say ``cpu``), and what the job's own environment held is in ``meta.json``."""
    locks = tmp_path / "locks"
    res = cli([*TINY, "model.device=auto", "task=needle", "task.context_tokens=128", "task.n_items=1",
               "gen.max_new_tokens=2", "gpus=[1]", f"out_root={tmp_path / 'results'}"],
              env={"SNAPSTREAM_GPU_LOCKS": str(locks)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert ("gpus: slot 1 claimed, CUDA_VISIBLE_DEVICES=1; no CUDA driver (/proc/driver/nvidia/gpus is missing): "
            "the job runs on the CPU") in res.stdout + res.stderr
    [meta_file] = (tmp_path / "results").rglob("meta.json")
    meta = json.loads(meta_file.read_text())
    assert meta["gpu"] == {"slot": 1, "CUDA_VISIBLE_DEVICES": "1", "cuda": False, "lock": str(locks / "gpu-1.lock"),
                           "torch_loaded_at_pin": False, "waited_s": meta["gpu"]["waited_s"]}
    assert meta["device"]["CUDA_VISIBLE_DEVICES"] == "1"  # what the job itself saw after loading the model
    rows = [json.loads(line) for line in (meta_file.parent / "samples.jsonl").read_text().splitlines()]
    assert [r["device"] for r in rows] == ["cpu"]


@pytest.mark.slow
def test_each_job_of_a_joblib_sweep_pins_its_gpu_before_torch_loads_and_records_it(tmp_path):
    """Two jobs under joblib with ``gpus=2`` and no ``n_jobs``: two workers, each job records the slot it ran on and
    that torch was not loaded when ``CUDA_VISIBLE_DEVICES`` was set (on this CPU machine nothing reads it)."""
    locks = tmp_path / "locks"
    res = cli(["-m", *TINY, "model.device=auto", "task=needle", "task.context_tokens=128", "task.n_items=1",
               "gen.max_new_tokens=2", "compression=none,streaming_llm", "gpus=2", "hydra/launcher=joblib",
               f"out_root={tmp_path / 'results'}"], timeout=600, env={"SNAPSTREAM_GPU_LOCKS": str(locks)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "n_jobs=2" in res.stdout + res.stderr  # joblib's one worker per CPU became one per GPU
    metas = [json.loads(p.read_text()) for p in (tmp_path / "results").rglob("meta.json")]
    assert len(metas) == 2
    for meta in metas:
        gpu = meta["gpu"]
        assert gpu["slot"] in (0, 1) and gpu["CUDA_VISIBLE_DEVICES"] == str(gpu["slot"])
        assert gpu["torch_loaded_at_pin"] is False and gpu["cuda"] is False
        assert gpu["lock"] == str(locks / f"gpu-{gpu['slot']}.lock")
        assert meta["device"]["CUDA_VISIBLE_DEVICES"] == gpu["CUDA_VISIBLE_DEVICES"]  # what the job itself saw
    for samples in (tmp_path / "results").rglob("samples.jsonl"):
        assert {json.loads(line)["device"] for line in samples.read_text().splitlines()} == {"cpu"}


@pytest.mark.gpu
@pytest.mark.skipif(not DRIVER_GPUS.is_dir(), reason="needs the NVIDIA driver (a GPU)")
def test_on_a_gpu_machine_a_gpu_it_lacks_is_refused_before_anything_runs(tmp_path):
    count = len(visible_devices().names)
    bad = validate([*TINY, "model.device=auto", f"gpus={count + 1}", f"out_root={tmp_path}"])
    assert len(bad) == 1 and bad[0].startswith(f"gpus: GPU {count} does not exist: this process sees {count} ")


@pytest.mark.gpu
@pytest.mark.skipif(not DRIVER_GPUS.is_dir(), reason="needs the NVIDIA driver (a GPU)")
def test_on_a_gpu_machine_a_pinned_job_runs_on_its_gpu_and_its_rows_name_it(tmp_path):
    res = cli([*TINY, "model.device=auto", "task=needle", "task.context_tokens=128", "task.n_items=1",
               "gen.max_new_tokens=2", "gpus=1", f"out_root={tmp_path / 'results'}"],
              env={"SNAPSTREAM_GPU_LOCKS": str(tmp_path / "locks")})
    assert res.returncode == 0, res.stderr[-3000:]
    [meta_file] = (tmp_path / "results").rglob("meta.json")
    meta = json.loads(meta_file.read_text())
    device = visible_devices({k: v for k, v in os.environ.items() if k != "SNAPSTREAM_GPUS_INHERITED"}).names[0]
    assert meta["gpu"]["cuda"] is True and meta["gpu"]["CUDA_VISIBLE_DEVICES"] == device
    rows = [json.loads(line) for line in (meta_file.parent / "samples.jsonl").read_text().splitlines()]
    assert [r["device"] for r in rows] == [f"cuda:{device}"]
