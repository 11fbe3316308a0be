"""Hostile programs against the grader's channel, round 3: hidden inputs stay outside the sandbox until their test,
a huge result costs the harness little, a lone surrogate never reaches a row, a 5000-digit answer passes.

Each attack runs in both isolation modes where they can run here (bwrap and the process fallback)."""

from __future__ import annotations

import json
import tracemalloc
import uuid

import pytest
from lcb_helpers import MODES, make_problem, settings_for
from test_hostile_channel import TO_CHANNEL, still_grades

import tasks.livecodebench as lcb
from tasks.livecodebench.grader import grade
from tasks.livecodebench.values import INT_MAX_STR_DIGITS

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
