"""Published references beside full-cache runs (evals/report/references.py + references.yaml)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from evals.report.references import load_references, published_stderr, reference_rows, reference_table


def summary(rows):
    base = {"method": "none", "stderr": 2.0, "unit": "%", "run": "r"}  # "%": the unit evals.analysis.summary writes
    return pd.DataFrame([{**base, **r} for r in rows])


NO_COT = {"r": {"task": {"name": "longbench_v2", "cot": False}}}


def test_every_reference_has_a_source_and_the_issue_figures():
    refs = load_references()
    assert refs["source"].str.len().min() > 10
    got = {(r.model, r.task, r.metric, r.group, r.value) for r in refs.itertuples()}
    for fig in [("llama31_8b_instruct", "longbench_v2", "accuracy", "all", 30.0),
                ("llama31_8b_instruct", "longbench_v2", "accuracy", "difficulty=easy", 30.7),
                ("llama31_8b_instruct", "longbench_v2", "accuracy", "length=long", 25.9),
                ("r1_distill_llama_8b", "aime24", "pass@1", "all", 50.4),
                ("r1_distill_llama_8b", "aime24", "cons@64", "all", 80.0),
                ("r1_distill_llama_8b", "aime24", "pass@1", "all", 43.9),
                ("r1_distill_llama_8b", "livecodebench", "pass@1", "all", 39.6),
                ("r1_distill_llama_8b", "livecodebench", "pass@1", "all", 37.4)]:
        assert fig in got, fig


def test_published_stderr_is_the_binomial_bound():
    assert published_stderr(50.0, 30) == pytest.approx(100 * math.sqrt(0.25 / 30))  # ~9.1 points: AIME's ±9
    assert published_stderr(0.0, 30) == 0.0


def test_rows_match_none_runs_only_and_flag_outside_values():
    s = summary([
        {"model": "r1_distill_llama_8b", "task": "aime24", "metric": "pass@1", "group": "all", "value": 48.0, "n": 30},
        {"model": "r1_distill_llama_8b", "task": "aime24", "metric": "pass@1", "group": "all", "value": 10.0, "n": 30,
         "method": "snapstream"},  # a compressed run: never compared
        {"model": "llama31_8b_instruct", "task": "longbench_v2", "metric": "accuracy", "group": "all", "value": 45.0,
         "n": 503},
        {"model": "llama31_8b_instruct", "task": "longbench_v2", "metric": "accuracy", "group": "length=long",
         "value": 25.0, "n": 20},
        {"model": "tiny_llama", "task": "aime24", "metric": "pass@1", "group": "all", "value": 0.0, "n": 3},
    ])
    rows = reference_rows(s, identities=NO_COT)
    aime = rows[rows.task == "aime24"]
    assert set(aime["reference"]) == {50.4, 43.9} and set(aime["method"]) == {"none"}  # the none run only
    assert not aime["outside"].any()  # within ±9-point noise
    assert aime[aime.reference == 50.4]["delta"].tolist() == pytest.approx([48.0 - 50.4] * 2)  # card, TriAttention
    lb = rows[(rows.task == "longbench_v2") & (rows.group == "all") & rows.comparable].iloc[0]
    assert lb["outside"]  # 45 vs 30.0 ± 2.0 (n=503) with our ± 2.0: z ≈ 5.3
    assert lb["ref_ci_lo"] < 30.0 < lb["ref_ci_hi"]
    long = rows[rows.group == "length=long"].iloc[0]
    assert long["subset"] and not long["outside"]
    assert "tiny_llama" not in set(rows.model)
    table = reference_table(s, NO_COT)
    assert table["check"].str.contains("OUTSIDE").sum() == 1 and table["source"].str.len().min() > 0


def test_nothing_to_compare_gives_an_empty_frame():
    assert reference_rows(pd.DataFrame()).empty
    assert reference_rows(summary([{"model": "smollm2_135m", "task": "aime24", "metric": "pass@1", "group": "all",
                                    "value": 1.0, "n": 30}])).empty


def test_a_malformed_reference_file_is_refused(tmp_path):
    bad = tmp_path / "refs.yaml"
    bad.write_text("references:\n  - {model: m, task: t, metric: x, group: all, value: 130, n_items: 3, "
                   "samples: 1, source: s}\n")
    with pytest.raises(ValueError, match="entry 0"):
        load_references(bad)


def test_report_sections_show_the_references(tmp_path):
    """A full-cache run of a paper model: the report's first table is the references table."""
    from evals.report.render import _sections

    run = tmp_path / "run1"
    run.mkdir()
    pd.DataFrame([{"model": "llama31_8b_instruct", "task": "longbench_v2", "method": "none",
                   "prompt_budget": float("nan"), "recent": float("nan"), "metric": "accuracy", "group": "all",
                   "value": 31.0, "n": 503, "stderr": 2.0, "ci_lo": 27.0, "ci_hi": 35.0, "unit": "%",
                   "run_id": "x", "fingerprint": "f"}]).to_csv(run / "summary.csv", index=False)
    (run / "meta.json").write_text(json.dumps({"identity": {"task": {"name": "longbench_v2", "cot": False}}}))
    _summary, _head, tables, *_ = _sections(tmp_path)
    title, table = tables[0]
    assert title.startswith("Published references")
    row = table[table["published"].str.startswith("30.0 [")].iloc[0]
    assert "LongBench-v2 leaderboard" in row["source"] and row["check"] == "within"
    cot = table[table["published"].str.startswith("30.4")].iloc[0]  # the CoT figure: listed, never compared
    assert cot["check"].startswith("NOT COMPARABLE: task.cot: ours false, published true") and cot["Δ"] == "—"


@pytest.mark.parametrize("unit", ["%", "percent", ""])
def test_every_unit_a_rate_is_written_in_matches(unit):
    s = summary([{"model": "r1_distill_llama_8b", "task": "aime24", "metric": "pass@1", "group": "all",
                  "value": 50.0, "n": 30, "unit": unit}])
    assert 50.4 in set(reference_rows(s)["reference"])
    s["unit"] = "tokens"
    assert reference_rows(s).empty


def test_a_cot_run_is_never_compared_with_a_no_cot_reference():
    s = summary([{"model": "llama31_8b_instruct", "task": "longbench_v2", "metric": "accuracy", "group": "all",
                  "value": 30.0, "n": 503}])
    for cot, comparable_with in ((True, 30.4), (False, 30.0)):
        rows = reference_rows(s, identities={"r": {"task": {"name": "longbench_v2", "cot": cot}}})
        ok = rows[rows.comparable]
        assert ok["reference"].tolist() == [comparable_with]
        other = rows[~rows.comparable]
        assert len(other) == 1 and other["delta"].isna().all() and other["z"].isna().all()
        assert f"task.cot: ours {str(cot).lower()}" in other["not_comparable"].iloc[0]
    unknown = reference_rows(s)  # no meta.json: the protocol is unknown, so nothing is compared
    assert len(unknown) == 2 and not unknown["comparable"].any()
    assert unknown["not_comparable"].str.startswith("protocol unknown").all()


def _refs(**entry) -> pd.DataFrame:
    """A one-entry reference file's frame (load_references on a temporary yaml)."""
    return pd.DataFrame([{"model": "r1_distill_llama_8b", "task": "aime24", "metric": "pass@1", "group": "all",
                          "value": 5.0, "n_items": 30, "samples": 64, "source": "a paper", "protocol": {},
                          "setup": {}, "budget": math.nan, "cap": "none", **entry}])


AIME_RUN = {"r": {"model": {"family": "r1"}, "gen": {"n_samples": 4, "temperature": 0.6, "max_new_tokens": 32768},
                  "task": {"templates": {"r1": "{problem}\nPlease reason step by step, and put your final answer "
                                               "within \\boxed{}."}},
                  "compression": {"method": "snapkv", "prompt_budget": 512, "window": 32}}}
AIME_SNAPKV = {"model": "r1_distill_llama_8b", "task": "aime24", "metric": "pass@1", "group": "all", "value": 7.5,
               "n": 30, "method": "snapkv"}


def test_a_whole_cache_reference_is_not_comparable_with_a_prompt_budget():
    """A SnapKV figure at 512 entries for the whole cache while decoding (TriAttention's) beside our snapkv at 512,
    which caps the prompt: not comparable with that reason, no Δ, never OUTSIDE, the cap shown beside each budget."""
    whole = _refs(method="snapkv", budget=512.0, cap="cache")
    rows = reference_rows(summary([{**AIME_SNAPKV, "value": 30.0, "prompt_budget": 512}]), whole, AIME_RUN)
    assert rows["reference"].tolist() == [5.0] and not rows["comparable"].any()
    why = rows["not_comparable"].iloc[0]
    assert "caps the prompt here, the whole cache while decoding in the published figure" in why
    assert math.isnan(rows["delta"].iloc[0]) and not rows["outside"].any()
    assert rows[["cap", "ref_cap"]].iloc[0].tolist() == ["prompt", "cache"]
    table = reference_table(summary([{**AIME_SNAPKV, "value": 30.0, "prompt_budget": 512}]), AIME_RUN, whole)
    assert table["method"].tolist() == ["snapkv @ 512 (prompt)"]
    assert table["check"].iloc[0].startswith("NOT COMPARABLE: budget caps the prompt here")
    assert "512 (cache)" in table["published"].iloc[0]
    shipped = load_references()  # no shipped entry at a whole-cache budget is ever compared with prompt-only snapkv
    for ref in shipped[shipped["cap"] == "cache"].itertuples():
        ours = reference_rows(summary([{**AIME_SNAPKV, "model": ref.model, "task": ref.task, "metric": ref.metric,
                                        "group": ref.group, "prompt_budget": ref.budget}]), identities=AIME_RUN)
        assert not ours["comparable"].any()


def test_a_reference_compares_only_at_the_same_method_budget_and_cap():
    same = _refs(method="snapkv", budget=512.0, cap="prompt")
    rows = reference_rows(summary([{**AIME_SNAPKV, "prompt_budget": 512}]), same, AIME_RUN)
    assert rows["comparable"].all() and rows["delta"].tolist() == pytest.approx([2.5])
    other = reference_rows(summary([{**AIME_SNAPKV, "prompt_budget": 1024}]), same, AIME_RUN)
    assert not other["comparable"].any() and other["not_comparable"].iloc[0] == "budget: ours 1024, published 512"
    streaming = reference_rows(summary([{**AIME_SNAPKV, "method": "streaming_llm", "prompt_budget": 512}]),
                               _refs(method="streaming_llm", budget=512.0, cap="cache"), AIME_RUN)
    assert streaming["comparable"].all()  # streaming_llm's budget caps the whole cache, as the reference's
    assert reference_rows(summary([{**AIME_SNAPKV, "prompt_budget": 512}]), _refs(method="rkv", budget=512.0,
                                                                                    cap="cache"), AIME_RUN).empty


def test_published_intervals_are_wilson_inside_0_to_100():
    """5.0 on 30 problems: the Wilson interval [1.2, 19.1], not 5.0 ± 7.8 below zero."""
    rows = reference_rows(summary([{**AIME_SNAPKV, "method": "none", "value": 45.0}]), _refs(method="none"))
    lo, hi = rows[["ref_ci_lo", "ref_ci_hi"]].iloc[0]
    assert 0.0 < lo < 5.0 < hi <= 100.0 and lo == pytest.approx(1.16, abs=0.01) and hi == pytest.approx(19.05, abs=0.01)
    full = reference_rows(summary([{**AIME_SNAPKV, "method": "none", "value": 45.0}]), _refs(method="none",
                                                                                              value=100.0))
    assert full["ref_ci_hi"].iloc[0] == pytest.approx(100.0) and full["ref_ci_lo"].iloc[0] < 100.0


def test_a_compressed_reference_must_state_its_budget_and_cap(tmp_path):
    path = tmp_path / "refs.yaml"
    path.write_text("references:\n  - {model: m, task: t, metric: pass@1, group: all, value: 5.0, n_items: 30,\n"
                    "     samples: 1, source: s, method: snapkv, budget: 512}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="entry 0: a compressed entry needs budget .* and cap"):
        load_references(path)
    path.write_text(path.read_text().replace("budget: 512}", "prompt_budget: 512, cap: cache}"))
    assert load_references(path)[["budget", "cap"]].iloc[0].tolist() == [512.0, "cache"]
    refs = load_references()
    compressed = refs[refs["method"] != "none"]
    assert compressed["cap"].isin(["prompt", "cache"]).all() and compressed["budget"].notna().all()


def test_compressed_references_carry_a_setup_diff():
    rows = reference_rows(summary([{**AIME_SNAPKV, "prompt_budget": 512}]), _refs(
        method="snapkv", budget=512.0, cap="prompt", setup={"samples": 64, "max_new_tokens": 32768,
                                                            "temperature": None}), AIME_RUN)
    diff = rows["setup_diff"].iloc[0]
    assert "samples 4 (64)" in diff and "max_new_tokens =" in diff and "temperature 0.6 (not stated)" in diff
    card = reference_rows(summary([{**AIME_SNAPKV, "method": "none", "value": 45.0}]), identities={
        "r": {**AIME_RUN["r"], "compression": {"method": "none"}}})
    row = card[card.source.str.startswith("DeepSeek-R1 model card") & (card.reference == 50.4)].iloc[0]
    assert "template =" in row["setup_diff"] and "temperature =" in row["setup_diff"]
    table = reference_table(summary([{**AIME_SNAPKV, "prompt_budget": 512, "ci_lo": 2.0, "ci_hi": 20.0}]), AIME_RUN,
                            _refs(method="snapkv", budget=512.0, cap="prompt"))
    assert table["ours"].iloc[0] == "7.5 ± 2.0 [2.0, 20.0]"


def test_a_bounded_lm_eval_metric_keeps_its_interval_in_range():
    """lm-eval's median-aggregated 0/1 metric: value 0 with a stderr of 0.487 gets [0, 0.955], not [-0.955, 0.955];
    a metric without known bounds keeps the plain normal interval."""
    from evals.analysis.summary import fold_own_stderr

    point = pd.DataFrame({"metric": ["exact_match,none", "exact_match_stderr,none", "perplexity,none",
                                     "perplexity_stderr,none"], "group": ["all"] * 4, "value": [0.0, 0.487, 3.0, 4.0]})
    out = fold_own_stderr(point).set_index("metric")
    assert out.loc["exact_match,none", ["ci_lo", "ci_hi"]].tolist() == pytest.approx([0.0, 0.487 * 1.959963984540054])
    assert out.loc["perplexity,none", "ci_lo"] == pytest.approx(3.0 - 4.0 * 1.959963984540054)


def test_compressed_references_match_on_method_and_budget_with_a_setup_diff():
    """TriAttention's SnapKV @ 512 is decode-time SnapKV over the whole cache: snapkv_decode gets it, the prompt-only
    snapkv at the same number never does."""
    ident = {"r": {"model": {"family": "r1"}, "gen": {"n_samples": 4, "temperature": 0.6, "max_new_tokens": 32768},
                   "task": {"templates": {"r1": "{problem}\nPlease reason step by step, and put your final answer "
                                                "within \\boxed{}."}},
                   "compression": {"method": "snapkv_decode", "budget": 512, "window": 8}}}
    base = {"model": "r1_distill_llama_8b", "task": "aime24", "metric": "pass@1", "group": "all", "value": 7.5,
            "n": 30, "method": "snapkv_decode"}
    rows = reference_rows(summary([{**base, "prompt_budget": 512}]), identities=ident)
    assert rows["reference"].tolist() == [5.0] and rows["comparable"].all()  # SnapKV @ 512; not R-KV, not full
    diff = rows["setup_diff"].iloc[0]
    assert "samples 4 (8)" in diff and "max_new_tokens =" in diff and "temperature =" in diff
    assert "512 KV entries for the whole cache" in diff
    other = reference_rows(summary([{**base, "prompt_budget": 1024}]), identities=ident)  # another budget
    assert not other["comparable"].any() and other["not_comparable"].iloc[0] == "budget: ours 1024, published 512"
    prompt_only = {"r": {**ident["r"], "compression": {"method": "snapkv", "prompt_budget": 512}}}
    assert reference_rows(summary([{**base, "method": "snapkv", "prompt_budget": 512}]), identities=prompt_only).empty
    card = reference_rows(summary([{**base, "method": "none", "value": 45.0}]), identities={
        "r": {**ident["r"], "compression": {"method": "none"}}})
    row = card[card.source.str.startswith("DeepSeek-R1 model card") & (card.reference == 50.4)].iloc[0]
    assert "template =" in row["setup_diff"] and "temperature =" in row["setup_diff"]
    table = reference_table(summary([{**base, "prompt_budget": 512, "ci_lo": 2.0, "ci_hi": 20.0}]), ident)
    assert table["method"].tolist() == ["snapkv_decode @ 512 (cache)"]
    assert table["ours"].iloc[0] == "7.5 ± 2.0 [2.0, 20.0]"
