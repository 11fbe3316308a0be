"""task=needle: deterministic items, the needle where it should be, exact-match scoring."""

from __future__ import annotations

import pandas as pd
import pytest
from omegaconf import OmegaConf

from tasks import needle

CFG = dict(source="bundled", context_tokens=1024, depth_lo=0.33, depth_hi=0.67, n_items=10, seed=0, limit=None,
           key_kind="number")


def cfg(**kw):
    return OmegaConf.create({**CFG, **kw})


def test_items_are_deterministic_given_the_seed_and_differ_across_seeds():
    a, b, c = needle.load(cfg()), needle.load(cfg()), needle.load(cfg(seed=1))
    assert a == b and a != c
    assert len({i.key for i in a}) == 10 and all(len(i.key) == 7 for i in a)
    assert all(0.33 <= i.depth <= 0.67 for i in a)
    assert [i.item_id for i in needle.load(cfg(limit=3))] == [i.item_id for i in a[:3]]


def test_the_haystack_has_the_requested_tokens_and_the_needle_at_its_depth(smollm2):
    _, tok = smollm2
    for item in needle.load(cfg(limit=4)):
        text = needle.haystack(item, tok)
        sentence = needle.NEEDLE.format(noun=item.noun, key=item.key)
        assert text.count(sentence) == 1
        before, after = text.split(sentence)
        n_text = len(tok(before + after, add_special_tokens=False)["input_ids"])
        # cut to exactly context_tokens tokens; joining sentences normalises the whitespace between them
        assert 0.95 * item.context_tokens <= n_text <= item.context_tokens + 8
        sentences_before = len(needle.SENTENCE_END.split(before.strip()))
        sentences = len(needle.SENTENCE_END.split((before + after).strip()))
        assert abs(sentences_before / sentences - item.depth) < 0.05  # depth counts sentences, as in RULER


def test_prompt_is_rulers_wording_with_its_answer_prefix():
    item = needle.load(cfg(limit=1))[0]
    prompt = needle.prompt(item, OmegaConf.create({"family": "chatml"}))
    content = prompt.messages[0]["content"]
    assert content.startswith("Some special magic number is hidden within the following text.")
    assert content.endswith("What is the special magic number mentioned in the provided text?")
    assert prompt.prefill == "The special magic number mentioned in the provided text is"


@pytest.mark.parametrize(
    "completion,prediction,correct",
    [
        (" 4817263.", "4817263", True),
        (" 4817263 is the number", "4817263", True),
        (" 481.", "481", False),
        ("I don't know", None, False),
        ("", None, False),
        (" 48172639.", "48172639", False),
    ],
)
def test_score_is_exact_match_of_the_first_number(completion, prediction, correct):
    item = needle.NeedleItem("x", "4817263", 0.5, 0, 1024)
    s = needle.score(item, completion)
    assert (s["prediction"], s["correct"], s["answer"]) == (prediction, correct, "4817263")


def test_summary_reports_accuracy_and_the_recovered_key_prefix():
    rows = pd.DataFrame({
        "prediction": ["4817263", "481", None, "4817263"],
        "answer": ["4817263"] * 4,
        "correct": [True, False, False, True],
        "depth": [0.4, 0.5, 0.6, 0.2],
    })
    out = needle.summarize(rows).set_index(["metric", "group"])["value"]
    assert out[("accuracy", "all")] == 50.0
    assert out[("key_prefix", "all")] == pytest.approx(100 * (1 + 3 / 7 + 0 + 1) / 4)
    assert out[("accuracy", "depth=middle")] == pytest.approx(100 / 3) and out[("accuracy", "depth=early")] == 100.0


def test_the_embedded_model_finds_the_key_with_the_full_cache(smollm2):
    import snapstream_core as ss
    from snapstream_core.generate import SamplingConfig, generate

    model, tok = smollm2
    model.set_attn_implementation("sdpa")
    items = needle.load(cfg(context_tokens=600, limit=3))
    prompts = []
    for item in items:
        p = needle.prompt(item, None, tokenizer=tok)
        prompts.append(tok.apply_chat_template([*p.messages, {"role": "assistant", "content": p.prefill}],
                                               continue_final_message=True, tokenize=True, return_dict=False))
    out = generate(model, prompts, ss.NoCompression(), SamplingConfig(max_new_tokens=10),
                   eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    found = [needle.score(i, tok.decode(t[0]))["correct"] for i, t in zip(items, out.tokens)]
    assert sum(found) >= 2, found


@pytest.mark.parametrize("kind,shape", [
    ("number", r"[1-9]\d{6}"),
    ("words", r"[a-z]+-[a-z]+"),
    ("uuid", r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"),
])
def test_each_key_kind_has_its_shape_its_wording_and_is_scored_by_exact_match(kind, shape):
    import re

    items = needle.load(cfg(key_kind=kind))
    assert all(re.fullmatch(shape, i.key) for i in items) and len({i.key for i in items}) >= 9
    assert items == needle.load(cfg(key_kind=kind))  # deterministic
    item = items[0]
    prompt = needle.prompt(item, None)
    assert f"The special magic {item.noun} is {item.key}." in prompt.messages[0]["content"]
    assert prompt.prefill == f"The special magic {item.noun} mentioned in the provided text is"
    assert needle.score(item, f" {item.key.upper()}.")["correct"]  # case does not matter
    half = item.key[: len(item.key) // 2].rstrip("-")
    partial = needle.score(item, f" {half}")
    assert not partial["correct"] and needle.key_prefix(partial["prediction"], item.key) == pytest.approx(
        len(half) / len(item.key))


def test_word_keys_are_a_few_tokens_where_numbers_are_one_token_a_digit(smollm2):
    _, tok = smollm2

    def n_tokens(item):
        return len(tok(f" {item.key}.", add_special_tokens=False)["input_ids"])

    words = [n_tokens(i) for i in needle.load(cfg(key_kind="words"))]
    numbers = [n_tokens(i) for i in needle.load(cfg(key_kind="number"))]
    assert max(words) <= 6 < min(numbers)  # SmolLM2 splits the 7 digits: kernel-7 pooling keeps only their head


def test_an_unknown_key_kind_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="task.key_kind"):
        needle.load(cfg(key_kind="emoji"))
