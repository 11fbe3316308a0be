"""The search pairs a quantized storage with the right run: ``search.reference=full_cache`` tests every budget
against the full cache in the model's dtype (never the full cache in FP8, whether the command line or an experiment
stores it so); ``search.reference=storage`` tests each budget of an FP8 run against the same run in bf16 (same method,
budget, graders and everything else) and certifies "fp8 is non-inferior to bf16 at delta" or says it cannot."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from evals.analysis.sequential import run_sequence
from evals.config.conf_store import CONF, register_methods
from evals.report.search_measure import headline_of, measure
from evals.search.__main__ import main
from evals.search.output import storage_line
from evals.search.runs import full_cache_overrides, in_model_dtype

FP8 = ["compression.kv_dtype=fp8_e4m3", "compression.kv_scale=one"]


def _composed(overrides):
    register_methods()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return OmegaConf.to_container(compose(config_name="config", overrides=overrides), resolve=True)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("job", [
    ["model=tiny_llama", "task=needle", "compression=rkv", "compression.budget=256", *FP8],
    ["+experiment=kv_quant", "compression=rkv", "kv_quant.arm=b"],  # the experiment stores it in FP8
    ["+experiment=kv_quant", "compression=none", "kv_quant.arm=c"],
])
def test_each_reference_differs_from_its_job_only_where_it_must(job):
    run = _composed(job)
    assert run["compression"]["kv_dtype"] == "fp8_e4m3"
    full = _composed(full_cache_overrides(job))
    assert full["compression"]["method"] == "none" and full["compression"]["kv_dtype"] == "auto"
    assert full["compression"]["tag"] == "none" and full["compression"]["kv_scale"] is None
    same = _composed(in_model_dtype(job))  # the storage's pair: everything equal but the storage and its tag
    assert same["compression"]["kv_dtype"] == "auto" and same["compression"]["kv_scale"] is None
    assert run["compression"]["tag"].startswith(same["compression"]["tag"] + "-kvfp8_e4m3-ks")
    for node in (run, same):
        node["compression"] = {k: v for k, v in node["compression"].items() if k not in ("kv_dtype", "kv_scale", "tag")}
        node.pop("run_dir")
        node["hydra"] = None
    assert run == same


def _run_dir(path, correct: np.ndarray) -> None:
    """A finished needle run: ``correct`` (items, samples) 0/1, its summary's accuracy their mean."""
    path.mkdir(parents=True)
    n, k = correct.shape
    pd.DataFrame({"item_id": np.repeat([f"i{j}" for j in range(n)], k), "sample_idx": np.tile(np.arange(k), n),
                  "correct": correct.reshape(-1).astype(bool), "prompt_tokens": 100}).to_csv(path / "samples.csv",
                                                                                              index=False)
    pd.DataFrame([{"model": "m", "task": "needle", "method": "rkv", "metric": "accuracy", "group": "all",
                   "value": 100.0 * correct.mean(), "unit": "%", "n": n, "ci_lo": 0.0, "ci_hi": 100.0}]).to_csv(
        path / "summary.csv", index=False)


def test_fp8_equal_to_bf16_is_certified_and_a_loss_is_not(tmp_path):
    """Synthetic rows, 60 items x 8 samples: an FP8 arm equal to its bf16 arm is shown non-inferior at 5 points; one
    that loses a quarter of its answers is not (shown to lose), on the same pairing the search makes."""
    rng = np.random.default_rng(0)
    bf16 = (rng.random((60, 8)) < 0.6).astype(int)
    worse = bf16.copy()
    worse[rng.random(bf16.shape) < 0.25] = 0
    for name, rows in (("bf16", bf16), ("fp8_same", bf16), ("fp8_worse", worse)):
        _run_dir(tmp_path / name, rows)
    ref = headline_of(tmp_path / "bf16", "needle")
    lines = []
    for name, verdict, start in (("fp8_same", "safe", "fp8_e4m3/one is non-inferior to the model's dtype: loss ≤ 5"),
                                 ("fp8_worse", "shown_to_lose", "fp8_e4m3/one is not shown non-inferior")):
        run = headline_of(tmp_path / name, "needle")
        steps = run_sequence([0], lambda b, run=run: measure(b, run, ref, 1.0, 5.0, 0.05), 0.05, lines.append)
        assert steps[0].verdict == verdict
        line = storage_line(steps, "fp8_e4m3/one", 5.0, 0.05, "%")
        assert line.startswith(start), line
    assert "shown to lose more than 5 points" in line


def test_the_full_cache_in_fp8_is_searched_against_bf16_end_to_end(tmp_path, capsys):
    """tiny_llama (fp32) on needle: one test of the full cache in FP8 against the full cache; the answer names the
    storage and search.csv says what it was compared with."""
    args = ["model=tiny_llama", "task=needle", "task.context_tokens=128", "task.n_items=6", "gen.max_new_tokens=2",
            "compression=none", *FP8, f"out_root={tmp_path}", "search.max_loss=40", "search.reference=storage"]
    assert main(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("fp8_e4m3/one is ") and "non-inferior to the model's dtype" in last
    table = pd.read_csv(tmp_path / "search.csv")
    assert list(table["budget"]) == [0] and set(table["against"]) == {"storage"}
    assert "kvfp8_e4m3-ksone" in table["run_dir"].iloc[0]


@pytest.mark.parametrize(("args", "message"), [
    (["compression=rkv", "search.reference=storage"], "search.reference: storage compares a run stored quantized"),
    (["compression=none", "search.reference=storage", *FP8, "search.budgets=[64]"],
     "search.budgets: the full cache has no budget"),
    (["compression=rkv", "search.reference=bf16"], "search.reference: full_cache or storage"),
])
def test_storage_searches_it_cannot_pair_are_one_line(args, message, tmp_path, capsys):
    assert main(["model=tiny_llama", "task=needle", f"out_root={tmp_path}", "search.max_loss=5", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message}"), err
