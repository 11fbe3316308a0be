"""Hostile programs against the grader (issue #14): every attack on the result channel, the harness's memory or the
hidden tests becomes that sample's verdict; ``grade`` never raises and the harness grades the next program.

Each attack runs in both isolation modes where they can run here (bwrap and the process fallback)."""

from __future__ import annotations

import os
import socket
import sys
import uuid

import pytest
from lcb_helpers import MODES, REPO, SCRATCH, bundled, make_problem, require, settings_for
from lcb_sample_source import REFERENCE

from tasks.livecodebench import isolation
from tasks.livecodebench.grader import grade

# A program reaches the result channel by writing to every file descriptor it has (the channel's number is private).
TO_CHANNEL = ("import os\ndef flood(data):\n    for fd in map(int, os.listdir('/proc/self/fd')):\n"
              "        try:\n            os.write(fd, data)\n        except OSError:\n            pass\n")


def still_grades(settings) -> None:
    after = grade(bundled()["ss_atcoder_001"], REFERENCE["ss_atcoder_001"], settings)
    assert after.outcome == "passed", after


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("payload", [
    "b'[' * 100000 + b'\\n'",  # RecursionError in json.loads on main
    "('{\"ev\": \"result\", \"i\": 0, \"ok\": true, \"stdout\": ' + '[' * 990 + ']' * 990 + '}\\n').encode()",
    "b'\\xff\\xfe not utf-8\\n'",
    "b'[1, 2, 3]\\n'",  # JSON, but not a message
])
def test_a_poisoned_result_line_is_a_protocol_error_of_that_sample(mode, payload):
    settings = settings_for(mode)
    verdict = grade(make_problem("poison", [("\n", "x\n")]), TO_CHANNEL + f"flood({payload})\nprint('x')", settings)
    assert verdict.outcome == "protocol_error" and not verdict.correct, verdict
    still_grades(settings)


@pytest.mark.parametrize("mode", MODES)
def test_a_deep_forged_value_is_a_protocol_error_not_a_traceback(mode):
    """A functional result whose value nests ~1,000 deep: on main ``_short`` → ``json.dumps`` raised."""
    settings = settings_for(mode)
    deep = "'{\"ev\": \"result\", \"i\": 0, \"ok\": true, \"value\": ' + '[' * 995 + ']' * 995 + '}\\n'"
    code = TO_CHANNEL + f"class Solution:\n    def f(self, a):\n        flood(({deep}).encode())\n        return a\n"
    verdict = grade(make_problem("deep", [("1", "2")], func_name="f"), code, settings)
    assert verdict.outcome == "protocol_error", verdict
    still_grades(settings)


@pytest.mark.parametrize("mode", MODES)
def test_an_endless_line_is_cut_at_the_line_limit_as_a_protocol_error(mode):
    """40 MB without a newline (over 2 x max_output_mb + 1 MiB): on main it was read until the deadline (timeout)."""
    settings = settings_for(mode, timeout_s=5.0)
    code = TO_CHANNEL + "chunk = b'a' * (1 << 20)\nfor _ in range(40):\n    flood(chunk)\nimport time\ntime.sleep(30)\n"
    verdict = grade(make_problem("endless", [("\n", "x\n")]), code, settings)
    assert verdict.outcome == "protocol_error" and "too long" in verdict.error, verdict


@pytest.mark.parametrize("mode", MODES)
def test_failure_messages_never_quote_a_hidden_test(mode):
    secret_in, secret_out = uuid.uuid4().hex, uuid.uuid4().hex
    problem = make_problem("leak", [("pub\n", "pub\n"), (secret_in + "\n", secret_out + "\n")])  # test 1 is private
    verdict = grade(problem, "print(input()[::-1])", settings_for(mode))
    assert verdict.outcome == "wrong_answer" and verdict.failed_test == 0  # the public test: quoted
    assert "expected 'pub'" in verdict.error
    verdict = grade(problem, "s = input()\nprint(s if s == 'pub' else s[::-1])", settings_for(mode))
    assert verdict.outcome == "wrong_answer" and verdict.failed_test == 1, verdict
    assert secret_in not in verdict.error and secret_out not in verdict.error and secret_in[::-1] not in verdict.error
    assert verdict.error == "test 1: wrong output (hidden test: outputs withheld)"  # by the test: no length, no hash


def test_the_sandbox_sees_neither_the_project_nor_results_nor_home():
    """On main bwrap mounted / read-only: a harvester read results/ and passed on its third run."""
    require("bwrap", "read_only_filesystem")
    home = os.path.realpath(os.path.expanduser("~"))
    needed = isolation.interpreter_paths(sys.executable)
    home_files = sorted(os.path.join(home, n) for n in os.listdir(home) if os.path.isdir(home))
    home_files = [p for p in home_files if not any(q == p or q.startswith(p + "/") for q in needed)][:5]
    paths = [str(REPO / "README.md"), str(REPO / "results"), "/run/lock", "/var", str(REPO / "tasks" / "data"),
             str(REPO / ".git"), *home_files]  # home: at most the folders that lead to the interpreter
    code = "import os\nfor p in %r:\n    print(p, os.path.exists(p))\n" % (paths,)
    expected = "".join(f"{p} False\n" for p in paths)
    verdict = grade(make_problem("view", [("\n", expected)]), code, settings_for("bwrap"))
    assert verdict.outcome == "passed", verdict


def test_a_host_unix_socket_is_out_of_reach():
    """A UNIX socket listening in a folder of the project (visible read-only on main): connecting must fail."""
    require("bwrap", "no_network")
    folder = REPO / f"{SCRATCH}sock_{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    path = str(folder / "s")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(path)
        os.chmod(folder, 0o755)
        os.chmod(path, 0o777)
        server.listen(1)
        code = ("import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(%r)\n    print('connected')\n"
                "except OSError:\n    print('refused')\n" % path)
        verdict = grade(make_problem("sock", [("\n", "refused\n")]), code, settings_for("bwrap"))
        assert verdict.outcome == "passed", verdict
    finally:
        server.close()
        os.unlink(path)
        folder.rmdir()
