"""The sample cache: a finished sample is generated once and reused by every run that needs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evals.execute.generate as generate
from evals.execute.identity import fingerprint
from evals.execute.sample_cache import DIRNAME, cache_dir, sample_key_base
from evals.run import run as run_cfg
from tests.runner_utils import TINY, compose_cfg

NEEDLE = ["task=needle", "task.context_tokens=256", "task.n_items=6"]
SNAP = ["compression=snapstream", "compression.prompt_budget=64", "compression.recent=8", "compression.window=16"]
VARYING = {"run_id", "fingerprint", "cached_from"}


@pytest.fixture
def generated(monkeypatch):
    """The number of samples the backend produced (every finished sample passes through
    :func:`evals.execute.work.produce`, as :mod:`evals.execute.generate` calls it)."""
    count = {"n": 0}
    produce = generate.produce

    def counting(*args, **kwargs):
        for ended in produce(*args, **kwargs):
            count["n"] += len(ended)
            yield ended

    monkeypatch.setattr(generate, "produce", counting)
    monkeypatch.delenv("SNAPSTREAM_SAMPLE_CACHE", raising=False)
    return count


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def run(tmp_path, *overrides, run_dir=None):
    return run_cfg(compose_cfg([*TINY, *NEEDLE, *SNAP, f"out_root={tmp_path}", *overrides]), run_dir)


def test_a_larger_limit_generates_only_the_new_item_and_says_where_the_others_came_from(tmp_path, generated):
    first = run(tmp_path, "task.limit=2")
    assert generated["n"] == 2 and (tmp_path / DIRNAME).is_dir()
    second = run(tmp_path, "task.limit=3")
    assert second != first and generated["n"] == 3  # only the third item was generated
    old, new = rows(first), rows(second)
    assert len(new) == 3
    for a, b in zip(old, new[:2]):
        assert b["cached_from"] == a["run_id"]
        assert {k: v for k, v in a.items() if k not in VARYING} == {k: v for k, v in b.items() if k not in VARYING}
        assert b["run_id"] != a["run_id"] and b["fingerprint"] == new[2]["fingerprint"]
    assert "cached_from" not in new[2]
    meta = json.loads((second / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["cached_rows"] == 2
    # the run directory's prompts hold the reused rows' prompts too
    from evals.execute.backends.prompts import read_prompts

    assert {r["prompt_hash"] for r in new} <= set(read_prompts(second / "prompts.jsonl.gz"))


def test_another_run_directory_with_the_same_identity_reuses_without_a_backend(tmp_path, generated, monkeypatch):
    first = run(tmp_path, "task.limit=2")
    monkeypatch.setattr(generate, "make_backend", lambda *a, **k: pytest.fail("a backend was built"))
    other = run(tmp_path, "task.limit=2", run_dir=tmp_path / "elsewhere")
    assert generated["n"] == 2
    assert [r["cached_from"] for r in rows(other)] == [r["run_id"] for r in rows(first)]


def test_sample_cache_false_and_overwrite_regenerate_and_leave_the_fingerprint_alone(tmp_path, generated):
    first = run(tmp_path, "task.limit=2")
    again = run(tmp_path, "task.limit=2", "sample_cache=false", run_dir=tmp_path / "nocache")
    assert generated["n"] == 4 and not any("cached_from" in r for r in rows(again))
    assert rows(again)[0]["fingerprint"] == rows(first)[0]["fingerprint"]  # not part of the identity
    run(tmp_path, "task.limit=2", "overwrite=true")
    assert generated["n"] == 6


def test_a_method_or_seed_change_is_another_sample(tmp_path, generated):
    run(tmp_path, "task.limit=1")
    run(tmp_path, "task.limit=1", "compression.prompt_budget=96")
    run(tmp_path, "task.limit=1", "gen.seed=1")
    assert generated["n"] == 3


def test_the_cache_lives_under_out_root_unless_snapstream_cache_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("SNAPSTREAM_SAMPLE_CACHE", raising=False)
    assert cache_dir(tmp_path) == tmp_path / DIRNAME
    monkeypatch.chdir(tmp_path)
    assert cache_dir("results") == tmp_path / "results" / DIRNAME  # absolute, resolved once
    monkeypatch.setenv("SNAPSTREAM_SAMPLE_CACHE", str(tmp_path / "shared"))
    assert cache_dir("results") == tmp_path / "shared"
    monkeypatch.setenv("SNAPSTREAM_SAMPLE_CACHE", "off")
    assert cache_dir("results") is None


def test_snapstream_cache_off_generates_every_run(tmp_path, generated, monkeypatch):
    monkeypatch.setenv("SNAPSTREAM_SAMPLE_CACHE", "off")
    run(tmp_path, "task.limit=1")
    run(tmp_path, "task.limit=1", run_dir=tmp_path / "again")
    assert generated["n"] == 2 and not (tmp_path / DIRNAME).exists()


def test_the_key_ignores_what_only_selects_items_and_keeps_what_changes_a_sample():
    identity = {"model": {"name": "m", "weights": "w"}, "compression": {"method": "none"}, "backend": {"name": "hf"},
                "gen": {"temperature": 0.6, "n_samples": 4, "seed": 0, "sampler": "counter-gumbel-v1"},
                "task": {"name": "needle", "limit": 2, "data_sha256": "a", "items_read": 2}, "harness": None}
    base = sample_key_base(identity, "g1")
    wider = {**identity, "task": {**identity["task"], "limit": 3, "data_sha256": "b", "items_read": 3},
             "gen": {**identity["gen"], "n_samples": 8}}
    assert sample_key_base(wider, "g1") == base
    for part, change in [("gen", {"seed": 1}), ("compression", {"prompt_budget": 64}), ("model", {"weights": "v"})]:
        other = {**identity, part: {**identity[part], **change}}
        assert fingerprint(sample_key_base(other, "g1")) != fingerprint(base)
    assert fingerprint(sample_key_base(identity, "g2")) != fingerprint(base)  # other generating code
    per_item = {**identity, "gen": {**identity["gen"], "sampler": "torch-rng-per-item-v1"}}  # i depends on n there
    assert sample_key_base(per_item, "g1")["gen"]["n_samples"] == 4


def test_the_key_holds_the_resolved_sandbox_mode_never_auto():
    identity = {"model": {"name": "m"}, "compression": {}, "backend": {}, "gen": {}, "harness": None,
                "task": {"name": "livecodebench", "sandbox": "auto", "python": None}}
    setup = {"sandbox": "bwrap", "python": "/usr/bin/python3", "interpreter": ["/usr/bin/python3.11", 1, 2]}
    task = sample_key_base(identity, "g", setup)["task"]
    assert task["sandbox"] == "bwrap" and task["python"] == "/usr/bin/python3" and "interpreter" not in task
    process = sample_key_base(identity, "g", {**setup, "sandbox": "process"})
    assert fingerprint(process) != fingerprint(sample_key_base(identity, "g", setup))
