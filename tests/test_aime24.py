"""task=aime24: config, loading (bundled / local files / hub code path), prompts, and replayed completions
run through the task functions exactly as the runner's replay backend calls them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import tasks.aime24 as aime
from tasks.base import Prompt, split_thinking
from tasks.registry import get_task
from tasks.source import source_of

ROOT = Path(__file__).resolve().parents[1]
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def task_cfg(**overrides):
    """The task node as Hydra composes it for an embedded model (source=bundled), with overrides."""
    node = OmegaConf.load(ROOT / "conf/task/aime24.yaml")
    root = OmegaConf.create({"model": {"data_source": "bundled"}, "task": node})
    for key, value in overrides.items():
        OmegaConf.update(root, f"task.{key}", value, force_add=True)
    return root.task


def model_cfg(name: str):
    return OmegaConf.load(ROOT / f"conf/model/{name}.yaml")


@pytest.fixture(scope="module")
def items():
    return aime.load(task_cfg())


# -- config ----------------------------------------------------------------------------------------------------------


def test_registry_returns_the_task_module():
    assert get_task("aime24") is aime


def test_hydra_composes_the_exact_r1_template_and_defaults():
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(overrides=["+task=aime24", "+model=r1_distill_llama_8b"])
    assert cfg.task.templates.r1 == "{problem}\n" + INSTRUCTION  # no interpolation, the backslash kept
    assert cfg.task.templates.llama3 == cfg.task.templates.r1
    assert source_of(cfg.task) == "hub" and cfg.task.hub_id == "HuggingFaceH4/aime_2024" and cfg.task.split == "train"
    assert cfg.task.tag == "aime24-auto-limitNone"
    assert dict(cfg.task.gen) == {"max_new_tokens": 32768, "temperature": 0.0, "top_p": 1.0, "n_samples": 1}
    assert (cfg.model.gen.temperature, cfg.model.gen.top_p) == (0.6, 0.95)  # R1 sampling lives in its model file


def test_embedded_model_defaults_to_the_bundled_sample():
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(overrides=["+task=aime24", "+model=smollm2_135m", "task.limit=3"])
    assert source_of(cfg.task) == "bundled" and cfg.task.tag == "aime24-auto-limit3"
    aime.validate(cfg.task)
    assert [i.item_id for i in aime.load(cfg.task)] == ["60", "67", "69"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"source": "web"}, "task.source"),
        ({"limit": 0}, "task.limit"),
        ({"source": "path", "path": None}, "task.path"),
        ({"source": "path", "path": "/nonexistent/aime.jsonl"}, "task.path"),
        ({"source": "path", "path": "/tmp/aime.csv"}, "task.path"),
        ({"source": "hub", "hub_id": ""}, "task.hub_id"),
        ({"templates": {"r1": "no placeholder"}}, "task.templates.r1"),
        ({"grade_timeout_s": 0}, "task.grade_timeout_s"),
    ],
)
def test_validate_names_the_bad_knob(overrides, field):
    cfg = task_cfg()
    for key, value in overrides.items():
        cfg[key] = value
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        aime.validate(cfg)


# -- data ------------------------------------------------------------------------------------------------------------


def test_bundled_items_are_real_aime_2024_problems(items):
    assert len(items) == 8
    assert {i.exam for i in items} == {"2024-I", "2024-II"}
    first = items[0]
    assert (first.item_id, first.answer, first.number) == ("60", "204", 1)
    assert first.problem.startswith("Every morning Aya goes for a $9$-kilometer-long walk")
    assert first.breakdown == {"exam": "2024-I"}
    for item in items:
        assert 0 <= int(item.answer) <= 999
        assert item.url.startswith("https://artofproblemsolving.com/wiki/index.php/2024_AIME_")
        assert "\\boxed{" + item.answer + "}" in item.solution


def test_bundled_answers_match_an_independent_computation(items):
    answers = {(i.exam, i.number): int(i.answer) for i in items}
    # 2024 II-7: greatest four-digit N such that changing any digit to 1 gives a multiple of 7; Q + R.
    def ok(n):
        s = str(n)
        return all(int(s[:j] + "1" + s[j + 1:]) % 7 == 0 for j in range(4))
    n = max(m for m in range(1000, 10000) if ok(m))
    assert answers[("2024-II", 7)] == n // 1000 + n % 1000 == 699
    # 2024 II-14: least base b with more than ten two-digit numbers whose digits sum to their square root.
    def beautiful(b):
        return sum(1 for s in range(1, 2 * b - 1) if b <= s * s < b * b and s * s // b + s * s % b == s)
    assert answers[("2024-II", 14)] == next(b for b in range(2, 1000) if beautiful(b) > 10)
    # 2024 I-4: P(grand prize | prize) = 1 / (number of draws sharing >= 2 numbers) = m/n, answer m + n.
    share_two = sum(math.comb(4, j) * math.comb(6, 4 - j) for j in range(2, 5))
    assert answers[("2024-I", 4)] == 1 + share_two
    # 2024 II-1: 437 + 2*234 + 3z = 195 + 367 + 562.
    assert answers[("2024-II", 1)] == (195 + 367 + 562 - 437 - 2 * 234) // 3


def test_limit_takes_the_first_items_in_dataset_order(items):
    assert [i.item_id for i in aime.load(task_cfg(limit=2))] == [i.item_id for i in items[:2]]


def _maxwell_records():
    return [
        {"ID": "2024-I-1", "Problem": "Find $x$.", "Solution": "...", "Answer": 204},
        {"ID": "2024-II-4", "Problem": "Find $m+n$.", "Solution": "...", "Answer": 33},
    ]


def test_local_jsonl_in_the_maxwell_jia_schema(tmp_path):
    path = tmp_path / "aime.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _maxwell_records()))
    loaded = aime.load(task_cfg(source="path", path=str(path)))
    assert [(i.item_id, i.answer, i.exam, i.number) for i in loaded] == [
        ("2024-I-1", "204", "2024-I", 1), ("2024-II-4", "33", "2024-II", 4)]
    assert aime.score(loaded[1], "\\boxed{033}")["correct"] is True


def test_local_parquet_in_the_h4_schema(tmp_path, items):
    path = tmp_path / "train.parquet"
    pd.DataFrame([{"id": int(i.item_id), "problem": i.problem, "solution": i.solution, "answer": i.answer,
                   "url": i.url, "year": "2024"} for i in items]).to_parquet(path)
    loaded = aime.load(task_cfg(source="path", path=str(path)))
    assert loaded == items


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"id": 1, "problem": "p"}], r"record 0: missing field 'answer'"),
        ([{"id": 1, "problem": "p", "answer": "1"}, {"id": 2, "problem": "", "answer": "2"}],
         r"record 1: field 'problem'"),
        ([{"id": 1, "problem": "p", "answer": None}], r"record 0: field 'answer'"),
        ([{"id": 1, "problem": "p", "answer": "1"}, {"id": 1, "problem": "q", "answer": "2"}],
         r"record 1: field 'id': duplicate"),
        ([{"question": "p", "answer": "1"}], r"record 0: unknown AIME schema"),
    ],
)
def test_bad_local_data_names_file_record_and_field(tmp_path, records, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match=message) as err:
        aime.validate(task_cfg(source="path", path=str(path)))
    assert str(path) in str(err.value)


@pytest.mark.parametrize("layout", ["h4", "maxwell"])
def test_hub_source_goes_through_datasets_load_dataset(tmp_path, monkeypatch, items, layout):
    """The hub path is `datasets.load_dataset(hub_id, split=...)`; here hub_id is a local folder laid out like each
    hub repo (H4: data/train-*.parquet; Maxwell-Jia: one parquet at the root), so the same code runs offline."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    repo = tmp_path / layout
    if layout == "h4":
        (repo / "data").mkdir(parents=True)
        pd.DataFrame([{"id": int(i.item_id), "problem": i.problem, "solution": i.solution, "answer": i.answer,
                       "url": i.url, "year": "2024"} for i in items]).to_parquet(
            repo / "data/train-00000-of-00001.parquet")
    else:
        repo.mkdir()
        pd.DataFrame(_maxwell_records()).to_parquet(repo / "aime_2024_problems.parquet")
    loaded = aime.load(task_cfg(source="hub", hub_id=str(repo), split="train"))
    assert [i.item_id for i in loaded] == (["60", "67", "69", "64", "75", "84", "87", "80"] if layout == "h4"
                                           else ["2024-I-1", "2024-II-4"])
    with pytest.raises(ValueError, match=r"task\.hub_id: cannot load"):
        aime.load(task_cfg(source="hub", hub_id=str(repo), split="test"))


# -- prompts ---------------------------------------------------------------------------------------------------------


def test_r1_prompt_is_one_user_message_without_system_prompt(items):
    p = aime.prompt(items[0], model_cfg("r1_distill_llama_8b"), cfg=task_cfg())
    assert isinstance(p, Prompt) and p.truncated is False
    assert p.messages == [{"role": "user", "content": items[0].problem + "\n" + INSTRUCTION}]


@pytest.mark.parametrize("model", ["llama31_8b_instruct", "smollm2_135m"])
def test_instruct_models_get_the_same_instruction_in_a_user_turn(items, model):
    p = aime.prompt(items[1], model_cfg(model), cfg=task_cfg())
    assert p.messages == [{"role": "user", "content": items[1].problem + "\n" + INSTRUCTION}]


def test_template_is_config_and_only_problem_is_substituted(items):
    cfg = task_cfg()
    cfg.templates.llama3 = "Solve: {problem} Answer in \\boxed{} (keep {x} and \\${literal})."  # \${ escapes
    mcfg = model_cfg("llama31_8b_instruct")
    mcfg.system_prompt = "You are a careful mathematician."
    p = aime.prompt(items[1], mcfg, cfg=cfg)
    assert p.messages[0] == {"role": "system", "content": "You are a careful mathematician."}
    assert p.messages[1]["content"] == f"Solve: {items[1].problem} Answer in \\boxed{{}} (keep {{x}} and ${{literal}})."
    with pytest.raises(ValueError, match=r"task\.templates: no template for model family 'gpt'"):
        aime.prompt(items[0], {"family": "gpt"}, cfg=cfg)


# -- replayed completions through score + summarize -----------------------------------------------------------------


def _replay(items, completions, *, thinking):
    """What backend=replay does: split off the thinking, score the answer part, collect rows."""
    rows = []
    for item, completion in zip(items, completions):
        answer_part, _ = split_thinking(completion, thinking=thinking)
        rows.append({"item_id": item.item_id, "sample_idx": 0, "finish_reason": "stop", "gen_tokens": 100,
                     **item.breakdown, **aime.score(item, answer_part, cfg=task_cfg())})
    return pd.DataFrame(rows)


def _metric(summary, metric, group="all"):
    return summary[(summary.metric == metric) & (summary.group == group)].value.item()


@pytest.mark.parametrize("thinking", [True, False])
def test_boxed_gold_scores_100_and_gold_plus_one_scores_0(items, thinking):
    think = "<think>\nLet me work through this carefully.\n</think>\n\n" if thinking else ""
    right = [f"{think}The answer is $\\boxed{{{i.answer}}}$." for i in items]
    wrong = [f"{think}The answer is $\\boxed{{{int(i.answer) + 1}}}$." for i in items]
    good = aime.summarize(_replay(items, right, thinking=thinking))
    bad = aime.summarize(_replay(items, wrong, thinking=thinking))
    assert _metric(good, "pass@1") == 1.0 and _metric(good, "answered") == 1.0
    assert _metric(bad, "pass@1") == 0.0 and _metric(bad, "answered") == 1.0
    assert _metric(good, "pass@1", "exam=2024-II") == 1.0


@pytest.mark.parametrize(
    "completion",
    [
        "<think>\n25 it is.\n</think>\n\nThus $xy = \\boxed{025}$.",
        "<think>\nhmm\n</think>\n\nTherefore $xy=\\boxed{25}$.",
        "<think>\nhmm\n</think>\n\n$\\boxed{ 25 }$",
        "<think>\nhmm\n</think>\n\nSo $xy = \\boxed{\\dfrac{50}{2}}$.",
        "<think>\nAt first I got \\boxed{24}. Wait, recheck: 4xy = 100.\n</think>\n\n"
        "**Final Answer**\n\\[\n\\boxed{25}\n\\]",
        "<think>\nok\n</think>\nThe final answer is $\\boxed{xy = 25}$. I hope it is correct.",
    ],
)
def test_equivalent_forms_after_thinking_are_correct(items, completion):
    item = next(i for i in items if i.item_id == "67")  # 2024 I-2, gold "025"
    result = aime.score(item, split_thinking(completion, thinking=True)[0])
    assert result["correct"] is True and result["prediction"] == "25" and result["answer"] == "25"


@pytest.mark.parametrize(
    "completion",
    [
        "<think>\nSo xy = 25, i.e. \\boxed{25}.\n</think>\n\nI could not finish.",  # box only inside thinking
        "<think>\nSo xy = 25, i.e. \\boxed{25}. Let me double-check the logarithms",  # thinking never closed (cut)
    ],
)
def test_a_box_inside_the_thinking_block_is_not_taken_under_boxed(items, completion):
    """The stricter ``task.protocol=boxed``; the default (lighteval) grades these differently, see
    tests/test_official_aime24.py."""
    item = next(i for i in items if i.item_id == "67")
    strict = task_cfg(protocol="boxed")
    result = aime.score(item, split_thinking(completion, thinking=True)[0], cfg=strict)
    assert result["prediction"] is None and result["correct"] is False
    # even if a caller passes the whole completion, only the text after the last </think> is graded
    assert aime.score(item, completion, cfg=strict)["correct"] is False


def test_score_many_matches_score(items):
    pairs = [(i, f"\\boxed{{{i.answer}}}") for i in items] + [(items[0], "no answer")]
    assert aime.score_many(pairs, cfg=task_cfg()) == [aime.score(i, c) for i, c in pairs]
