"""Limits that hold for a whole sandbox: the CPU time of children the kernel reaps is charged, ``memory_mb`` bounds
every process together (memory held through ``memfd`` or SysV shm included), the total a program writes is capped,
a stderr flood is read and dropped, one sample's spinners do not time out another; and the cgroup that carries
these limits (a v2 tree, none at all, and the ones a killed harness left)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from lcb_helpers import (
    MODES,
    make_problem,
    needs_cgroup,
    output_of,
    run_strict,
    strict_settings,
)

from sandbox import cgroup, seccomp
from sandbox.clock import Clock
from tasks.livecodebench.grader import grade, grade_many

# children that each burn 0.05 s of CPU, say how much on a pipe and are reaped by the kernel (SIGCHLD ignored):
# their time never reaches the parent's cutime, and they are gone before the next read of the process tree
REAPED_SPINNERS = ("import os, signal, time\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\nr, w = os.pipe()\n"
                   "for _ in range({n}):\n    if os.fork() == 0:\n        end = time.process_time() + 0.05\n"
                   "        while time.process_time() < end:\n            pass\n"
                   "        os.write(w, b'%.4f ' % time.process_time())\n        os._exit(0)\n"
                   "    while True:\n        try:\n            os.waitpid(-1, 0)\n"
                   "        except ChildProcessError:\n            break\n"
                   "os.close(w)\ntotal = 0.0\nwhile True:\n    got = os.read(r, 65536)\n    if not got:\n"
                   "        break\n    total += sum(map(float, got.split()))\nprint(f'{{total:.3f}}')")


@pytest.mark.parametrize("mode", MODES)
def test_cpu_of_children_reaped_by_the_kernel_is_charged(mode, monkeypatch):
    """4 CPU-s in children the kernel reaped used to be charged as 0.15 s (only the wall deadline stopped
    them). Now the sandbox's cgroup charges them: its clock reads at least the CPU time the children report."""
    needs_cgroup()
    seen = [0.0]
    read = Clock.read

    def recording(self):
        seen[0] = max(seen[0], read(self))
        return seen[0]

    monkeypatch.setattr(Clock, "read", recording)
    burnt = float(output_of(mode, REAPED_SPINNERS.format(n=16), timeout_s=3.0))
    assert burnt >= 0.7 and seen[0] >= 0.9 * burnt, (burnt, seen[0])


# children that each hold 100 MiB (written) and say so, one line each, on a pipe
HOLDERS = ("import os, select, time\nr, w = os.pipe()\npids = []\nfor _ in range({n}):\n    pid = os.fork()\n"
           "    if pid == 0:\n        os.close(r)\n        block = b'x' * (100 << 20)\n        os.write(w, b'1')\n"
           "        time.sleep(30)\n        os._exit(0)\n    pids.append(pid)\nos.close(w)\nreported = 0\n"
           "while reported < {n} and select.select([r], [], [], 2.0)[0]:\n    got = os.read(r, 64)\n"
           "    if not got:\n        break\n    reported += len(got)\ntime.sleep(0.5)\n"
           "alive = sum(os.waitpid(p, os.WNOHANG) == (0, 0) for p in pids)\n"
           "print('held', alive * 100, 'MiB')")  # children still alive each hold their 100 MiB (an OOM kill ends one)


@pytest.mark.parametrize("mode", MODES)
def test_memory_mb_bounds_the_whole_sandbox(mode):
    """12 children used to hold 1.35 GiB under ``memory_mb=256`` (the limit was per process). Now the cgroup
    bounds the sandbox: 6 children of 100 MiB cannot all hold theirs under 256 MiB."""
    needs_cgroup()
    out = output_of(mode, HOLDERS.format(n=6), memory_mb=256, timeout_s=5.0)
    assert out.startswith("held ") and int(out.split()[1]) <= 256, out


@pytest.mark.parametrize("mode", MODES)
def test_memfd_and_shm_count_in_the_memory_limit(mode):
    """pages written into memfds (never mapped, so outside RLIMIT_AS) used to take 1.5 GiB under
    ``memory_mb=512``. Now memfd_create and shmget fail (seccomp): at most the rlimit."""
    code = ("import os, ctypes\nheld, fds = 0, []\ntry:\n    while held < (768 << 20):\n"
            "        fd = os.memfd_create('x')\n        fds.append(fd)\n        for _ in range(8):\n"
            "            os.write(fd, b'x' * (1 << 20))\n            held += 1 << 20\nexcept OSError:\n    pass\n"
            "shm = ctypes.CDLL(None).shmget(0, 64 << 20, 0o1600)\n"
            "print('bounded' if held <= (256 << 20) and shm < 0 else f'held {held >> 20} MiB, shm {shm}')")
    assert output_of(mode, code, memory_mb=256) == "bounded"


@pytest.mark.parametrize("mode", MODES)
def test_the_total_written_is_capped(mode):
    """Files each under the per-file limit (RLIMIT_FSIZE) but 400 MB in all: the sandbox's tmpfs fills up."""
    code = ("import os\nchunk = b'x' * (1 << 20)\ntry:\n    for k in range(400):\n"
            "        with open(f'f{k}', 'wb') as fh:\n            fh.write(chunk)\n    print('unbounded')\n"
            "except OSError:\n    for name in os.listdir('.'):\n        os.remove(name)\n"  # room for stdout again
            "    print('capped')")
    verdict = run_strict(mode, code, "capped\n", timeout_s=5.0)
    assert verdict.outcome == "passed", verdict


@pytest.mark.parametrize("mode", MODES)
def test_a_stderr_flood_is_read_and_dropped(mode):
    """fd 2 being a pipe, the harness reads it as it comes and keeps only its tail: 64 MiB of stderr neither block
    the program nor reach a host file or the harness's memory, and (as with the official runner) the verdict."""
    code = ("import sys\nfor _ in range(64):\n    sys.stderr.write('x' * (1 << 20))\n    sys.stderr.flush()\n"
            "print('done')")
    verdict = grade(make_problem("flood", [("\n", "done\n")]), code, strict_settings(mode, max_output_mb=2))
    assert verdict.outcome == "passed", verdict


SPINNERS = ("import os\nfor _ in range(12):\n    if os.fork() == 0:\n        os.setsid()\n        while True:\n"
            "            pass\nwhile True:\n    pass\n")


# A fixed amount of its own CPU time (0.8 s of the 3 s budget), whatever the contention: a loop of N steps costs more
# CPU seconds on contended cores, so a step count gives no margin that holds at load 8 on 2 cores.
STEADY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8:\n    pass\nprint('done')"


@pytest.mark.parametrize("mode", MODES)
def test_a_neighbours_spinners_do_not_time_out_another_sample(mode):
    """one sample's ``setsid`` spinners pushed a concurrently graded sample into ``timeout`` (wall clock
    shared with the neighbour). Time is now each sandbox's own CPU clock: the spinner sample times out, the steady
    one (0.8 s of its own CPU) passes, at any load: the spinners' CPU is charged to their sandbox only, and its wall
    time, at most ~6 s at load 8 on 2 cores, stays inside the wall-clock backstop (3 x 3 s + 1 s)."""
    s = strict_settings(mode, timeout_s=3.0, exec_workers=2)
    spin = make_problem("spin", [("\n", "x\n")])
    steady = make_problem("steady", [("\n", "done\n")])
    spun, ok = grade_many([(spin, SPINNERS), (steady, STEADY)], s)
    assert spun.outcome == "timeout", spun
    assert ok.outcome == "passed", ok


def test_a_cgroup_v2_tree_is_used_with_its_limits(tmp_path, monkeypatch):
    """Where cgroup v2 is mounted with the memory and pids controllers (a plain folder stands in for it here), a
    sandbox's cgroup is made below the harness's own, with the whole sandbox's memory and task limits written."""
    own = tmp_path / "user.slice" / "harness"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(cgroup, "_mounts", lambda: [(str(tmp_path), "cgroup2", {"rw"})])
    monkeypatch.setattr(cgroup, "_own_paths", lambda: {"": "/user.slice/harness"})
    cgroup.base.cache_clear()
    try:
        found = cgroup.base()
        assert found == cgroup.Base(2, (("", str(own)),))
        assert set((own / "cgroup.subtree_control").read_text().split()) == {"+memory", "+pids"}
        unit = cgroup.make_unit(256 << 20, 80)
        folder = Path(unit.dirs[0][1])
        assert folder.parent == own and unit.procs_files == [str(folder / "cgroup.procs")]
        assert (folder / "memory.max").read_text() == str(256 << 20) and (folder / "pids.max").read_text() == "80"
        (folder / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
        assert unit.cpu_s() == 1.5
    finally:
        cgroup.base.cache_clear()


def test_no_cgroup_is_said_once_and_the_sandbox_keeps_its_limits(monkeypatch, caplog):
    """Where no cgroup can be made, one warning names why, and sandboxes run without one (per-process limits)."""
    monkeypatch.setattr(cgroup, "_mounts", lambda: [])
    cgroup.base.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="sandbox.cgroup"):
            assert cgroup.make_unit(256 << 20, 80) is None and cgroup.make_unit(256 << 20, 80) is None
        assert len(caplog.records) == 1 and "without a cgroup" in caplog.records[0].getMessage()
        assert cgroup.entry_prefix(None)[-2:] == ["0", str(seccomp.syscall_number("keyctl") or 0)]
    finally:
        cgroup.base.cache_clear()


def test_cgroups_a_killed_harness_left_are_removed():
    """A harness killed with ``kill -9`` leaves its sandboxes' (empty) cgroups: the next one removes them."""
    needs_cgroup()
    dead = subprocess.Popen(["true"])
    dead.wait()
    found = cgroup.base()
    stale = [os.path.join(folder, f"lcb-{dead.pid}-0") for _, folder in found.dirs]
    for folder in stale:
        os.mkdir(folder)
    cgroup._remove_stale(found)
    assert not any(os.path.exists(folder) for folder in stale)
