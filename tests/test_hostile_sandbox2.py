"""Hostile inputs, round 2 (issue 30, S1-S8): no privilege in the fallback sandbox, nothing shared between programs
(IPC, ``/run``), sandboxes die with a killed harness, memory held through ``memfd``/SysV shm is bounded, hidden
tests never reach a row, and a program's output is held once and bounded.

Process mode is run with the interpreter the harness itself uses (under a 0700 home when the tests run as root: the
case that used to keep root's capabilities)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from lcb_helpers import MODES, REPO, become_subreaper, leftover_sandbox_processes, make_problem

from tasks.livecodebench import modes
from tasks.livecodebench.grader import GradeSettings, grade, grade_many


def settings(mode: str, **knobs) -> GradeSettings:
    """Strict protocol (no lcb_runner guard in the way), the harness's own interpreter; skip where the mode cannot
    run at all (process mode refusing as root is itself checked by :func:`test_no_capabilities_or_refusal`)."""
    python = None if mode == "bwrap" else sys.executable
    try:
        modes.resolve(mode, python)
    except ValueError as exc:
        pytest.skip(f"{mode} isolation is not available here: {exc}")
    return GradeSettings.from_cfg({"sandbox": mode, "python": python, "protocol": "strict", "timeout_s": 3.0,
                                   "memory_mb": 1024, "exec_workers": 2, **knobs})


def output_of(mode: str, code: str, **knobs) -> str:
    """What ``code`` printed (from the wrong-answer detail of a public test that expects a uuid)."""
    verdict = grade(make_problem("h2", [("\n", uuid.uuid4().hex + "\n")]), code, settings(mode, **knobs))
    assert verdict.outcome == "wrong_answer", verdict
    return verdict.error.split("got ", 1)[1].rsplit(", expected", 1)[0].strip("'\"")


CAPS = ("import os\nst = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "caps = ' '.join(str(int(st[k], 16)) for k in ('CapEff', 'CapPrm', 'CapBnd', 'CapAmb'))\n"
        "found = [v for v in os.environ.values() if v.startswith('lcbmark-')]\n"
        "for pid in os.listdir('/proc'):\n    try:\n"
        "        found += [e for e in open(f'/proc/{pid}/environ', 'rb').read().split(b'\\0') if b'lcbmark-' in e]\n"
        "    except OSError:\n        pass\n"
        "print(caps, st['NoNewPrivs'].strip(), os.getuid() != 0, 'leak' if found else 'none')")


@pytest.mark.parametrize("mode", MODES)
def test_no_capabilities_or_refusal(mode, monkeypatch):
    """S1: as root, process mode used to keep every capability (interpreter under a 0700 home). Now a program has
    no capability in any set, ``no_new_privs``, a non-root uid and no view of the harness's environment; or the
    mode refuses in one line that says how to get bwrap."""
    monkeypatch.setenv("LCB_HARNESS_MARKER", f"lcbmark-{uuid.uuid4().hex}")
    python = None if mode == "bwrap" else sys.executable
    try:
        modes.resolve(mode, python)
    except ValueError as exc:
        if mode == "bwrap":
            pytest.skip(f"bwrap is not available here: {exc}")
        assert "\n" not in str(exc) and "bubblewrap" in str(exc) and str(exc).startswith("task.sandbox:")
        return
    assert output_of(mode, CAPS) == "0 0 0 0 1 True none"


@pytest.mark.parametrize("mode", MODES)
def test_sysv_ipc_does_not_outlive_a_program(mode):
    """S2: a SysV message queue made by one program used to be visible to the next (no IPC namespace)."""
    key = 0x1C0000 + os.getpid() % 0xFFFF
    make = (f"import ctypes\nlibc = ctypes.CDLL(None)\nprint('made' if libc.msgget({key}, 0o1666) >= 0 "
            "else 'refused')")
    look = f"import ctypes\nlibc = ctypes.CDLL(None)\nprint('absent' if libc.msgget({key}, 0) < 0 else 'present')"
    try:
        assert output_of(mode, make) in ("made", "refused")
        assert output_of(mode, look) == "absent"
    finally:
        import ctypes

        libc = ctypes.CDLL(None)
        qid = libc.msgget(key, 0)  # old code: the queue is in the harness's namespace; remove it
        if qid >= 0:
            libc.msgctl(qid, 0, None)


@pytest.mark.parametrize("mode", MODES)
def test_run_lock_is_private(mode):
    """S8: ``/run/lock`` of the host used to be shared (and kept) between programs in process mode."""
    name = f"lcb_{uuid.uuid4().hex}"
    write = (f"try:\n    open('/run/lock/{name}', 'w').write('x')\n    print('wrote')\nexcept OSError:\n"
             "    print('no')")
    look = f"import os\nprint('present' if os.path.exists('/run/lock/{name}') else 'clean')"
    try:
        output_of(mode, write)
        assert output_of(mode, look) == "clean"
        assert not os.path.exists(f"/run/lock/{name}")
    finally:
        if os.path.exists(f"/run/lock/{name}"):
            os.remove(f"/run/lock/{name}")


@pytest.mark.parametrize("mode", MODES)
def test_memfd_and_shm_count_in_the_memory_limit(mode):
    """S6: pages written into memfds (never mapped, so outside RLIMIT_AS) used to take 1.5 GiB under
    ``memory_mb=512``. Now memfd_create and shmget fail (seccomp): at most the rlimit."""
    code = ("import os, ctypes\nheld, fds = 0, []\ntry:\n    while held < (768 << 20):\n"
            "        fd = os.memfd_create('x')\n        fds.append(fd)\n        for _ in range(8):\n"
            "            os.write(fd, b'x' * (1 << 20))\n            held += 1 << 20\nexcept OSError:\n    pass\n"
            "shm = ctypes.CDLL(None).shmget(0, 64 << 20, 0o1600)\n"
            "print('bounded' if held <= (256 << 20) and shm < 0 else f'held {held >> 20} MiB, shm {shm}')")
    assert output_of(mode, code, memory_mb=256) == "bounded"


HOLD_GIL = ("import subprocess, sys, re\n"  # the marker is joined at run time: not in the harness's command line
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {head!r} + {tail!r}])\n"
            "re.match(r'(a+)+$', 'a' * 64 + 'b')  # holds the GIL: the driver's watcher thread never runs\n")


@pytest.mark.parametrize("mode", MODES)
def test_sandboxes_die_with_a_killed_harness(mode):
    """S3: after ``kill -9`` of the harness, a sandbox whose program holds the GIL used to keep running."""
    settings(mode)  # skip where the mode cannot run
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


SECRET = "hidden-5e1f9c-input"
LEAKS = {
    "exception_text": "print(int(input()))",  # ValueError: invalid literal for int() with base 10: '<input>'
    "exception_class": "s = input().strip()\nif s != '1':\n    raise type(s.replace('-', '_'), (Exception,), {})(s)\n"
                       "print(s)",
    "channel_event": ("import os, json\ns = input().strip()\nif s != '1':\n"
                      "    for fd in map(int, os.listdir('/proc/self/fd')):\n        try:\n"
                      "            os.write(fd, (json.dumps({'ev': s}) + '\\n').encode())\n        except OSError:\n"
                      "            pass\nprint(s)"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("leak", sorted(LEAKS))
def test_hidden_inputs_never_reach_the_row(mode, leak):
    """S5: the text of an exception (or of a forged channel message) on a hidden test quoted its input."""
    problem = make_problem("leak", [("1\n", "1\n"), (f"{SECRET}\n", "2\n")])
    verdict = grade(problem, LEAKS[leak], settings(mode))
    assert not verdict.correct and verdict.failed_test == 1, verdict
    assert SECRET not in verdict.error and SECRET.replace("-", "_") not in verdict.error, verdict.error


SPINNERS = ("import os\nfor _ in range(12):\n    if os.fork() == 0:\n        os.setsid()\n        while True:\n"
            "            pass\nwhile True:\n    pass\n")
# A fixed amount of its own CPU time (0.8 s of the 3 s budget), whatever the contention: a loop of N steps costs more
# CPU seconds on contended cores, so a step count gives no margin that holds at load 8 on 2 cores.
STEADY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8:\n    pass\nprint('done')"


@pytest.mark.parametrize("mode", MODES)
def test_a_neighbours_spinners_do_not_time_out_another_sample(mode):
    """S4: one sample's ``setsid`` spinners pushed a concurrently graded sample into ``timeout`` (wall clock
    shared with the neighbour). Time is now each sandbox's own CPU clock: the spinner sample times out, the steady
    one (0.8 s of its own CPU) passes, at any load: the spinners' CPU is charged to their sandbox only, and its wall
    time, at most ~6 s at load 8 on 2 cores, stays inside the wall-clock backstop (3 x 3 s + 1 s)."""
    s = settings(mode, timeout_s=3.0, exec_workers=2)
    spin = make_problem("spin", [("\n", "x\n")])
    steady = make_problem("steady", [("\n", "done\n")])
    spun, ok = grade_many([(spin, SPINNERS), (steady, STEADY)], s)
    assert spun.outcome == "timeout", spun
    assert ok.outcome == "passed", ok


BIG_MIB = 96
MEASURE = """import sys, tracemalloc
sys.path[:0] = [{repo!r}, {tests!r}]
from lcb_helpers import make_problem
from tasks.livecodebench.grader import GradeSettings, grade
s = GradeSettings.from_cfg({{'sandbox': {mode!r}, 'python': {python!r}, 'protocol': {protocol!r}, 'timeout_s': 30.0,
                            'memory_mb': 4096, 'max_output_mb': {cap}}})
p = make_problem('big', [('\\n', 'x\\n')])
grade(p, "print('warm')", s)
tracemalloc.start()
v = grade(p, "import sys\\nsys.stdout.write('y' * ({big} << 20) + '\\\\n')", s)
print(v.outcome, tracemalloc.get_traced_memory()[1] >> 20)  # the peak of the harness's allocations
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", ["strict", "lcb_runner"])
def test_a_big_output_line_is_held_once(mode, protocol):
    """S7: with a raised ``task.max_output_mb``, one 192 MiB line of stdout cost the harness +567 MiB (held as
    the read buffer, the line, its decoded text and the parsed string). Now it is read into one buffer of its size."""
    settings(mode)  # skip where the mode cannot run
    python = None if mode == "bwrap" else sys.executable
    code = MEASURE.format(repo=str(REPO), tests=str(REPO / "tests"), mode=mode, python=python, protocol=protocol,
                          cap=BIG_MIB + 32, big=BIG_MIB)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    outcome, grown = done.stdout.split()[-2:]
    assert outcome == "wrong_answer", done.stdout + done.stderr
    assert int(grown) <= 1.3 * BIG_MIB, f"the harness grew by {grown} MiB for a {BIG_MIB} MiB output"


@pytest.mark.parametrize("mode", MODES)
def test_output_over_the_cap_is_output_limit(mode):
    """Over ``task.max_output_mb`` (raised to twice the largest expected output), the verdict is ``output_limit``."""
    verdict = grade(make_problem("cap", [("\n", "x\n")]), "import sys\nsys.stdout.write('z' * (3 << 20))",
                    settings(mode, max_output_mb=1))
    assert verdict.outcome == "output_limit", verdict


@pytest.mark.parametrize("got, want", [
    ("1 2\n3\n", "1 2\n3"), ("\u3000 1\r\n2.50 \n\u00a0", "1\n2.5"), ("1\n\n2", "1\n2"), ("", ""), (" \n ", ""),
    ("x\u2028", "x"), ("é\n", "é"), ("1  2", "1 2"), ("0001", "1"), ("a\tb\n", "a b"), ("\u0085x\u0085", "x"),
])
def test_the_byte_comparison_is_the_text_comparison(got, want):
    """The raw-bytes comparison (the output never decoded whole) gives the official text comparison's answer."""
    from tasks.livecodebench.grader import stdout_matches

    assert stdout_matches(got.encode(), want) == stdout_matches(got, want)
    assert stdout_matches(bytearray(got.encode()), want) == stdout_matches(got, want)
