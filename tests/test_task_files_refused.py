
"""Task files that cannot be used are one ``ValueError`` naming the file, line and field, never a traceback of
another kind: JSON nested too deep, invalid UTF-8, a line past the bound (read no further than the bound),
LiveCodeBench problem fields that cannot be parsed (zlib and many-tests bombs included), and LongBench-v2 duplicate
ids or lone surrogates."""

from __future__ import annotations

import base64
import json
import pickle
import re
import tracemalloc
import zlib
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import tasks.base
import tasks.livecodebench as lcb
from tasks.base import bundled_path, iter_jsonl, read_records
from tasks.livecodebench.problem import MAX_TESTS, parse_problem
from tasks.longbench_v2 import load as load_longbench
from tests.refusals import DEEP, one_line_error


def bundled_rows() -> list[dict]:
    path = Path(lcb.__file__).resolve().parents[1] / "data" / "livecodebench" / "sample.jsonl"
    return [r for _, r in iter_jsonl(path)]


def test_a_100k_deep_line_names_file_and_line(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"a": 1}\n{"x": ' + DEEP + "}\n")
    with pytest.raises(ValueError, match=r"task.path: .*deep.jsonl line 2: JSON nested deeper than 64"):
        list(iter_jsonl(path))
    path = tmp_path / "deep.json"
    path.write_text(DEEP)
    with pytest.raises(ValueError, match="deep.json: JSON nested deeper"):
        read_records(path)


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl line 2: invalid UTF-8 at byte 10 of the line"):
        list(iter_jsonl(path))
    path = tmp_path / "bad.json"
    path.write_bytes(b'[\n{"a": 1},\n{"a": "\xff"}]')
    with pytest.raises(ValueError, match=r"bad.json line 3: invalid UTF-8"):
        read_records(path)


def test_a_huge_line_in_a_task_file_is_refused_after_reading_at_most_the_bound(tmp_path, monkeypatch):
    """A line past the bound is refused having read at most the bound: a 64 MiB line (sparse) under a 1 MiB bound
    costs under 8 MiB."""
    monkeypatch.setattr(tasks.base, "MAX_LINE_BYTES", 1 << 20)
    path = tmp_path / "items.jsonl"
    with path.open("wb") as fh:
        fh.write(b'{"_id": "x"}\n')
        fh.truncate(64 << 20)  # line 2: 64 MiB of zero bytes, no newline
    cfg = OmegaConf.create({"source": "path", "path": str(path), "limit": None, "difficulty": None, "length": None,
                            "domain": None, "cot": False, "max_len": None, "cot_tokens": 1, "answer_tokens": 1})
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as err:
            load_longbench(cfg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"{path} line 2: longer than 1 MiB" in one_line_error(err)
    assert peak < 8 << 20, peak


def test_the_bound_is_exact_and_long_lines_under_it_are_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(tasks.base, "READ_CHUNK", 7)  # many pieces per line
    record = json.dumps({"k": "v" * 40})  # 51 bytes
    path = tmp_path / "f.jsonl"
    path.write_text(record + "\n" + record)  # the last line without its newline
    assert [r for _, r in iter_jsonl(path, max_line_bytes=len(record))] == [{"k": "v" * 40}] * 2
    path.write_text(record + "\n" + record + " \n")
    with pytest.raises(ValueError, match=rf"line 2: longer than {len(record)} bytes"):
        list(iter_jsonl(path, max_line_bytes=len(record)))


@pytest.mark.parametrize("field, value, message", [
    ("public_test_cases", DEEP, "field 'public_test_cases': JSON nested deeper"),
    ("metadata", '{"func_name": ' + DEEP + "}", "field 'metadata': JSON nested deeper"),
    ("question_id", None, "field 'question_id' must be a string or an integer, got None"),
    ("public_test_cases", json.dumps([{"input": "", "output": ""}] * (MAX_TESTS + 1)),
     f"more than {MAX_TESTS} JSON objects"),
])
def test_hostile_problem_fields_are_one_line_errors(field, value, message):
    """An unusable id stops the load; tests or metadata that cannot be parsed make the problem one named item
    whose ``data_error`` is that one line."""
    record = dict(bundled_rows()[0], **{field: value})
    if field == "question_id":
        with pytest.raises(ValueError, match=f"f.jsonl line 7: .*{message}"):
            parse_problem(record, "f.jsonl line 7")
        return
    assert re.match(f"f.jsonl line 7: .*{message}", unparsed_tests_reason(record, "f.jsonl line 7"))


def unparsed_tests_reason(record: dict, where: str) -> str:
    """The one-line reason why the tests of ``record`` cannot be parsed (the problem itself parses, testless)."""
    problem = parse_problem(record, where)
    assert problem.data_error and problem.tests == () and "\n" not in problem.data_error
    return problem.data_error


def test_a_zlib_bomb_stops_at_the_per_problem_limit():
    """288 MiB of zeros compressed ~1,000-fold: refused at the 256 MiB per-problem limit, before any unpickling."""
    comp = zlib.compressobj(1)
    chunk = b"\0" * (1 << 24)
    raw = b"".join(comp.compress(chunk) for _ in range(18)) + comp.flush()
    record = dict(bundled_rows()[0], private_test_cases=base64.b64encode(raw).decode())
    assert "decompresses past the per-problem limit of 256 MiB" in unparsed_tests_reason(record, "bomb.jsonl line 1")


def test_a_many_tests_bomb_is_refused_by_count():
    tests = json.dumps([{"input": "", "output": "", "testtype": "stdin"}] * 100_000)
    packed = base64.b64encode(zlib.compress(pickle.dumps(tests))).decode()  # ~2.5 MB of JSON in ~10 KB
    record = dict(bundled_rows()[0], private_test_cases=packed)
    reason = unparsed_tests_reason(record, "many.jsonl line 1")
    assert f"field 'private_test_cases': more than {MAX_TESTS} JSON objects" in reason


@pytest.mark.parametrize("value, shown", [(None, "null"), (7, "int"), (["a"], "list")])
def test_a_non_string_question_content_is_refused_naming_item_and_field(value, shown):
    """A null or non-string ``question_content`` is refused, never a prompt reading "None"."""
    row = dict(bundled_rows()[0], question_content=value)
    with pytest.raises(ValueError, match=rf"f.jsonl line 3: field 'question_content' of item {row['question_id']} "
                                         rf"must be a string, got {shown}"):
        parse_problem(row, "f.jsonl line 3")


def _longbench_cfg(path: Path):
    return OmegaConf.create({"source": "path", "path": str(path), "limit": None, "difficulty": None, "length": None,
                             "domain": None, "cot": False, "max_len": None, "cot_tokens": 1, "answer_tokens": 1})


def _longbench_records() -> list[dict]:
    text = bundled_path("longbench_v2/sample.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()][:3]


def test_longbench_refuses_two_questions_under_one_id(tmp_path):
    """Two questions under one ``_id`` are refused (their rows would collide), as AIME and LiveCodeBench refuse
    duplicates."""
    records = _longbench_records()
    records[2] = {**records[2], "_id": records[0]["_id"]}
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError) as err:
        load_longbench(_longbench_cfg(path))
    text = one_line_error(err)
    assert f"{path} record 3: field '_id': duplicate id {records[0]['_id']!r} (first at record 1)" in text


@pytest.mark.parametrize("field", ["question", "choice_C", "context"])
def test_longbench_refuses_a_lone_surrogate_naming_the_field(tmp_path, field):
    """A lone surrogate in a field is refused at load naming the field, not later at the prompt or the row."""
    records = _longbench_records()
    line = json.dumps(records[1])  # ASCII-escaped: a surrogate is written "\ud800"
    line = line.replace(f'"{field}": "', f'"{field}": "ok \\ud800 ', 1)
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(records[0]) + "\n" + line + "\n")
    with pytest.raises(ValueError) as err:
        load_longbench(_longbench_cfg(path))
    text = one_line_error(err)
    assert f"{path} line 2: field '{field}' holds a lone surrogate (U+D800 at character 3)" in text


def test_a_surrogate_pair_written_as_two_escapes_is_text(tmp_path):
    records = _longbench_records()
    line = json.dumps(records[0]).replace('"question": "', '"question": "\\ud83d\\ude00 ', 1)
    path = tmp_path / "items.jsonl"
    path.write_text(line + "\n")
    (item,) = load_longbench(_longbench_cfg(path))
    assert item.question.startswith("\U0001f600 ")
