"""``--model snapstream`` inside lm-eval: lm-eval's own outputs with an unlimited budget, a bounded cache with a small
one, refusals before any weights load, and the real command line."""

from __future__ import annotations

import json
import sys

import pytest

import snapstream_core as ss
from tests.lm_eval_helpers import (
    BATCH,
    LIMIT,
    MC_TASK,
    TASK,
    TASKS_DIR,
    evaluate,
    hf_result,
    one_thread,
    per_doc,
)

_one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)

SMALL = dict(prompt_budget=64, window=16, recent=8)
MAX_GEN = 12  # the local task's max_gen_toks


def knobs(**kw) -> str:
    return ",".join(f"{k}={v}" for k, v in kw.items())


@pytest.fixture(scope="module")
def small_budget(tiny_llama_dir, tmp_path_factory):
    kv_path = tmp_path_factory.mktemp("kv") / "kv.jsonl"
    args = f"pretrained={tiny_llama_dir},method=snapstream,{knobs(**SMALL)},kv_stats_path={kv_path}"
    res = evaluate("snapstream", args)
    return res, [json.loads(line) for line in kv_path.read_text().splitlines()]


def test_unlimited_budget_gives_lm_evals_own_outputs_and_metrics(tiny_llama_dir):
    hf = hf_result(tiny_llama_dir)
    snap = evaluate("snapstream", f"pretrained={tiny_llama_dir},method=snapstream,prompt_budget=4096,recent=512")
    assert len(per_doc(snap)) == 2 * LIMIT  # two filters
    assert per_doc(snap) == per_doc(hf)
    assert {k: v for k, v in snap["results"][TASK].items() if "," in k} == \
           {k: v for k, v in hf["results"][TASK].items() if "," in k}  # fmt: skip
    info = snap["config"]["snapstream"]
    assert info["method"] == "snapstream" and info["generate_calls"] == LIMIT // BATCH
    # the full cache: every prompt token plus every generated token but the last (never fed back)
    assert info["kv_tokens_peak"] == info["prompt_tokens_max"] + MAX_GEN - 1


def test_small_budget_bounds_the_cache_of_every_generate_call(small_budget):
    res, calls = small_budget
    method = ss.SnapStream(**SMALL)
    assert len(calls) == LIMIT // BATCH and all(c["batch"] == BATCH for c in calls)
    for call in calls:
        assert call["prompt_tokens"] > 2 * method.prompt_budget  # the prompts are really compressed
        decoded = call["new_tokens"] - 1
        assert call["kv_tokens_peak"] == method.footprint(call["prompt_tokens"], decoded) == 64 + 8
    assert res["config"]["snapstream"]["kv_tokens_peak"] == 64 + 8
    hashes = {h for c in calls for h in c["prompt_hashes"]}
    assert {s["prompt_hash"] for s in res["samples"][TASK]} == hashes  # per-sample logs join the KV lines


def test_log_likelihood_requests_are_refused(tiny_llama_dir):
    with pytest.raises(ValueError, match="compresses the KV cache of generation only; loglikelihood"):
        evaluate("snapstream", f"pretrained={tiny_llama_dir},method=snapstream", task=MC_TASK)


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(method="snapkv", prompt_budget=8), "compression.prompt_budget: must exceed"),
        (dict(method="snapstrem"), "compression.method: unknown method 'snapstrem'"),
        (dict(method="snapstream", backend="seq2seq"), "decoder-only"),
    ],
)
def test_bad_model_args_are_refused_before_any_weights_load(kw, message):
    from evals.lm_eval_model import SnapStreamLM

    with pytest.raises(ValueError, match=message):  # a load would fail on the path instead
        SnapStreamLM(pretrained="/nonexistent/model", **kw)


@pytest.mark.slow  # 9-13 s on 2 cores: make test under 10 minutes
def test_the_lm_eval_command_line_runs_snapstream(tiny_llama_dir, small_budget, tmp_path, monkeypatch):
    """``python -m evals.lm_eval_cli run ...``: its ``main`` with that ``sys.argv``, in-process (lm-eval is already
    imported here; the module's ``__main__`` line only calls ``main``)."""
    from evals import lm_eval_cli

    model_args = f"pretrained={tiny_llama_dir},method=snapstream,{knobs(**SMALL)}"
    argv = ["run", "--model", "snapstream", "--model_args", model_args, "--tasks", TASK, "--include_path",
            str(TASKS_DIR), "--limit", str(LIMIT), "--batch_size", str(BATCH), "--device", "cpu", "--output_path",
            str(tmp_path), "--log_samples"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(sys, "argv", ["evals.lm_eval_cli", *argv])
    try:
        lm_eval_cli.main()
    except SystemExit as exc:  # lm-eval may end with sys.exit(0)
        assert exc.code in (0, None)
    (results_file,) = tmp_path.rglob("results_*.json")
    (samples_file,) = tmp_path.rglob(f"samples_{TASK}_*.jsonl")
    results = json.loads(results_file.read_text())
    assert results["config"]["snapstream"]["kv_tokens_peak"] == 64 + 8
    assert "exact_match,digits" in results["results"][TASK]
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    in_process, _ = small_budget
    assert {(s["doc_id"], s["filter"]): s["resps"] for s in samples} == \
           {k: v[0] for k, v in per_doc(in_process).items()}  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--model", "snapstream", "--model_args", "pretrained=x,method=snapkv,prompt_budget=8", "--tasks", TASK],
        ["--model=snapstream", "--model_args=pretrained=x,method=snapkv,prompt_budget=8", "--tasks", TASK],
    ],
)
def test_the_command_line_refuses_a_bad_knob_in_one_line_before_anything_else(argv, capsys):
    from evals.lm_eval_cli import precheck

    with pytest.raises(SystemExit) as exit_:
        precheck(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: compression.prompt_budget: must exceed window + sinks (32 + 0), got 8"
    ]
    precheck(["--model", "hf", "--model_args", "pretrained=x,method=snapkv,prompt_budget=8"])  # not ours: no check
