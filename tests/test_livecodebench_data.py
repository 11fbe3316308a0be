"""LiveCodeBench data: bundled sample, local files, hub release mapping, date window, bad data, poisoned pickles."""

from __future__ import annotations

import base64
import json
import os
import pickle
import re
import zlib
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

import tasks.hub
import tasks.livecodebench as lcb
from tasks.livecodebench.data import release_files
from tasks.livecodebench.problem import decode_compressed, plain_unpickle
from tasks.source import source_of

SAMPLE = Path(lcb.__file__).resolve().parents[1] / "data" / "livecodebench" / "sample.jsonl"


def cfg(**kw):
    return OmegaConf.create({"source": "bundled", "start_date": "2024-08-01", "end_date": "2025-01-31", **kw})


def rows() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines()]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def compress(value: object) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


def test_bundled_sample_loads_both_kinds_with_compressed_private_tests():
    items = lcb.load(cfg())
    assert [p.item_id for p in items] == ["ss_atcoder_001", "ss_codeforces_001", "ss_atcoder_002",
                                           "ss_leetcode_001", "ss_leetcode_002", "ss_leetcode_003"]
    kinds = {p.item_id: p.kind for p in items}
    assert kinds["ss_atcoder_001"] == "stdin" and kinds["ss_leetcode_002"] == "functional"
    by_id = {p.item_id: p for p in items}
    pairs = by_id["ss_leetcode_002"]
    assert pairs.func_name == "countPairs" and pairs.starter_code.startswith("class Solution:")
    assert pairs.tests[0].input == "[1, 2, 3, 4, 5]\n3" and pairs.tests[0].output == "4"
    assert pairs.n_public == 2 and len(pairs.tests) == 5  # public first, then the decompressed private tests
    raw = {r["question_id"]: r for r in rows()}
    assert not raw["ss_leetcode_002"]["private_test_cases"].lstrip().startswith("[")  # really the compressed form
    assert raw["ss_atcoder_001"]["private_test_cases"].lstrip().startswith("[")
    assert by_id["ss_atcoder_002"].breakdown == {"difficulty": "hard", "platform": "atcoder",
                                                 "contest_date": "2024-10-19", "test_type": "stdin"}
    assert SAMPLE.stat().st_size < 1_000_000


def test_date_window_and_limit_follow_lcb_runner():
    ids = [p.item_id for p in lcb.load(cfg(start_date="2024-09-08", end_date="2024-12-14"))]
    assert ids == ["ss_codeforces_001", "ss_atcoder_002", "ss_leetcode_001", "ss_leetcode_002"]  # both bounds in
    assert [p.item_id for p in lcb.load(cfg(limit=2))] == ["ss_atcoder_001", "ss_codeforces_001"]
    assert len(lcb.load(cfg(start_date=None, end_date=None))) == 6
    with pytest.raises(ValueError, match="no problem .* lies in the window"):
        lcb.load(cfg(start_date="2023-01-01", end_date="2023-12-31"))
    with pytest.raises(ValueError, match=r"task.start_date: expected YYYY-MM-DD"):
        lcb.load(cfg(start_date="Aug 2024"))
    with pytest.raises(ValueError, match="is after task.end_date"):
        lcb.load(cfg(start_date="2025-01-01", end_date="2024-01-01"))


def test_local_jsonl_and_parquet_in_the_official_schema(tmp_path):
    records = rows()[:3]
    path = write_jsonl(tmp_path / "lcb.jsonl", records)
    assert [p.item_id for p in lcb.load(cfg(source="path", path=str(path)))] == [r["question_id"] for r in records]
    pq = tmp_path / "lcb.parquet"
    pd.DataFrame(rows()).to_parquet(pq)
    items = lcb.load(cfg(source="path", path=str(pq)))
    assert len(items) == 6 and items[4].tests == lcb.load(cfg())[4].tests
    assert items[0].source_file == str(pq)


@pytest.mark.parametrize("release, files", [
    ("release_v1", ["test.jsonl"]),
    ("release_v3", ["test.jsonl", "test2.jsonl", "test3.jsonl"]),
    ("release_latest", ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]),
    ("v2", ["test2.jsonl"]),
    ("v4_v5", ["test4.jsonl", "test5.jsonl"]),
    ("v1_v3", ["test.jsonl", "test2.jsonl", "test3.jsonl"]),
])
def test_hub_release_reads_the_release_files(monkeypatch, tmp_path, release, files):
    calls = []
    data = rows()

    def fake_download(repo_id, filename, repo_type, revision, local_files_only):
        calls.append((repo_id, filename, repo_type, revision))
        assert local_files_only is False  # the hub answers: a normal download
        k = len(calls) - 1
        return str(write_jsonl(tmp_path / filename, data[k:k + 1]))  # one problem per file

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(tasks.hub, "offline_reason", lambda: None)
    items = lcb.load(cfg(source="hub", release=release, revision="abc123", start_date=None, end_date=None))
    assert [c[1] for c in calls] == files
    assert {c[0] for c in calls} == {"livecodebench/code_generation_lite"} and calls[0][2:] == ("dataset", "abc123")
    assert [p.item_id for p in items] == [r["question_id"] for r in data[: len(files)]]


@pytest.mark.parametrize("release", ["release_v7", "v0", "v5_v3", "latest", "v3_v9"])
def test_unknown_release_is_refused(release):
    with pytest.raises(ValueError, match="task.release: unknown release"):
        release_files(release)


def test_hub_failure_names_the_file_and_the_way_out(monkeypatch):
    import huggingface_hub

    def offline(**kw):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    monkeypatch.setattr(tasks.hub, "offline_reason", lambda: None)
    with pytest.raises(ValueError, match=r"cannot fetch livecodebench/code_generation_lite/test4.jsonl.*"
                                         r"task.source=path"):
        lcb.load(cfg(source="hub", release="v4_v5"))


def test_an_unreachable_hub_reads_cached_files_only(monkeypatch, tmp_path):
    """With the hub unreachable every file is asked of the local cache alone; the first one missing is the error."""
    import huggingface_hub

    asked = []

    def cache_only(repo_id, filename, repo_type, revision, local_files_only):
        asked.append((filename, local_files_only))
        if filename == "test4.jsonl":
            return str(write_jsonl(tmp_path / filename, rows()[:1]))
        raise OSError("not in the cache")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cache_only)
    monkeypatch.setattr(tasks.hub, "offline_reason", lambda: "ConnectError at http://127.0.0.1:9")
    with pytest.raises(ValueError, match=r"^task\.source: hub dataset livecodebench/code_generation_lite/test5\.jsonl "
                                         r"unreachable \(ConnectError at http://127\.0\.0\.1:9\)"):
        lcb.load(cfg(source="hub", release="v4_v5"))
    assert asked == [("test4.jsonl", True), ("test5.jsonl", True)]


@pytest.mark.parametrize("field, value, message", [
    ("platform", "topcoder", "field 'platform' must be one of"),
    ("difficulty", "insane", "field 'difficulty' must be one of"),
    ("contest_date", "yesterday", "field 'contest_date' is not an ISO date"),
    ("public_test_cases", "[{\"input\": 1}]", "field 'public_test_cases' test 0 needs string"),
    ("public_test_cases", "not json", "field 'public_test_cases' is not valid JSON"),
    ("private_test_cases", "%%%garbage%%%", "field 'private_test_cases' is neither JSON nor"),
    ("metadata", "{bad", "field 'metadata' is not valid JSON"),
])
def test_bad_rows_name_file_line_and_field(tmp_path, field, value, message):
    """A row whose identity or prompt fields are unusable stops the load; one whose tests (or metadata) cannot be
    parsed stays one named item, graded data_error, and the other problems load."""
    records = rows()[:2]
    records[1][field] = value
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    conf = cfg(source="path", path=str(path), start_date=None, end_date=None)
    if field in ("platform", "difficulty", "contest_date"):
        with pytest.raises(ValueError, match=f"bad.jsonl line 2: {message}"):
            lcb.load(conf)
        return
    assert re.match(f".*bad.jsonl line 2: {message}", broken_tests(conf, records[1]["question_id"]))


def broken_tests(conf, qid: str) -> str:
    """The data error of the one problem ``qid`` of ``conf`` whose tests could not be parsed; its samples are graded
    ``data_error`` without running."""
    problems = lcb.load(conf)
    broken = [p for p in problems if p.data_error]
    assert [p.question_id for p in broken] == [qid] and broken[0].tests == ()
    row = lcb.score(broken[0], "```python\nprint(1)\n```", cfg={"sandbox": "process"})
    assert row["outcome"] == "data_error" and row["correct"] is False and broken[0].data_error in row["error"]
    return broken[0].data_error


def test_missing_field_duplicate_id_and_functional_input_checks(tmp_path):
    records = rows()[:2]
    del records[0]["starter_code"]
    with pytest.raises(ValueError, match="line 1: missing field 'starter_code'"):
        lcb.load(cfg(source="path", path=str(write_jsonl(tmp_path / "a.jsonl", records))))
    dup = [rows()[0], rows()[0]]
    with pytest.raises(ValueError, match="line 2: duplicate question_id 'ss_atcoder_001'"):
        lcb.load(cfg(source="path", path=str(write_jsonl(tmp_path / "b.jsonl", dup))))
    func = rows()[3]
    func["public_test_cases"] = json.dumps([{"input": "[1, 2", "output": "[1]", "testtype": "functional"}])
    func_path = write_jsonl(tmp_path / "c.jsonl", [func])
    assert "not one JSON value a line" in broken_tests(cfg(source="path", path=str(func_path)), func["question_id"])


class _Exploit:
    """A pickle payload that runs a shell command when unpickled by plain ``pickle.loads``."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class _EvalExploit:
    def __init__(self, source: str) -> None:
        self.source = source

    def __reduce__(self):
        return (eval, (self.source,))


@pytest.mark.parametrize("make_payload", [
    lambda marker: _Exploit(f"touch {marker}"),
    lambda marker: _EvalExploit(f"open({str(marker)!r}, 'w').write('x')"),
    lambda marker: [{"input": "1", "output": "1", "testtype": "stdin", "x": _Exploit(f"touch {marker}")}],
])
def test_poisoned_private_tests_raise_and_run_nothing(tmp_path, make_payload):
    marker = tmp_path / "PWNED"
    record = rows()[0]
    record["private_test_cases"] = compress(make_payload(marker))
    path = write_jsonl(tmp_path / "poisoned.jsonl", [record])
    error = broken_tests(cfg(source="path", path=str(path)), record["question_id"])
    assert re.match(r".*poisoned.jsonl line 1: field 'private_test_cases'.*forbidden global "
                    r"(posix\.system|builtins\.eval)", error)
    assert not marker.exists()


def test_plain_unpickler_accepts_plain_data_only():
    value = {"a": [1, 2.5, None, True, "x", b"y", (3, 4)], "b": {1, 2}}
    assert plain_unpickle(pickle.dumps(value)) == value
    assert decode_compressed(compress(json.dumps([{"input": "1", "output": "2"}]))).startswith("[{")
    with pytest.raises(ValueError, match="forbidden global"):
        plain_unpickle(pickle.dumps(pd.Timestamp("2024-01-01")))
    with pytest.raises(ValueError, match="expected a JSON string"):
        decode_compressed(compress([1, 2]))


def test_validate_checks_knobs_before_any_model():
    lcb.validate(cfg())
    for bad, message in [({"release": "v9"}, "task.release"), ({"timeout_s": 0}, "task.timeout_s"),
                         ({"sandbox": "docker"}, "task.sandbox"), ({"prompt_style": "chatml"}, "task.prompt_style"),
                         ({"pass_k": [0, 1]}, "task.pass_k"), ({"exec_workers": 0}, "task.exec_workers"),
                         ({"source": "path", "path": "/nonexistent.jsonl"}, "task.path: no such file"),
                         ({"memory_mb": 64}, "task.memory_mb"), ({"python": "/nonexistent/python"}, "task.python")]:
        with pytest.raises(ValueError, match=message):
            lcb.validate(cfg(**{**{"source": "hub", "release": "release_v5"}, **bad}))


def test_task_config_composes_with_the_documented_defaults():
    path = Path(__file__).resolve().parents[1] / "conf" / "task" / "livecodebench.yaml"
    conf = OmegaConf.merge(OmegaConf.create({"model": {"data_source": "bundled"}}),
                           {"task": OmegaConf.load(path)})
    task = conf.task
    assert task.name == "livecodebench" and source_of(task) == "bundled"
    assert (task.start_date, task.end_date, task.timeout_s, task.release) == ("2024-08-01", "2025-02-01", 6,
                                                                              "release_v5")
    assert dict(task.gen) == {"max_new_tokens": 2000, "temperature": 0.2, "top_p": 0.95, "n_samples": 10}
    assert task.tag == "livecodebench-auto-release_v5-2024-08-01_2025-02-01-limitNone-auto-t6"
    lcb.validate(task)


def test_big_integers_load_as_lcb_runner_reads_them(tmp_path):
    """A 5000-digit expected output (over Python's 4300) aborted the whole load on main; lcb_runner reads up to
    50000 digits. Past that the problem is one named data_error item, and the others still load."""
    func = rows()[3]
    assert json.loads(func["metadata"]).get("func_name")
    good, bad = dict(func, question_id="big_ok"), dict(func, question_id="big_bad")
    good["public_test_cases"] = json.dumps([{"input": "1", "output": "9" * 5000, "testtype": "functional"}])
    bad["public_test_cases"] = json.dumps([{"input": "1", "output": "9" * 50001, "testtype": "functional"}])
    conf = cfg(source="path", path=str(write_jsonl(tmp_path / "big.jsonl", [good, bad])), start_date=None,
               end_date=None)
    assert "50001 digits" in broken_tests(conf, "big_bad")
    loaded = {p.question_id: p for p in lcb.load(conf)}
    assert loaded["big_ok"].tests[0].output == "9" * 5000 and not loaded["big_ok"].data_error
