"""The result channel and the hidden tests: every attack on the channel between the driver and the harness
(poisoned, deep, endless, forged or huge lines), on the harness's memory or on the hidden tests becomes that sample's
verdict; ``grade`` never raises and the harness grades the next program. Hidden inputs stay outside the sandbox
until their test and never reach a row, nor does a lone surrogate; a program's output is held once and bounded; a
5000-digit answer passes.

Each attack runs in both isolation modes where they can run here (bwrap and the process fallback)."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
import uuid

import pytest
from lcb_helpers import (
    MODES,
    REPO,
    bundled,
    make_problem,
    settings_for,
    strict_settings,
)
from lcb_sample_source import REFERENCE

import tasks.livecodebench as lcb
from tasks.livecodebench.grader import grade
from tasks.livecodebench.values import INT_MAX_STR_DIGITS

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


def forged_value(payload: str) -> str:
    """A functional program that writes a result header and ``payload`` (a Python expression of bytes) straight
    into the result channel, as if it were its return value, then waits."""
    return TO_CHANNEL + ("class Solution:\n    def f(self, a):\n        body = " + payload + "\n"
                         "        flood(b'{\"ev\": \"result\", \"i\": 0, \"ok\": true, \"value_bytes\": %d}\\n' % "
                         "len(body) + body)\n        import time\n        time.sleep(30)\n")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("payload, outcome", [
    ("b'[' + b'{},' * (5 << 20) + b'{}]'", "wrong_answer"),  # 15 MiB of empty objects as the return value
    ("b'x' * (30 << 20)", "protocol_error"),  # 30 MiB announced: over the output limit, never read
])
def test_a_huge_forged_result_costs_the_harness_little(mode, payload, outcome):
    """On main a 30 MiB result line ``[{},{},...]`` was parsed whole: 1.5 GiB in the harness. Now a header line is
    at most 64 KiB, a value's raw bytes at most the output limit, and a value with more containers than the
    expected one is a wrong answer without being built."""
    settings = settings_for(mode, timeout_s=5.0)
    problem = make_problem("huge", [("1", "[1]")], func_name="f")
    tracemalloc.start()
    try:
        verdict = grade(problem, forged_value(payload), settings)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert verdict.outcome == outcome, verdict
    assert peak < 64 << 20, f"{peak / 2**20:.0f} MiB held by the harness"
    still_grades(settings)


@pytest.mark.parametrize("mode", MODES)
def test_a_long_forged_header_line_is_a_protocol_error(mode):
    settings = settings_for(mode, timeout_s=5.0)
    line = "b'{\"ev\": \"result\", \"i\": 0, \"ok\": true, \"value\": [' + b'{},' * (10 << 20) + b'{}]}\\n'"
    code = TO_CHANNEL + f"class Solution:\n    def f(self, a):\n        flood({line})\n        return a\n"
    verdict = grade(make_problem("line", [("1", "1")], func_name="f"), code, settings)
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


# Looks everywhere a program can for test inputs while the public test 0 runs: the job file and every container
# the interpreter tracks (the driver's own lists, dicts and frames), then prints what it found, encoded (hex of the
# reversed text) so that no redaction of exact copies can catch it.
HARVEST = """import gc, sys
texts = []
try:
    texts.append(open(sys.argv[1], encoding='utf-8', errors='replace').read())
except OSError:
    pass
for obj in gc.get_objects():
    try:
        values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
        texts += [v for v in values if isinstance(v, str)]
    except Exception:
        pass
key, pub = 'SEC' + 'RET', 'PUB' + 'LIC'  # built at run time: the program's own text holds neither
secret = sorted({t[t.index(key):][:40] for t in texts if key in t})
public = any(pub in t for t in texts)
print('public seen' if public else 'public unseen', ' '.join(s[::-1].encode().hex() for s in secret) or 'nothing')
"""


@pytest.mark.parametrize("mode", MODES)
def test_no_hidden_input_is_inside_the_sandbox_while_a_public_test_runs(mode):
    """On main the driver held every input before test 0: the harvest printed the hidden input, reversed and
    hex-encoded, into the public test's failure message (and from there into samples.jsonl)."""
    secret = "SECRET" + uuid.uuid4().hex
    problem = make_problem("harvest", [("PUBLIC\n", "x\n"), (secret + "\n", "y\n")])  # test 1 is hidden
    verdict = grade(problem, HARVEST, settings_for(mode))
    assert verdict.outcome == "wrong_answer" and verdict.failed_test == 0, verdict
    assert "public seen nothing" in verdict.error, verdict.error  # the harvest works: it finds the public input
    assert secret[::-1].encode().hex()[:16] not in verdict.error


@pytest.mark.parametrize("mode", MODES)
def test_a_message_about_a_hidden_test_carries_its_index_not_its_data(mode):
    secret = "SECRET" + uuid.uuid4().hex
    problem = make_problem("echo", [("1", "1"), (json.dumps(secret), json.dumps("z"))], func_name="f")
    cases = {  # what the program does with the hidden input -> the only message allowed
        "raise ValueError(s[::-1].encode().hex())": "test 1: ValueError (message withheld: hidden test)",
        "return s[::-1].encode().hex()": "test 1: wrong output (hidden test: outputs withheld)",
        "return 'x' * (len(s) * 1000)": "test 1: wrong output (hidden test: outputs withheld)",  # no length either
    }
    for action, message in cases.items():
        code = f"class Solution:\n    def f(self, s):\n        if s == 1:\n            return 1\n        {action}\n"
        verdict = grade(problem, code, settings_for(mode))
        assert verdict.error == message, verdict


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
    """the text of an exception (or of a forged channel message) on a hidden test quoted its input."""
    problem = make_problem("leak", [("1\n", "1\n"), (f"{SECRET}\n", "2\n")])
    verdict = grade(problem, LEAKS[leak], strict_settings(mode))
    assert not verdict.correct and verdict.failed_test == 1, verdict
    assert SECRET not in verdict.error and SECRET.replace("-", "_") not in verdict.error, verdict.error


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("code, outcome", [
    ("class Solution:\n    def f(self, a):\n        raise ValueError(chr(0xD800))", "runtime_error"),
    ("class Solution:\n    def f(self, a):\n        return chr(0xD800) + 'x'", "wrong_answer"),
    ("class Solution:\n    def f(self, a):\n        return {chr(0xDFFF): [chr(0xD800)]}", "wrong_answer"),
    ("class E(Exception):\n    def __str__(self):\n        return chr(0xDC00) * 3\n"
     "class Solution:\n    def f(self, a):\n        raise E()", "runtime_error"),
    ("print(chr(0xD800))\nraise ValueError(chr(0xD801))", "runtime_error"),
    ("print(chr(0xD800))", "wrong_answer"),
    ("x = chr(0xD800) +", "compile_error"),
])
def test_a_lone_surrogate_from_the_program_never_reaches_a_row(mode, code, outcome):
    """On main a surrogate in an exception message or a return value reached the row (the writer crashed there,
    and again on every resume): rows hold valid text, and the grade is the program's."""
    functional = "class Solution" in code
    problem = make_problem("sur", [("1", "2")] if functional else [("1\n", "2\n")], func_name="f" if functional
                           else None)
    row = lcb.score(problem, f"```python\n{code}\n```", cfg={"sandbox": mode, **_knobs(mode)})
    assert row["outcome"] == outcome, row
    json.dumps(row, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    assert "\ufffd" in row["error"] or outcome in ("wrong_answer", "compile_error")


def _knobs(mode: str) -> dict:
    settings = settings_for(mode)
    return {"python": settings.python, "timeout_s": settings.limits.timeout_s, "memory_mb": settings.limits.memory_mb}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", ["lcb_runner", "strict"])
def test_a_correct_5000_digit_functional_answer_passes(mode, protocol):
    """On main the answer crossed the channel as decimal text: over Python's 4300-digit limit it was a protocol
    error. lcb_runner parses tests with 50000-digit integers; big results travel as hex."""
    n = 16610  # 2**n has 5001 digits
    problem = make_problem("pow", [(str(n), _digits(2 ** n)), (str(n + 1), _digits(2 ** (n + 1)))], func_name="power")
    code = "class Solution:\n    def power(self, n):\n        return 2 ** n\n"
    verdict = grade(problem, code, settings_for(mode, protocol=protocol))
    assert verdict.outcome == "passed", verdict
    wrong = grade(problem, code.replace("2 ** n", "2 ** n + 1"), settings_for(mode, protocol=protocol))
    assert wrong.outcome == "wrong_answer", wrong


def _digits(value: int) -> str:
    import sys

    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(INT_MAX_STR_DIGITS)
    try:
        return str(value)
    finally:
        sys.set_int_max_str_digits(before)


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
    """with a raised ``task.max_output_mb``, one 192 MiB line of stdout cost the harness +567 MiB (held as
    the read buffer, the line, its decoded text and the parsed string). Now it is read into one buffer of its size."""
    strict_settings(mode)  # skip where the mode cannot run
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
                    strict_settings(mode, max_output_mb=1))
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
