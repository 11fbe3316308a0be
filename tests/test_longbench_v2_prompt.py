"""LongBench-v2 prompts: the official templates character for character, middle truncation with the real Llama-3.1
tokenizer, the CoT second call, thinking models."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from tasks.base import Prompt
from tasks.longbench_v2 import followup, load, prompt
from tasks.longbench_v2.data import Item
from tasks.longbench_v2.prompts import COT, COT_ANSWER, DIRECT, template, truncate_middle
from tests.llama3_tokenizer import llama3_tokenizer_file

# The official templates (THUDM/LongBench prompts/, quoted in the project's reference notes), written out here
# independently of the bundled copies they check.
OFFICIAL_0SHOT = (
    "Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    'Format your response as follows: "The correct answer is (insert answer here)".'
)
OFFICIAL_0SHOT_COT = (
    "Please read the following text and answer the questions below.\n\n<text>\n$DOC$\n</text>\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    "Let\u2019s think step by step:"
)
OFFICIAL_0SHOT_COT_ANS = (
    "Please read the following text and answer the questions below.\n\nThe text is too long and omitted here.\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    "Let\u2019s think step by step: $COT$\n\n"
    "Based on the above, what is the single, most likely answer choice? "
    'Format your response as follows: "The correct answer is (insert answer here)".'
)

LLAMA = {"name": "llama31_8b_instruct", "family": "llama3", "thinking": False, "max_context": 120000,
         "system_prompt": None}
R1 = {"name": "r1_distill_llama_8b", "family": "r1", "thinking": True, "max_context": 120000, "system_prompt": None}


def task_cfg(**overrides):
    base = {"source": "bundled", "path": None, "limit": None, "difficulty": None, "length": None, "domain": None,
            "cot": False, "max_len": None, "cot_tokens": 1024, "answer_tokens": 128}
    return OmegaConf.create({**base, **overrides})


def model_cfg(base=LLAMA, **overrides):
    return OmegaConf.create({**base, **overrides})


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return load(task_cfg())


@pytest.fixture(scope="module")
def llama_tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(llama3_tokenizer_file()))


def expected_direct(item: Item) -> str:
    """The filled 0shot.txt, built by hand (no template code)."""
    a, b, c, d = (choice.strip() for choice in item.choices)
    return (
        "Please read the following text and answer the question below.\n\n"
        f"<text>\n{item.context.strip()}\n</text>\n\n"
        f"What is the correct answer to this question: {item.question.strip()}\n"
        f"Choices:\n(A) {a}\n(B) {b}\n(C) {c}\n(D) {d}\n\n"
        'Format your response as follows: "The correct answer is (insert answer here)".'
    )


def test_bundled_templates_are_the_official_text():
    assert template(DIRECT) == OFFICIAL_0SHOT
    assert template(COT) == OFFICIAL_0SHOT_COT
    assert template(COT_ANSWER) == OFFICIAL_0SHOT_COT_ANS
    assert "\u2019" in template(COT) and "Let's" not in template(COT)  # the curly apostrophe of the original


def test_prompt_is_the_filled_template_character_for_character(items, llama_tokenizer):
    item = items[0]  # 3.6k tokens: well under max_len, untouched
    out = prompt(item, model_cfg(), cfg=task_cfg(), tokenizer=llama_tokenizer)
    assert isinstance(out, Prompt) and out.truncated is False
    assert out.messages == [{"role": "user", "content": expected_direct(item)}]  # one user message, no system


def test_fields_are_stripped_and_replaced_in_the_official_order():
    item = Item(item_id="x", domain="Single-Document QA", sub_domain="Academic", difficulty="easy", length="short",
                question="  Which one? $DOC$ ", choices=(" a ", "b\n", "$C_A$", "d"), answer="A",
                context="\n  The text quotes $Q$ and $C_B$.  \n")
    content = prompt(item, model_cfg(), cfg=task_cfg()).messages[0]["content"]
    # $DOC$ goes in first, so markers inside the context are filled later (as pred.py's chained str.replace);
    # markers inside the question or choices inserted after their own replacement stay literal.
    assert "<text>\nThe text quotes Which one? $DOC$ and b.\n</text>" in content
    assert "question: Which one? $DOC$\nChoices:\n(A) a\n(B) b\n(C) $C_A$\n(D) d\n\n" in content


def test_over_long_item_is_cut_to_max_len_ids_keeping_both_halves(items, llama_tokenizer):
    item = items[1]  # 18.9k Llama-3.1 tokens
    full = expected_direct(item)
    ids = llama_tokenizer.encode(full)
    max_len = 8192
    assert len(ids) > max_len and ids[0] == 128000  # <|begin_of_text|> counts, as in pred.py's tokenizer.encode

    out = prompt(item, model_cfg(max_context=max_len), cfg=task_cfg(), tokenizer=llama_tokenizer)
    content = out.messages[0]["content"]
    kept = ids[:4096] + ids[-4096:]
    assert out.truncated is True and len(kept) == max_len
    assert content == llama_tokenizer.decode(kept, skip_special_tokens=True)
    assert content.startswith("Please read the following text and answer the question below.\n\n<text>\nFebruary")
    assert content.endswith(full[-400:])  # the question, the choices and the format instruction survive
    assert "entrance exam in Florence" in content and "company called Interleaf" not in content  # the middle goes
    # Re-encoding the decoded text need not give back max_len ids (merges across the cut; the BOS is dropped by the
    # decode and re-added by the encode). Measured over 1,244 cuts of the bundled items with this tokenizer and
    # SmolLM2's: 97% give back exactly max_len, none is off by more than 2.
    assert abs(len(llama_tokenizer.encode(content)) - max_len) <= 2


def test_odd_max_len_keeps_floor_half_then_ceil_half(llama_tokenizer):
    text = " ".join(f"w{i}" for i in range(300))
    ids = llama_tokenizer.encode(text)
    out, truncated = truncate_middle(text, llama_tokenizer, 101)
    assert truncated and out == llama_tokenizer.decode(ids[:50] + ids[-51:], skip_special_tokens=True)
    assert truncate_middle(text, llama_tokenizer, len(ids)) == (text, False)  # exactly max_len: untouched


def test_task_max_len_overrides_the_model_context(items, llama_tokenizer):
    out = prompt(items[0], model_cfg(), cfg=task_cfg(max_len=2000), tokenizer=llama_tokenizer)
    assert out.truncated is True
    assert len(llama_tokenizer.encode(out.messages[0]["content"])) in range(1998, 2003)


def test_cot_mode_makes_the_two_official_calls(items, llama_tokenizer):
    item, cfg = items[0], task_cfg(cot=True)
    first = prompt(item, model_cfg(), cfg=cfg, tokenizer=llama_tokenizer)
    assert first.messages[0]["content"] == expected_direct(item).replace(
        "answer the question below", "answer the questions below").replace(
        'Format your response as follows: "The correct answer is (insert answer here)".',
        "Let\u2019s think step by step:")

    cot = "\n  The speaker ties convenience to the toplevel. So B.  \n"
    second, max_new_tokens = followup(item, cot, model_cfg(), cfg=cfg, tokenizer=llama_tokenizer)
    a, b, c, d = item.choices
    assert max_new_tokens == 128
    assert second.messages == [{"role": "user", "content": (
        "Please read the following text and answer the questions below.\n\nThe text is too long and omitted here.\n\n"
        f"What is the correct answer to this question: {item.question}\nChoices:\n(A) {a}\n(B) {b}\n(C) {c}\n(D) {d}"
        "\n\nLet\u2019s think step by step: The speaker ties convenience to the toplevel. So B.\n\n"
        "Based on the above, what is the single, most likely answer choice? "
        'Format your response as follows: "The correct answer is (insert answer here)".')}]


def test_no_second_call_in_direct_mode_or_after_an_empty_cot(items):
    assert followup(items[0], "The correct answer is (B)", model_cfg(), cfg=task_cfg()) is None
    # pred.py: output == '' -> the item is skipped, no second call
    assert followup(items[0], "", model_cfg(), cfg=task_cfg(cot=True)) is None
    # pred.py skips only an exactly empty output: a whitespace CoT gets its answer call with an empty $COT$
    second, _ = followup(items[0], "  \n ", model_cfg(), cfg=task_cfg(cot=True))
    assert "Let\u2019s think step by step: \n\n" in second.messages[0]["content"]


def test_thinking_model_gets_one_direct_call_even_with_cot(items, llama_tokenizer):
    out = prompt(items[0], model_cfg(R1), cfg=task_cfg(cot=True), tokenizer=llama_tokenizer)
    assert out.messages == [{"role": "user", "content": expected_direct(items[0])}]
    assert followup(items[0], "x</think>The correct answer is (B)", model_cfg(R1), cfg=task_cfg(cot=True)) is None


def test_model_system_prompt_is_kept_and_no_tokenizer_means_no_truncation(items):
    out = prompt(items[1], model_cfg(system_prompt="Be brief."), cfg=task_cfg())
    assert out.truncated is False and out.messages[0] == {"role": "system", "content": "Be brief."}
    assert out.messages[1]["content"] == expected_direct(items[1])


def test_bad_max_context_names_the_field(items, llama_tokenizer):
    with pytest.raises(ValueError, match="model.max_context"):
        prompt(items[0], model_cfg(max_context=None), cfg=task_cfg(), tokenizer=llama_tokenizer)


def test_items_are_frozen(items):
    with pytest.raises(dataclasses.FrozenInstanceError):
        items[0].answer = "A"  # type: ignore[misc]
