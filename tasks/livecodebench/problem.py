"""A LiveCodeBench problem as a typed, frozen record, parsed from one row of ``code_generation_lite``.

Row schema (``livecodebench/code_generation_lite``, as ``lcb_runner/benchmarks/code_generation.py`` reads it):
``question_title, question_content, platform (leetcode|codeforces|atcoder), question_id, contest_id,
contest_date (ISO), starter_code, difficulty (easy|medium|hard), public_test_cases (JSON list of
{input, output, testtype}), private_test_cases (the same JSON, or base64 → zlib → pickle → that JSON string),
metadata (JSON object; ``func_name`` for functional problems)``.

The compressed private tests are decoded with an unpickler that refuses every global: only strings, bytes,
numbers and containers can come out of it, so a poisoned file raises ``ValueError`` and runs nothing.

Data limits (a zlib bomb or a billion tiny tests is refused with one line naming the file, line and field, before
it is held whole): :data:`MAX_PROBLEM_BYTES` of decoded tests per problem (public + private), :data:`MAX_TEST_BYTES`
per test (input + output) and :data:`MAX_TESTS` tests per problem; JSON nested at most ``MAX_JSON_DEPTH`` levels.
Where the figures come from: a contest test is bounded by the judge's input limits (AtCoder and Codeforces inputs
of 2·10^5..10^6 numbers are 2..8 MB of text; LeetCode's functional arguments are smaller), LiveCodeBench problems
carry tens of tests (the bundled items: 5 to 8, the largest 169 KB decoded, compression ratio 1.5..2.5 on
base64 text), and decoding the whole hub release gives about 12 GB for ~1,000 problems (NVIDIA-NeMo/Gym PR 2806:
"12.1 GB"), about 11 MB a problem on average. The caps leave an order of magnitude over those figures (32 MiB a
test, 256 MiB a problem) while cutting the reproduced bombs (340 KB → 1.3 GB, 509 KB → 2.68 million tests) at the
first limit crossed; the harness then holds at most about three times ``MAX_PROBLEM_BYTES`` while parsing one row.

A row whose tests cannot be parsed (over a limit, not JSON, an integer over lcb_runner's 50000 digits) is still one
item, named, with its prompt: ``data_error`` says why, and every sample of it is graded ``data_error`` (never
correct; the denominator keeps it). A row whose identity or prompt fields are unusable stops the load, naming the
file, line and field.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tasks.base import MAX_JSON_DEPTH, loads_bounded, too_deep
from tasks.livecodebench.values import LIMIT_MESSAGE, loads_big

PLATFORMS = ("leetcode", "codeforces", "atcoder")
DIFFICULTIES = ("easy", "medium", "hard")
TEST_TYPES = ("stdin", "functional")
FIELDS = ("question_title", "question_content", "platform", "question_id", "contest_id", "contest_date",
          "starter_code", "difficulty", "public_test_cases", "private_test_cases", "metadata")
MiB = 1 << 20
MAX_PROBLEM_BYTES = 256 * MiB  # decoded tests of one problem (see the module docstring for the figures)
MAX_TEST_BYTES = 32 * MiB  # input + output of one test
MAX_TESTS = 2000  # tests of one problem


@dataclass(frozen=True)
class TestCase:
    """One test: ``input`` (stdin text, or one JSON value per line for functional tests) and expected ``output``."""

    __test__ = False  # not a pytest class

    input: str
    output: str
    testtype: str


@dataclass(frozen=True)
class Problem:
    """One problem. ``tests`` are the public tests followed by the private ones (the official order)."""

    question_id: str
    question_title: str
    question_content: str
    platform: str
    contest_id: str
    contest_date: datetime
    starter_code: str
    difficulty: str
    tests: tuple[TestCase, ...]
    n_public: int
    func_name: str | None
    source_file: str = field(default="", compare=False)  # the file it was read from (hidden from programs)
    data_error: str = ""  # why the tests could not be parsed ("" when they could); then ``tests`` is empty

    @property
    def item_id(self) -> str:
        return self.question_id

    @property
    def kind(self) -> str:
        """``functional`` (call ``func_name``) or ``stdin``, as the official grader decides (by ``func_name``)."""
        return "functional" if self.func_name else "stdin"

    @property
    def breakdown(self) -> dict[str, str]:
        return {"difficulty": self.difficulty, "platform": self.platform,
                "contest_date": self.contest_date.date().isoformat(), "test_type": self.kind}


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles only what needs no global lookup: str, bytes, numbers, bool, None, list, tuple, dict, set."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"forbidden global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("forbidden persistent id")


def plain_unpickle(data: bytes | bytearray) -> Any:
    """``pickle.loads`` restricted to plain data; anything that would call or import raises ``ValueError``."""
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, MemoryError, RecursionError) as exc:
        raise ValueError(f"refused pickle: {exc}") from exc


def decode_compressed(text: str, limit: int = MAX_PROBLEM_BYTES) -> str:
    """base64 → zlib (at most ``limit`` bytes out) → (restricted) pickle → the JSON string it holds."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=False)
        inflater = zlib.decompressobj()
        data = bytearray()
        while raw and len(data) <= limit:  # 16 MiB steps: the output never grows past the limit by doubling
            data += inflater.decompress(raw, 16 * MiB)
            raw = inflater.unconsumed_tail
        if not raw:
            data += inflater.flush()
    except (binascii.Error, zlib.error, UnicodeEncodeError) as exc:
        raise ValueError(f"not base64+zlib: {exc}") from exc
    if len(data) > limit or raw:
        raise ValueError(f"decompresses past the per-problem limit of {MAX_PROBLEM_BYTES >> 20} MiB")
    value = plain_unpickle(data)
    del data
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if not isinstance(value, str):
        raise ValueError(f"the pickle holds a {type(value).__name__}, expected a JSON string")
    return value


def parse_tests(value: Any, where: str, name: str, compressed_ok: bool,
                budget: int = MAX_PROBLEM_BYTES) -> list[TestCase]:
    """A test list from its JSON text (or, for private tests, the compressed form), within ``budget`` decoded
    bytes, :data:`MAX_TEST_BYTES` a test and :data:`MAX_TESTS` tests."""
    field_where = f"{where}: field '{name}'"
    if isinstance(value, list):
        items = value
    elif isinstance(value, str):
        if len(value) > budget:
            raise ValueError(f"{field_where} is over the per-problem limit of {budget >> 20} MiB")
        if compressed_ok and not value.lstrip().startswith("["):  # official: json.loads, else the compressed form
            try:
                value = decode_compressed(value, budget)
            except (ValueError, UnicodeDecodeError) as err:
                raise ValueError(f"{field_where} is neither JSON nor base64/zlib/pickle JSON: {err}") from None
        items = loads_bounded(value, field_where, max_objects=MAX_TESTS)  # one object a test
    else:
        raise ValueError(f"{field_where} must be a JSON string, got {type(value).__name__}")
    if not isinstance(items, list):
        raise ValueError(f"{field_where} must hold a list of tests")
    if len(items) > MAX_TESTS:
        raise ValueError(f"{field_where} holds {len(items)} tests, over the limit of {MAX_TESTS}")
    tests, total = [], 0
    for k, item in enumerate(items):
        if not isinstance(item, dict) or not all(isinstance(item.get(f), str) for f in ("input", "output")):
            raise ValueError(f"{field_where} test {k} needs string 'input' and 'output'")
        size = len(item["input"]) + len(item["output"])
        if size > MAX_TEST_BYTES:
            raise ValueError(f"{field_where} test {k} is over the per-test limit of {MAX_TEST_BYTES >> 20} MiB")
        total += size
        if total > budget:
            raise ValueError(f"{field_where}: the tests are over the per-problem limit of {budget >> 20} MiB")
        testtype = item.get("testtype", "stdin")
        if testtype not in TEST_TYPES:
            raise ValueError(f"{field_where} test {k} has testtype {testtype!r}")
        tests.append(TestCase(item["input"], item["output"], testtype))
    return tests


def _check_functional(tests: list[TestCase], where: str) -> None:
    for k, test in enumerate(tests):
        for j, line in enumerate(test.input.split("\n")):
            _check_json(line, f"{where}: test {k} of a functional problem, input line {j} (not one JSON value a line)")
        _check_json(test.output, f"{where}: test {k} of a functional problem, the output")


def _check_json(text: str, where: str) -> None:
    """``text`` parses as lcb_runner parses it (``json.loads`` with 50000-digit integers), within the depth limit."""
    try:
        loads_bounded(text, where)
    except ValueError as exc:
        if LIMIT_MESSAGE not in str(exc):
            raise
        try:
            value = loads_big(text)
        except ValueError as big:
            raise ValueError(f"{where}: {big}") from None
        if too_deep(value, MAX_JSON_DEPTH):
            raise ValueError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None


def _choice(record: dict, name: str, allowed: tuple[str, ...], where: str) -> str:
    value = str(record[name]).strip().lower()
    if value not in allowed:
        raise ValueError(f"{where}: field '{name}' must be one of {', '.join(allowed)}, got {record[name]!r}")
    return value


TEXT_FIELDS = {"question_title": False, "question_content": False, "contest_id": False, "platform": False,
               "difficulty": False, "starter_code": True}  # field: whether null is allowed (no starter code)


def _check_texts(record: dict, where: str, qid: str) -> None:
    """The text fields are strings (``contest_id`` may be an integer): a null ``question_content`` would become
    a prompt reading "None"."""
    for name, nullable in TEXT_FIELDS.items():
        value = record[name]
        if value is None and nullable or isinstance(value, str) or \
                (name == "contest_id" and isinstance(value, int) and not isinstance(value, bool)):
            continue
        raise ValueError(f"{where}: field '{name}' of item {qid[:80]} must be a string, got {_brief(value)}")
    if not record["question_content"].strip():
        raise ValueError(f"{where}: field 'question_content' of item {qid[:80]} is empty")


def _brief(value: object) -> str:
    return "null" if value is None else type(value).__name__


def parse_problem(record: dict, where: str, source_file: str = "") -> Problem:
    """Validate one row and build its :class:`Problem`; ``where`` names the file and line in errors (and a bad
    text field names the item id too)."""
    for name in FIELDS:
        if name not in record:
            raise ValueError(f"{where}: missing field '{name}'")
    raw_id = record["question_id"]
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
        raise ValueError(f"{where}: field 'question_id' must be a string or an integer, got {raw_id!r}"[:300])
    qid = str(raw_id).strip()
    if not qid:
        raise ValueError(f"{where}: field 'question_id' is empty")
    _check_texts(record, where, qid)
    date = record["contest_date"]
    try:
        contest_date = date if isinstance(date, datetime) else datetime.fromisoformat(str(date))
    except ValueError as exc:
        raise ValueError(f"{where}: field 'contest_date' is not an ISO date: {date!r}") from exc
    func_name, tests, n_public, data_error = None, [], 0, ""
    try:
        func_name = _func_name(record, where)
        tests, n_public = _tests_of(record, where, func_name)
    except ValueError as exc:
        data_error = str(exc)[:1000]
    return Problem(
        question_id=qid,
        question_title=str(record["question_title"]),
        question_content=str(record["question_content"]),
        platform=_choice(record, "platform", PLATFORMS, where),
        contest_id=str(record["contest_id"]),
        contest_date=contest_date,
        starter_code=str(record["starter_code"] or ""),
        difficulty=_choice(record, "difficulty", DIFFICULTIES, where),
        tests=tuple(tests),
        n_public=n_public,
        func_name=func_name,
        source_file=source_file,
        data_error=data_error,
    )


def _func_name(record: dict, where: str) -> str | None:
    """``metadata.func_name`` (None: a stdin problem); ``ValueError`` naming the field."""
    metadata = record["metadata"]
    metadata = loads_bounded(metadata, f"{where}: field 'metadata'") if isinstance(metadata, str) else \
        (metadata or {})
    if not isinstance(metadata, dict):
        raise ValueError(f"{where}: field 'metadata' must be a JSON object")
    func_name = metadata.get("func_name") or None
    if func_name is not None and not isinstance(func_name, str):
        raise ValueError(f"{where}: field 'metadata.func_name' must be a string")
    return func_name


def _tests_of(record: dict, where: str, func_name: str | None) -> tuple[list[TestCase], int]:
    """``(tests, n_public)`` of a row; ``ValueError`` naming the field when they cannot be parsed."""
    public = parse_tests(record["public_test_cases"], where, "public_test_cases", compressed_ok=False)
    used = sum(len(t.input) + len(t.output) for t in public)
    private = parse_tests(record["private_test_cases"], where, "private_test_cases", compressed_ok=True,
                          budget=MAX_PROBLEM_BYTES - used)
    if len(public) + len(private) > MAX_TESTS:
        raise ValueError(f"{where}: {len(public) + len(private)} tests, over the limit of {MAX_TESTS}")
    tests = public + private
    if not tests:
        raise ValueError(f"{where}: the problem has no tests")
    if func_name:
        _check_functional(tests, where)
    return tests, len(public)
