"""A compression method added by one dataclass + one registration (here: keep the first k prompt tokens) is
accepted by the Python API, runs in the core with exact cache sizes, and gets its knob into the Hydra group
``compression`` (option, run tag, sweeps across methods, unknown-key and unknown-option errors), the result rows and
summary, the report labels, the run identity and the lm-eval ``model_args`` with no other edit
(``docs/architecture.md``, "Adding a compression method")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import pytest
import torch

import snapstream_core as ss
from evals.execute.identity import run_identity
from evals.record.rows import row_columns, tidy
from snapstream_core import compression_from_config
from snapstream_core.methods import METHODS, knob_names
from snapstream_core.methods.base import CompressionMethod, PrefillView, Selection, check_positive, sink_and_tail_scores
from tests.runner_utils import TINY, compose_cfg


@dataclass(frozen=True)
class KeepFirst(CompressionMethod):
    """Keep the first ``first_k`` prompt tokens; decoded tokens are appended."""

    method: ClassVar[str] = "keep_first"
    first_k: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("first_k", self.first_k)

    def kept(self, prompt_len: int) -> int:  # the append policy (the default) does the rest of the geometry
        return min(prompt_len, self.first_k)

    def needs_selection(self, prompt_len: int) -> bool:
        return prompt_len > self.first_k

    def select(self, view: PrefillView) -> Selection:
        scores = sink_and_tail_scores(view.key_valid, self.first_k, 0)[:, None, :].expand(-1, view.keys.shape[1], -1)
        return Selection(scores, n_keep=self.first_k, n_frozen=self.first_k)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(METHODS, "keep_first", KeepFirst)  # the one registration line, undone after the test
    return KeepFirst


def test_a_registered_method_is_built_and_checked_by_the_python_api(registered):
    assert "first_k" in knob_names()
    assert compression_from_config({"method": "keep_first", "first_k": 8}) == KeepFirst(first_k=8)
    with pytest.raises(ValueError, match="compression.first_k: must be an integer >= 1"):
        compression_from_config({"method": "keep_first", "first_k": 0})
    with pytest.raises(ValueError, match=r"^compression\.first_k: snapkv does not read it \(a knob of keep_first\)"):
        compression_from_config({"method": "snapkv", "first_k": 8})  # another method refuses it in one line


def test_unregistered_knob_is_refused(monkeypatch):
    with pytest.raises(ValueError, match="compression.first_k: not a knob of any method"):
        compression_from_config({"method": "snapkv", "first_k": 8})


def test_it_runs_in_the_core_with_exact_cache_sizes(registered, tiny_model):
    ids = torch.randint(0, 1000, (1, 80), generator=torch.Generator().manual_seed(3))
    tiny_model.set_attn_implementation("sdpa")
    ss.attach(tiny_model)
    cache = ss.make_cache(tiny_model, KeepFirst(first_k=10))
    tiny_model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False, past_key_values=cache,
                        pad_token_id=0)
    # generate feeds back all but the last new token: 5 decoded entries on top of the 10 kept
    assert {lyr.tokens_held() for lyr in cache.layers} == {KeepFirst(first_k=10).footprint(80, 5)} == {15}


def test_its_knob_reaches_rows_identity_and_lm_eval(registered):
    method = KeepFirst(first_k=12)
    assert "first_k" in row_columns()
    row = {"run_id": "r", "method": "keep_first", **{k: method.knobs().get(k) for k in knob_names()},
           "item_id": "1", "sample_idx": 0}
    assert tidy([row])["first_k"].tolist() == [12]
    container = {"model": {"name": "m"}, "task": {"name": "t"}, "gen": {}, "backend": {"name": "hf"}}
    ident = [run_identity(container, KeepFirst(first_k=k).knobs(), "w", ["x"]) for k in (12, 13)]
    assert ident[0]["compression"]["first_k"] == 12 and ident[0] != ident[1]
    pytest.importorskip("lm_eval")
    from evals.lm_eval_model import check_model_args, compression_from_model_args

    check_model_args({"first_k": 12})
    assert compression_from_model_args({"method": "keep_first", "first_k": 12}) == method


def test_it_shows_up_in_the_hydra_group(registered):
    from evals.cli import options, validate

    assert "keep_first" in options("compression")
    cfg = compose_cfg([*TINY, "compression=keep_first", "compression.first_k=12"]).compression
    assert cfg.tag == "keep_first-fk12-original" and cfg.first_k == 12 and cfg.prompt_budget is None
    # the new knob is a key of every method's node: one sweep may set it for the full cache (which reads no knob) and
    # the new method; any other method refuses it, naming the job
    assert validate(["-m", *TINY, "compression=none,keep_first", "compression.first_k=12"]) == []
    assert validate(["-m", *TINY, "compression=snapstream,keep_first", "compression.first_k=12"]) == [
        "compression=snapstream: compression.first_k: snapstream does not read it (a knob of keep_first); its knobs: "
        "prompt_budget, window, kernel, pooling, gqa_agg, sinks, ratio, recent, positions, kv_dtype, kv_scale"
    ]
    assert validate([*TINY, "compression=keep_first", "compression.frist_k=3"]) == [
        "compression.frist_k: no such key (did you mean compression.first_k?) (`python -m evals.run --cfg job` "
        "prints every key and its value)"
    ]
    (line,) = validate([*TINY, "compression=keep_frist"])
    assert line.startswith("compression=keep_frist: unknown option (did you mean compression=keep_first?); available: ")
    assert line.split("available: ")[1].split(" (")[0].split(", ") == sorted(METHODS) == sorted(options("compression"))
    del METHODS["keep_first"]  # unregistered again: its node and knob leave the group at the next registration
    assert validate([*TINY, "compression=keep_first"])[0].startswith("compression=keep_first: unknown option")
    assert "first_k" not in compose_cfg([*TINY]).compression


def test_its_runs_are_named_tabled_and_labelled(registered, tmp_path):
    """In-process runs (tiny_llama, 2 needle items, 4 new tokens) of two ``first_k``: the directory carries the
    generated tag, ``samples.csv`` and ``summary.csv`` a ``first_k`` column, the report a label per ``first_k``."""
    from evals.report.render import write_report
    from evals.run import run

    base = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "gen.max_new_tokens=4",
            f"out_root={tmp_path}"]
    outs = {k: run(compose_cfg([*base, "compression=keep_first", f"compression.first_k={k}"])) for k in (12, 20)}
    assert "/keep_first-fk12-original/" in str(outs[12]) and "/keep_first-fk20-original/" in str(outs[20])
    samples = pd.read_csv(outs[12] / "samples.csv")
    assert samples["method"].tolist() == ["keep_first"] * 2 and samples["first_k"].tolist() == [12, 12]
    assert samples["kv_tokens_peak"].max() <= 12 + 4
    summary = pd.read_csv(outs[12] / "summary.csv")
    assert set(summary["first_k"]) == {12}
    path, head = write_report(tmp_path)
    assert set(head["label"]) == {"keep_first (first_k=12)", "keep_first (first_k=20)"}
    assert "keep_first (first_k=12)" in path.read_text()


def test_the_tests_that_enumerate_methods_pass_with_a_method_without_yaml(registered):
    """The registry, not a list of four names, is what the other tests enumerate; the YAML file is optional."""
    import tests.test_conf_defaults as conf_tests
    from evals.config.conf_store import has_yaml, register_methods

    assert not has_yaml("keep_first") and "keep_first" in register_methods()
    conf_tests.test_every_yaml_is_a_registered_method()
    conf_tests.test_the_composed_node_carries_every_knob_and_equals_the_generated_one("keep_first")
    conf_tests.test_generated_tags_resolve_to_todays_directory_names()
    with pytest.raises(pytest.skip.Exception):
        conf_tests.test_yaml_keys_defaults_and_tag_equal_the_generated_node("keep_first")


@dataclass(frozen=True)
class Seeded(KeepFirst):
    """A method whose knob has the name of a row column."""

    method: ClassVar[str] = "seeded"
    seed: int = 0


def test_a_knob_named_like_a_row_column_is_refused_at_registration_with_one_line(monkeypatch):
    from evals.config.conf_store import register_methods

    monkeypatch.setitem(METHODS, "seeded", Seeded)
    for register in (register_methods, row_columns):
        with pytest.raises(ValueError) as err:
            register()
        assert str(err.value) == ("compression method 'seeded': knob 'seed' has the name of a result-row column; "
                                  "rename the field of Seeded (e.g. seeded_seed)")
