"""A run whose method keeps every token of every item copies the complete full-cache run's rows instead of
generating them (evals/execute/alias.py); the copied rows equal what generation gives, and a smaller budget
generates."""

from __future__ import annotations

import json
import shutil

import pytest

import evals.execute.generate
from evals.report.render import write_report
from evals.run import run
from tests.runner_utils import TINY, compose_cfg

NEEDLE = ["task=needle", "task.context_tokens=200", "task.n_items=2"]
SAMPLED = ["gen.n_samples=2", "gen.temperature=0.8", "gen.top_p=0.95", "gen.max_new_tokens=8"]
KEEPS_ALL = ["compression=snapkv", "compression.prompt_budget=400"]  # a ~260-token prompt + 8 new tokens fit


def rows_of(path) -> dict[tuple[str, int], dict]:
    rows = [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]
    return {(r["item_id"], r["sample_idx"]): r for r in rows}


def same(rows) -> dict:
    return {k: (r["completion"], r["gen_tokens"], r["correct"], r["prompt_tokens"]) for k, r in rows.items()}


def test_a_budget_holding_everything_copies_the_full_cache_rows_without_loading_weights(tmp_path, monkeypatch):
    base = [*TINY, *NEEDLE, *SAMPLED, f"out_root={tmp_path / 'a'}"]
    full = run(compose_cfg([*base, "compression=none"]))

    def no_backend(*args, **kwargs):
        raise AssertionError("a copied run builds no backend")

    with monkeypatch.context() as m:
        m.setattr(evals.execute.generate, "make_backend", no_backend)
        copied = run(compose_cfg([*base, *KEEPS_ALL]))
    meta = json.loads((copied / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["same_as"] == str(full) and meta["n_rows"] == 4
    got, ref = rows_of(copied), rows_of(full)
    assert same(got) == same(ref) and len(got) == 4
    assert all(r["method"] == "snapkv" and r["prompt_budget"] == 400 and r["same_as"] == ref[k]["run_id"]
               and r["run_id"] != ref[k]["run_id"] and r["fingerprint"] == meta["fingerprint"]
               for k, r in got.items())
    assert (copied / "summary.csv").is_file() and (copied / "prompts.jsonl.gz").is_file()
    report, _ = write_report(tmp_path / "a")  # the report says which runs were copied, and from which
    text = report.read_text()
    assert "rows copied from the full cache" in text
    assert f"- {copied.relative_to(tmp_path / 'a').as_posix()} = {full.relative_to(tmp_path / 'a').as_posix()}" in text
    # without the full-cache run the same config generates, and gives the same tokens (sampled: same noise)
    alone = run(compose_cfg([*TINY, *NEEDLE, *SAMPLED, *KEEPS_ALL, f"out_root={tmp_path / 'b'}"]))
    assert "same_as" not in json.loads((alone / "meta.json").read_text())
    assert same(rows_of(alone)) == same(got)
    assert all("same_as" not in r for r in rows_of(alone).values())


@pytest.mark.parametrize("method", [["compression=snapkv", "compression.prompt_budget=64", "compression.window=16"],
                                    [*KEEPS_ALL, "compression.positions=in_cache"]])
def test_a_budget_that_drops_tokens_or_another_decode_path_generates(tmp_path, method):
    base = [*TINY, *NEEDLE, "gen.max_new_tokens=8", f"out_root={tmp_path}"]
    full = run(compose_cfg([*base, "compression=none"]))
    out = run(compose_cfg([*base, *method]))
    assert "same_as" not in json.loads((out / "meta.json").read_text())
    assert all("same_as" not in r for r in rows_of(out).values()) and len(rows_of(out)) == len(rows_of(full)) == 2


def test_an_incomplete_full_cache_run_is_not_copied(tmp_path, caplog):
    base = [*TINY, *NEEDLE, "gen.max_new_tokens=8", f"out_root={tmp_path}"]
    full = run(compose_cfg([*base, "compression=none"]))
    meta = json.loads((full / "meta.json").read_text())
    (full / "meta.json").write_text(json.dumps({**meta, "status": "running"}))
    with caplog.at_level("INFO", logger="evals.execute.alias"):
        out = run(compose_cfg([*base, *KEEPS_ALL]))
    assert "same_as" not in json.loads((out / "meta.json").read_text())
    assert "absent or incomplete: generating" in caplog.text
    shutil.rmtree(out)
