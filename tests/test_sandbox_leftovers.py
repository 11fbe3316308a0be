"""Nothing of a program outlives its run: its sandbox dies with a killed harness (even while the program holds the
GIL the driver's watcher needs), and nothing it wrote is left in ``/dev/shm``, ``/tmp`` or a world-writable host
folder."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from lcb_helpers import (
    MODES,
    REPO,
    become_subreaper,
    leftover_sandbox_processes,
    output_of,
    run_strict,
    strict_settings,
)

HOLD_GIL = ("import subprocess, sys, re\n"  # the marker is joined at run time: not in the harness's command line
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {head!r} + {tail!r}])\n"
            "re.match(r'(a+)+$', 'a' * 64 + 'b')  # holds the GIL: the driver's watcher thread never runs\n")


@pytest.mark.parametrize("mode", MODES)
def test_sandboxes_die_with_a_killed_harness(mode):
    """after ``kill -9`` of the harness, a sandbox whose program holds the GIL used to keep running."""
    strict_settings(mode)  # skip where the mode cannot run
    become_subreaper()  # orphans come to us, so that the leftover check sees them
    marker = f"lcbgil{uuid.uuid4().hex}"
    python = None if mode == "bwrap" else sys.executable
    program = HOLD_GIL.format(head=marker[:8], tail=marker[8:])
    harness = (f"import sys\nsys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}]\n"
               "from lcb_helpers import make_problem\nfrom tasks.livecodebench.grader import GradeSettings, grade\n"
               f"s = GradeSettings.from_cfg({{'sandbox': {mode!r}, 'python': {python!r}, 'protocol': 'strict', "
               "'timeout_s': 100.0})\n"
               f"grade(make_problem('gil', [('\\n', 'x\\n')]), {program!r}, s)\n")
    proc = subprocess.Popen([sys.executable, "-c", harness], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not leftover_sandbox_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert leftover_sandbox_processes(marker), "the program never started"
        time.sleep(0.5)  # the regex is running
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while leftover_sandbox_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert leftover_sandbox_processes(marker) == []
        assert leftover_sandbox_processes() == []
    finally:
        for line in leftover_sandbox_processes(marker) + leftover_sandbox_processes():
            try:
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.parametrize("mode", MODES)
def test_nothing_is_left_in_dev_shm_or_tmp(mode):
    marker = f"lcb_leftover_{uuid.uuid4().hex}"
    code = (f"import os\nn = 0\nfor d in ('/dev/shm', '/tmp', '/var/tmp'):\n    try:\n"
            f"        open(os.path.join(d, {marker!r}), 'w').write('x')\n        n += 1\n    except OSError:\n"
            "        pass\nprint('wrote')")
    verdict = run_strict(mode, code, "wrote\n")
    assert verdict.outcome == "passed", verdict
    assert not [d for d in ("/dev/shm", "/tmp", "/var/tmp") if os.path.exists(os.path.join(d, marker))]


@pytest.mark.parametrize("mode", MODES)
def test_nothing_is_left_in_world_writable_host_folders(mode):
    """in process mode a program used to leave files in world-writable host folders. Now the host is
    read-only to it (bwrap: it sees none of them)."""
    if os.geteuid() != 0:
        pytest.skip("making a world-writable folder outside the project needs root")
    folder = Path(tempfile.mkdtemp(prefix="lcb-ww-", dir="/var/lib" if os.access("/var/lib", os.W_OK) else None))
    try:
        os.chmod(folder, 0o1777)
        code = (f"try:\n    open({str(folder / 'left')!r}, 'w').write('x')\n    print('wrote')\nexcept OSError:\n"
                "    print('refused')")
        assert output_of(mode, code) == "refused"
        assert list(folder.iterdir()) == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)
