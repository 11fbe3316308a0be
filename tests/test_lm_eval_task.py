"""``task=lm_eval`` in the runner: lm-eval's own contexts, filters, metrics and aggregation; its stop strings; a
``-m`` sweep that the report aggregates; refusals before any model loads."""

from __future__ import annotations

import json
import math
import statistics

import pandas as pd
import pytest

import tasks.lm_eval as lm_task
from evals.cli import precheck
from evals.execute.backends.hf import HFBackend
from evals.run import run
from tests.lm_eval_helpers import (
    LIMIT,
    RUNNER_ARGS,
    TASK,
    hf_outputs,
    one_thread,
    task_manager,
)
from tests.runner_utils import compose_cfg

_one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)
SMALL = ["compression.prompt_budget=64", "compression.window=16", "compression.recent=8"]


def lm_eval_instances(num_fewshot: int, chat_template=None):
    """What lm-eval itself sends the model for the first LIMIT documents (``build_all_requests``)."""
    task = task_manager().load([TASK])["tasks"][TASK]
    task.set_config(key="num_fewshot", value=num_fewshot)
    task.set_fewshot_seed(seed=1234)
    chat = chat_template is not None
    task.build_all_requests(
        limit=LIMIT, apply_chat_template=chat, fewshot_as_multiturn=chat, chat_template=chat_template
    )
    return task.instances


def items_for(*overrides: str):
    cfg = compose_cfg([*RUNNER_ARGS, *overrides]).task
    return cfg, lm_task.load(cfg)


@pytest.mark.parametrize("num_fewshot", [0, 1])
def test_documents_and_contexts_are_lm_evals_own(num_fewshot):
    cfg, items = items_for(f"task.num_fewshot={num_fewshot}")
    instances = lm_eval_instances(num_fewshot)
    assert [it.item_id for it in items] == [str(inst.doc_id) for inst in instances] == ["0", "1", "2", "3"]
    prompts = [lm_task.prompt(it, None, cfg=cfg) for it in items]
    assert [p.messages for p in prompts] == [inst.args[0] for inst in instances]
    assert all(p.messages.endswith("What is the pass key? The pass key is") for p in prompts)
    if num_fewshot:  # an example with its answer precedes the question, as lm-eval samples it
        assert all(p.messages.count("What is the pass key?") == 2 for p in prompts)
    assert {p.stop for p in prompts} == {tuple(instances[0].args[1]["until"])} == {("\n", "Question:")}
    assert all(dict(p.gen) == {"max_new_tokens": 12, "temperature": 0.0} for p in prompts)
    assert [it.target for it in items] == [inst.doc["answer"] for inst in instances]


def test_chat_contexts_tokenize_as_lm_evals_hf_model_does():
    from transformers import AutoTokenizer

    from evals.config.models import embedded_dir

    tok = AutoTokenizer.from_pretrained(str(embedded_dir()))

    def hflm_chat_template(history, add_generation_prompt=True):  # HFLM.apply_chat_template, in short
        return tok.apply_chat_template(history, tokenize=False, add_generation_prompt=add_generation_prompt,
                                       continue_final_message=not add_generation_prompt)  # fmt: skip

    cfg, items = items_for("task.num_fewshot=1", "task.apply_chat_template=true")
    backend = HFBackend.__new__(HFBackend)  # only its prompt encoding, no model
    backend.tokenizer, backend.model_cfg = tok, compose_cfg(RUNNER_ARGS).model
    ours = [backend.encode(lm_task.prompt(it, backend.model_cfg, cfg=cfg)) for it in items]
    instances = lm_eval_instances(1, hflm_chat_template)
    theirs = [tok(inst.args[0], add_special_tokens=False)["input_ids"] for inst in instances]
    assert ours == theirs
    prompt = lm_task.prompt(items[0], None, cfg=cfg)
    assert prompt.prefill == "The pass key is" and [m["role"] for m in prompt.messages] == ["user", "assistant", "user"]


def test_filters_metrics_and_aggregation_are_the_tasks_own():
    cfg, items = items_for()
    keys = [it.target for it in items]
    completions = [f" {keys[0]}. Remember it.", keys[1], " I could not find it", f" {int(keys[3]) + 1}"]
    rows = lm_task.score_many(list(zip(items, completions)), cfg=cfg)
    assert [r["prediction"] for r in rows] == [keys[0], keys[1], "[invalid]", str(int(keys[3]) + 1)]
    assert [r["answer"] for r in rows] == keys
    assert [r["correct"] for r in rows] == [r["exact_match,digits"] for r in rows] == [1.0, 1.0, 0.0, 0.0]
    assert [r["exact_match,raw"] for r in rows] == [0.0, 1.0, 0.0, 0.0]  # exact match of the raw text
    assert json.loads(rows[0]["gen_kwargs"]) == {"max_new_tokens": 12, "temperature": 0.0, "stop": ["\n", "Question:"]}
    summary = lm_task.summarize(pd.DataFrame(rows), cfg=cfg)
    assert summary["metric"].tolist() == ["exact_match,digits", "exact_match_stderr,digits", "exact_match,raw",
                                          "exact_match_stderr,raw"]  # fmt: skip
    values = dict(zip(summary["metric"], summary["value"]))
    assert values["exact_match,digits"] == 0.5 and values["exact_match,raw"] == 0.25
    assert math.isclose(values["exact_match_stderr,digits"], statistics.stdev([1, 1, 0, 0]) / 2)
    assert set(summary["n"]) == {4} and set(summary["group"]) == {"all"}
    raw_cfg, _ = items_for("task.metric='exact_match,raw'")
    raw_rows = lm_task.score_many(list(zip(items, completions)), cfg=raw_cfg)
    assert [r["correct"] for r in raw_rows] == [0.0, 1.0, 0.0, 0.0]
    assert lm_task.summarize(pd.DataFrame(raw_rows), cfg=raw_cfg)["metric"].iloc[0] == "exact_match,raw"


def test_stop_strings_end_generation_and_cut_the_text_as_lm_eval_does(tiny_llama_dir, tmp_path):
    free = hf_outputs(tiny_llama_dir)
    words = [w for w in free[0].split()[1:] if w.isalpha()]
    stop = words[len(words) // 2]  # a word the model really writes, mid-completion
    cut = hf_outputs(tiny_llama_dir, until=(stop,))
    assert all(stop not in text for text in cut.values()) and cut[0] == free[0][: free[0].index(stop)]
    out = run(compose_cfg([*RUNNER_ARGS, "compression=none", f"task.gen_kwargs={{until:['{stop}']}}",
                           "gen.batch_size=2", f"out_root={tmp_path}"]))  # fmt: skip
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert {int(r["item_id"]): r["completion"] for r in rows} == cut
    for r in rows:
        if stop in free[int(r["item_id"])]:
            assert r["finish_reason"] == "stop" and r["gen_tokens"] < 12  # stopped early, not just cut
        else:
            assert r["finish_reason"] == "length" and r["gen_tokens"] == 12


def test_a_sweep_writes_rows_and_summaries_that_the_report_aggregates(tiny_llama_dir, tmp_path):
    from evals.report import main as report_main

    for method in ("none", "snapstream"):  # the jobs of `-m compression=none,snapstream`, one process as Hydra's
        run(compose_cfg([*RUNNER_ARGS, f"compression={method}", *SMALL, "gen.batch_size=2", f"out_root={tmp_path}"]))
    summaries = {p.parent.parent.parent.name.split("-")[0]: pd.read_csv(p) for p in tmp_path.rglob("summary.csv")}
    assert set(summaries) == {"none", "snapstream"}
    for summary in summaries.values():
        assert summary["metric"].iloc[0] == "exact_match,digits" and summary["n"].iloc[0] == LIMIT
        assert set(summary["task"]) == {TASK}
    samples = {m: pd.read_csv(next(tmp_path.rglob(f"{m}*/*/fp-*/samples.csv"))) for m in summaries}
    for rows in samples.values():
        assert len(rows) == LIMIT and {"exact_match,digits", "exact_match,raw", "gen_kwargs"} <= set(rows.columns)
    assert (samples["snapstream"]["kv_tokens_peak"] == 64 + 8).all()
    assert (samples["none"]["kv_tokens_peak"] > samples["none"]["prompt_tokens"]).all()
    full = [json.loads(line) for line in next(tmp_path.rglob("none/*/fp-*/samples.jsonl")).read_text().splitlines()]
    assert {int(r["item_id"]): r["completion"] for r in full} == hf_outputs(tiny_llama_dir)  # lm-eval's own outputs
    assert report_main([str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert TASK in report and "exact_match,digits" in report
    aggregated = pd.read_csv(tmp_path / "summary_all.csv")
    assert set(aggregated["method"]) == {"none", "snapstream"}
    assert (tmp_path / "plots" / f"frontier__{TASK}__tiny_llama.png").is_file()


@pytest.mark.parametrize(
    "args,message",
    [
        (["task.name=snapstream_passkey_mc"], "is a log-likelihood task (output_type=multiple_choice)"),
        (["task.name=snapstream_paskey"], "unknown lm-eval task 'snapstream_paskey' (task.include_defaults=false"),
        (["task.name=snapstream_passkey_group"],
         "is an lm-eval group of 2 tasks; sweep its tasks instead: -m task=lm_eval task.name=snapstream_passkey,"),
        (["task.name=null"], "task.name: required with task=lm_eval"),
        (["task.include_path=/nonexistent/tasks"], "task.include_path: no such directory"),
        (["task.gen_kwargs={num_beams:2}"], "generation kwargs ['num_beams'] that task=lm_eval cannot honour"),
        (["gen.batch_size=0"], "gen.batch_size: must be >= 1 (an integer"),
        (["gen.batch_size=auto"], "gen.batch_size: must be >= 1 (an integer"),
        (["task.metric='f1,digits'"], "task.metric: 'f1,digits' is not one of this task's results"),
    ],
)
def test_bad_combinations_are_refused_before_any_model_loads(args, message, tmp_path, monkeypatch):
    def no_model(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("evals.execute.backends.hf.load_model", no_model)
    with pytest.raises(ValueError) as err:
        run(compose_cfg([*RUNNER_ARGS, *args, f"out_root={tmp_path}"]))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_log_likelihood_task_exits_2_with_one_line(tmp_path, capsys):
    """``evals.run``'s precheck, in-process (``tests/test_runner.py`` runs the whole command once)."""
    with pytest.raises(SystemExit) as exit_:
        precheck([*RUNNER_ARGS, "task.name=snapstream_passkey_mc", f"out_root={tmp_path}"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: task.name: lm-eval task 'snapstream_passkey_mc' is a log-likelihood task (output_type=multiple_choice);"
        " KV compression acts on generation, so task=lm_eval runs generate_until tasks only"
    ]
    assert not list(tmp_path.rglob("samples.jsonl"))
