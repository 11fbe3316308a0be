"""Grading with LiveCodeBench's semantics (``lcb_runner/evaluation/testing_util.py``), in the sandbox.

* stdin tests: both texts are stripped, split on newlines and each line stripped; the line counts must agree; a
  line that differs is compared again as whitespace-separated ``Decimal`` numbers (so ``2.50`` matches ``2.5``).
* functional tests: the return value (a top-level tuple becomes a list) must ``==`` ``json.loads(output)``, compared
  here, in the trusted parent, on a value rebuilt from typed data (``values.py``: exact numeric types, numpy arrays,
  tuples and sets compare as in lcb_runner; a value of the program's own class equals nothing).
* tests run in order, public first; the first failure decides the outcome; a sample passes when every test passes.

Outcomes: ``passed``, ``wrong_answer``, ``timeout``, ``runtime_error`` (an exception, a crash, a resource limit),
``compile_error`` (the code does not compile), ``no_code`` (nothing to run), ``protocol_error`` (the result channel
was tampered with: unreadable, too long, too deep or out of order), ``output_limit`` (the output went over
``task.max_output_mb``, raised to twice the largest expected output: the program's output is read into one buffer
of its announced size, never past the cap, and compared line by line), ``data_error`` (the problem's own tests
could not be parsed: ``Problem.data_error``; nothing runs).

Failure messages are redacted by the test, not by the text: a message about a hidden test carries its index and
outcome (and, for an exception, a builtin exception's class name), never anything of its input, its expected output
or what the program produced; only public tests (shown in the prompt) are quoted, shortened. Messages are valid
text (a lone surrogate a program raised or returned becomes U+FFFD); :func:`grade` never raises for a program.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from sandbox import Limits, RunResult, SandboxError, execute, isolation, modes
from tasks.livecodebench.problem import Problem
from tasks.livecodebench.values import budget, expected_value, official_equal, rebuild
from tasks.source import cfg_get

log = logging.getLogger(__name__)

OUTCOMES = ("passed", "wrong_answer", "timeout", "runtime_error", "compile_error", "no_code", "protocol_error",
            "output_limit", "data_error")
FILE_TOO_LARGE = "[Errno 27] File too large"  # a write past RLIMIT_FSIZE (strict) or the capture bound (lcb_runner)
PROTOCOLS = ("lcb_runner", "strict")  # how programs run: lcb_runner's run_test semantics, or real file descriptors


def _number(cfg: Any, name: str, default: Any, kind: type = int) -> Any:
    """``task.<name>`` as ``kind``: an integer knob takes whole numbers only, every knob finite numbers only."""
    value = cfg_get(cfg, name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
            (kind is int and value != int(value)):
        raise ValueError(f"task.{name}: expected a finite {'integer' if kind is int else 'number'}, got {value!r}")
    return kind(value)


@functools.lru_cache(maxsize=16)
def is_python3(path: str) -> bool:
    """Whether ``path`` runs as a Python 3.8+ interpreter (one short run, no site import)."""
    try:
        out = subprocess.run([path, "-S", "-I", "-c", "import sys; print(sys.hexversion)"], capture_output=True,
                             text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, check=False).stdout.strip()
        return out.isdigit() and int(out) >= 0x030800F0
    except (OSError, subprocess.SubprocessError):
        return False


@dataclass(frozen=True)
class GradeSettings:
    """The grading knobs of ``task``: limits, ``sandbox`` mode, the interpreter and the number of workers."""

    limits: Limits = field(default_factory=Limits)
    sandbox: str = "auto"
    python: str | None = None
    exec_workers: int | None = None
    protocol: str = "lcb_runner"

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"task.protocol: expected one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.sandbox not in isolation.MODES:
            raise ValueError(f"task.sandbox: expected one of {', '.join(isolation.MODES)}, got {self.sandbox!r}")
        if self.exec_workers is not None and self.exec_workers < 1:
            raise ValueError(f"task.exec_workers: must be >= 1 or null, got {self.exec_workers}")
        if self.python is not None and not (os.path.isfile(self.python) and os.access(self.python, os.X_OK)):
            raise ValueError(f"task.python: not an executable file: {self.python}")
        if self.python is not None and not is_python3(self.python):
            raise ValueError(f"task.python: {self.python} is not a Python 3.8+ interpreter (it did not print its "
                             "version for `-c 'import sys; print(sys.hexversion)'`)")

    @classmethod
    def from_cfg(cls, cfg: Any) -> GradeSettings:
        """The settings of a ``task`` config; a knob of the wrong type is a ``ValueError`` naming it."""
        limits = Limits(timeout_s=_number(cfg, "timeout_s", 6.0, float), memory_mb=_number(cfg, "memory_mb", 4096),
                        max_output_mb=_number(cfg, "max_output_mb", 16), nofile=_number(cfg, "nofile", 256),
                        nproc=_number(cfg, "nproc", 64))
        workers = cfg_get(cfg, "exec_workers")
        python = cfg_get(cfg, "python")
        return cls(limits=limits, sandbox=str(cfg_get(cfg, "sandbox", "auto")),
                   python=None if python is None else str(python),
                   exec_workers=None if workers is None else _number(cfg, "exec_workers", None),
                   protocol=str(cfg_get(cfg, "protocol", "lcb_runner")))

    @property
    def workers(self) -> int:
        """``exec_workers``, or every core this process may use."""
        if self.exec_workers:
            return self.exec_workers
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            return os.cpu_count() or 1


@dataclass(frozen=True)
class Verdict:
    """The grade of one program on one problem."""

    outcome: str
    tests_passed: int
    tests_total: int
    failed_test: int | None = None
    error: str | None = None
    exec_time_s: float = 0.0
    sandbox: str | None = None

    @property
    def correct(self) -> bool:
        return self.outcome == "passed"


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def _char_at(data: bytes | bytearray, i: int) -> tuple[str, int]:
    """The character whose UTF-8 encoding starts at ``data[i]`` and its length (U+FFFD, 1 for invalid bytes)."""
    lead = data[i]
    size = 1 if lead < 0x80 else 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14 else 4 if lead >> 3 == 30 else 1
    try:
        return bytes(data[i:i + size]).decode("utf-8"), size
    except UnicodeDecodeError:
        return "\ufffd", 1


def strip_range(data: bytes | bytearray) -> tuple[int, int]:
    """``(lo, hi)`` such that ``data[lo:hi]`` decoded is ``data`` decoded then ``str.strip()``-ed (Unicode
    whitespace at both ends), without decoding the middle."""
    lo, hi = 0, len(data)
    while lo < hi:
        char, size = _char_at(data, lo)
        if not char.isspace():
            break
        lo += size
    while hi > lo:
        start = hi - 1
        while start > lo and hi - start < 4 and data[start] >> 6 == 2:  # back over continuation bytes
            start -= 1
        char, size = _char_at(data, start)
        if start + size != hi or not char.isspace():
            break
        hi = start
    return lo, hi


PADDING = 16  # a produced line whose stripped bytes exceed this many times the expected line's (+1 KiB) is a
# mismatch without being decoded (only digits padded with zeros or spaces 16-fold could have matched)


def _byte_lines(data: bytes | bytearray, want: list[str]):
    """Each line of the stripped ``data``, decoded (invalid UTF-8 as U+FFFD) and stripped, one at a time and only
    when it could match its expected line (see :data:`PADDING`; None otherwise): the output is never copied whole."""
    view = memoryview(data)
    lo, hi = strip_range(data)
    pos = lo
    for w in want:
        nl = data.find(b"\n", pos, hi)
        end = hi if nl < 0 else nl
        a, b = strip_range(view[pos:end])
        if b - a > PADDING * len(w.encode("utf-8")) + 1024:
            yield None
        else:
            yield str(view[pos + a:pos + b], "utf-8", "replace")
        pos = end + 1


def stripped_text(data: bytes | bytearray, width: int = 1 << 20) -> str:
    """At most ``width`` characters from each end of the stripped output (what a failure message may quote or
    fingerprint: :func:`mismatch` keeps 80 of a public test's, a fingerprint of a hidden one's)."""
    lo, hi = strip_range(data)
    if hi - lo <= 2 * width:
        return bytes(data[lo:hi]).decode("utf-8", "replace")
    return bytes(data[lo:lo + width]).decode("utf-8", "replace") + "…" + \
        bytes(data[hi - width:hi]).decode("utf-8", "replace")


def stdout_matches(actual: str | bytes | bytearray, expected: str) -> bool:
    """The official stdin comparison (``grade_stdio``); ``actual`` as text or as the program's raw output bytes
    (compared line by line, never decoded whole)."""
    want = _lines(expected)
    if isinstance(actual, str):
        got = _lines(actual)
        if len(got) != len(want):
            return False
    else:
        lo, hi = strip_range(actual)
        if actual.count(b"\n", lo, hi) + 1 != len(want):
            return False
        got = _byte_lines(actual, want)
    for g, w in zip(got, want):
        if g is None:
            return False
        if g == w:
            continue
        dg, dw = _decimals(g), _decimals(w)
        try:
            if dg is None or dw is None or dg != dw:
                return False
        except InvalidOperation:  # signalling NaN
            return False
    return True


def _short(value: Any, width: int = 80) -> str:
    """``value`` as bounded text (a string as is, anything else as JSON, a rebuilt non-JSON value by its
    ``repr``); never raises."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= width else text[: width // 2] + "…" + text[-width // 2:]


def fingerprint(text: str) -> str:
    """A hidden text's length and SHA-256 prefix (the last text guard, :func:`redact`, writes it)."""
    data = text.encode("utf-8", "surrogatepass")
    return f"<{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}>"


def mismatch(got: Any, want: str, public: bool, text: bool) -> str:
    """The failure detail of a wrong answer: quoted for a public test (``repr`` for stdout ``text``, JSON for a
    functional value); for a hidden one nothing of either side (not even a length or a hash of the program's
    output, which the program chooses)."""
    if public:
        return f"got {_short(got)!r}, expected {_short(want)!r}" if text else \
            f"got {_short(got)}, expected {_short(want)}"
    return "wrong output (hidden test: outputs withheld)"


def withheld(error: str) -> str:
    """A program's failure on a hidden test without its text (an exception message can quote the input, and a
    program can name its own exception class after it): a builtin exception's name, else "an exception"."""
    name = str(error).split(":", 1)[0].strip()
    builtin = getattr(builtins, name, None)
    known = isinstance(builtin, type) and issubclass(builtin, BaseException)
    return f"{name if known else 'an exception'} (message withheld: hidden test)"


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced (U+FFFD): what a row may hold."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


_SURROGATE = re.compile("[\ud800-\udfff]")


MIN_REDACTED = 4  # shorter hidden texts ("1", "YES") say nothing and would blank out ordinary words


def redact(error: str, problem: Problem) -> str:
    """``error`` with every hidden test's input or output (stripped, at least :data:`MIN_REDACTED` characters)
    replaced by a fingerprint: a last guard for text a program computed from its hidden inputs (read from its
    job file, say) and printed on a public test."""
    for test in problem.tests[problem.n_public:]:
        for text in (test.input.strip(), test.output.strip()):
            if len(text) >= MIN_REDACTED and text in error:
                error = error.replace(text, f"<hidden {fingerprint(text)}>")
            for line in text.splitlines():
                line = line.strip()
                if len(line) >= MIN_REDACTED and line in error:
                    error = error.replace(line, "<hidden>")
    return error


def _fit_output(limits: Limits, problem: Problem) -> Limits:
    """Raise the output limit above twice the largest expected output, so that no correct program hits it."""
    largest = max(len(t.output.encode("utf-8")) for t in problem.tests)
    needed = -(-2 * largest // (1 << 20)) + 1
    return limits if needed <= limits.max_output_mb else dataclasses.replace(limits, max_output_mb=needed)


def grade(problem: Problem, code: str | None, settings: GradeSettings) -> Verdict:
    """Run ``code`` on every test of ``problem`` in the sandbox and name the outcome. Raises ``SandboxError`` only
    when the sandbox itself cannot start twice in a row (a harness problem, never the program's)."""
    total = len(problem.tests)
    if problem.data_error:
        return Verdict("data_error", 0, total, error=valid_text(f"the problem's tests: {problem.data_error}"[:1000]))
    if code is None:
        return Verdict("no_code", 0, total)
    iso = modes.resolve(settings.sandbox, settings.python)
    limits = _fit_output(settings.limits, problem)
    for attempt in (1, 2):
        failure: list[tuple[str, str]] = []

        def on_result(i: int, msg: dict) -> bool:
            try:
                return check(i, msg)
            except (ValueError, TypeError, RecursionError, MemoryError) as exc:  # a forged result message
                failure.append(("protocol_error", f"test {i}: unusable result ({type(exc).__name__})"))
                return False

        def check(i: int, msg: dict) -> bool:
            if not msg.get("ok"):
                error = msg.get("error", "error")
                if isinstance(error, str) and FILE_TOO_LARGE in error:
                    failure.append(("output_limit", f"test {i}: output over task.max_output_mb (File too large)"))
                    return False
                shown = _short(error, 400) if i < problem.n_public else withheld(error)
                failure.append(("runtime_error", f"test {i}: {shown}"))
                return False
            want, public = problem.tests[i].output, i < problem.n_public
            if problem.kind == "stdin":
                got = msg.get("stdout")
                if msg.get("truncated") or not isinstance(got, (bytes, bytearray)):
                    failure.append(("output_limit" if msg.get("truncated") else "protocol_error",
                                    f"test {i}: output over task.max_output_mb" if msg.get("truncated") else
                                    f"test {i}: no output bytes"))
                    return False
                ok = stdout_matches(got, want)
                detail = "" if ok else mismatch(stripped_text(got), want.strip(), public, text=True)
            else:
                raw = msg.get("value_raw")
                if not isinstance(raw, (bytes, bytearray)):
                    failure.append(("protocol_error", f"test {i}: no return value bytes"))
                    return False
                try:
                    got = rebuild(raw, budget(want))
                except OverflowError as exc:  # more containers than a value equal to the expected one can hold
                    shown = str(exc) if public else mismatch(None, want, False, text=False)
                    failure.append(("wrong_answer", f"test {i}: {shown}"))
                    return False
                ok, error = official_equal(got, expected_value(want))
                if error is not None:
                    failure.append(("runtime_error", f"test {i}: {error if public else withheld(error)}"))
                    return False
                detail = "" if ok else mismatch(got, want, public, text=False)
            if not ok:
                failure.append(("wrong_answer", f"test {i}: {detail}"))
            return ok

        try:
            result = execute(iso, problem.kind, code, problem.func_name, [t.input for t in problem.tests],
                             limits, on_result, hidden=(problem.source_file,) if problem.source_file else (),
                             protocol=settings.protocol, n_public=problem.n_public)
            break
        except SandboxError:
            if attempt == 2:
                raise
            log.warning("LiveCodeBench: the sandbox failed to start; retrying once", exc_info=True)
    verdict = _verdict(result, failure, total, iso.mode)
    return dataclasses.replace(verdict, error=valid_text(redact(verdict.error, problem))) if verdict.error else verdict


def _verdict(result: RunResult, failure: list[tuple[str, str]], total: int, mode: str) -> Verdict:
    index = result.test_index
    passed = total if result.status == "done" else (index if index is not None else 0)
    if result.status == "done":
        outcome, error = "passed", None
    elif result.status == "stopped" and failure:
        outcome, error = failure[0]
    elif result.status == "timeout":
        where = f"test {index}" if index is not None else "loading the program"
        outcome, error = "timeout", f"{where}: over the time limit"
    elif result.status == "compile_error":  # compile() of the code: before the program ran, nothing of a test
        outcome, error = "compile_error", result.error
    elif result.status == "protocol_error":
        where = f"test {index}" if index is not None else "loading the program"
        outcome, error = "protocol_error", f"{where}: {result.error}"
    else:  # crashed, load_error
        where = f"test {index}" if index is not None else "loading the program"
        outcome, error = "runtime_error", f"{where}: {result.status}: {result.error}"
    return Verdict(outcome, passed, total, None if outcome == "passed" else index, error,
                   round(result.elapsed_s, 4), mode)


def grade_many(pairs: list[tuple[Problem, str | None]], settings: GradeSettings) -> list[Verdict]:
    """Grade many programs in parallel (``settings.workers`` sandboxes at a time), results in input order."""
    if any(code is not None for _, code in pairs):
        modes.resolve(settings.sandbox, settings.python)  # probe and warn once, before the threads
    if settings.workers == 1 or len(pairs) <= 1:
        return [grade(p, c, settings) for p, c in pairs]
    with ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="lcb-grade") as pool:
        return list(pool.map(lambda pc: grade(pc[0], pc[1], settings), pairs))
