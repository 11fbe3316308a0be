"""The process fallback against what broke it on main (issue #14), and bwrap alongside: ``no_new_privs``, a PID
namespace whose end kills everything the program started, a cap on the total it can write, and nothing left in
``/dev/shm`` or ``/tmp`` after the run."""

from __future__ import annotations

import os
import uuid

import pytest
from lcb_helpers import MODES, make_problem, settings_for

from tasks.livecodebench.grader import grade


def run_one(mode: str, code: str, expected: str, **knobs):
    """``task.protocol=strict``: the sandbox must hold without lcb_runner's guard (os.remove, os.fork ...)."""
    return grade(make_problem("proc", [("\n", expected)]), code, settings_for(mode, **{"protocol": "strict", **knobs}))


@pytest.mark.parametrize("mode", MODES)
def test_no_new_privs_and_an_own_pid_namespace(mode):
    code = ("import os\nstatus = open('/proc/self/status').read()\n"
            "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "print('NoNewPrivs:\\t1' in status, os.getpid() < 10, len(pids) < 10)")
    verdict = run_one(mode, code, "True True True\n")
    assert verdict.outcome == "passed", verdict


@pytest.mark.parametrize("mode", MODES)
def test_nothing_is_left_in_dev_shm_or_tmp(mode):
    marker = f"lcb_leftover_{uuid.uuid4().hex}"
    code = (f"import os\nn = 0\nfor d in ('/dev/shm', '/tmp', '/var/tmp'):\n    try:\n"
            f"        open(os.path.join(d, {marker!r}), 'w').write('x')\n        n += 1\n    except OSError:\n"
            "        pass\nprint('wrote')")
    verdict = run_one(mode, code, "wrote\n")
    assert verdict.outcome == "passed", verdict
    assert not [d for d in ("/dev/shm", "/tmp", "/var/tmp") if os.path.exists(os.path.join(d, marker))]


@pytest.mark.parametrize("mode", MODES)
def test_the_total_written_is_capped(mode):
    """Files each under the per-file limit (RLIMIT_FSIZE) but 400 MB in all: the sandbox's tmpfs fills up."""
    code = ("import os\nchunk = b'x' * (1 << 20)\ntry:\n    for k in range(400):\n"
            "        with open(f'f{k}', 'wb') as fh:\n            fh.write(chunk)\n    print('unbounded')\n"
            "except OSError:\n    for name in os.listdir('.'):\n        os.remove(name)\n"  # room for stdout again
            "    print('capped')")
    verdict = run_one(mode, code, "capped\n", timeout_s=5.0)
    assert verdict.outcome == "passed", verdict
