"""R1 thinking protocol: the ``<think>\\n`` opening is guaranteed (checked on the chat template, else prefilled with
its newline), ``</think>`` survives decoding whether or not the tokenizer marks the tags special, and model configs
can pin a hub revision."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from tokenizers import AddedToken

from evals.config.models import check_model_config, load_tokenizer
from evals.execute.backends.hf import HFBackend
from tasks.base import Prompt, decode_keeping_think_tags, r1_prefill, split_thinking
from tasks.protocol import answer_part

R1_OLD = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '<|User|>' + m['content'] }}"
          "{% elif m['role'] == 'assistant' %}{{ '<|Assistant|>' + m['content'] }}{% endif %}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|Assistant|>' }}{% endif %}")
R1_NEW = R1_OLD.replace("{{ '<|Assistant|>' }}{% endif %}", "{{ '<|Assistant|><think>\\n' }}{% endif %}")
R1 = OmegaConf.create({"name": "r1", "family": "r1", "thinking": True, "system_prompt": None})


@pytest.fixture(scope="module")
def base_tokenizer():
    return load_tokenizer(OmegaConf.create({"source": "random"}))  # the SmolLM2 tokenizer, offline


def tokenizer_with_think_tags(base, special: bool):
    tok = copy.deepcopy(base)
    tok.add_tokens([AddedToken("<think>", special=special), AddedToken("</think>", special=special)],
                   special_tokens=special)
    return tok


@pytest.mark.parametrize("special", [True, False])
def test_think_tags_survive_decoding_special_or_not(base_tokenizer, special):
    tok = tokenizer_with_think_tags(base_tokenizer, special)
    text = "<think>\nlet me see</think>\n\nThe answer is 25."
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert ("</think>" in tok.decode(ids, skip_special_tokens=True)) is not special  # the two tokenizer kinds
    decoded = decode_keeping_think_tags(tok, ids)
    assert decoded == text  # the tags stay, the EOS goes
    answer, closed = split_thinking(decoded, thinking=True)
    assert closed is True and answer.strip() == "The answer is 25."
    if special:  # what plain skip_special_tokens=True decoding did: every row looked unclosed
        assert split_thinking(tok.decode(ids, skip_special_tokens=True), thinking=True) == ("", False)


@pytest.mark.parametrize("template, prefill", [(R1_OLD, "<think>\n"), (R1_NEW, None)])
def test_r1_opening_is_checked_on_the_template(base_tokenizer, template, prefill):
    tok = copy.deepcopy(base_tokenizer)
    tok.chat_template = template
    assert r1_prefill(R1, tok) == prefill
    assert r1_prefill(OmegaConf.create({"family": "llama3"}), tok) is None
    assert r1_prefill(R1, None) is None  # replay: no tokenizer, nothing to check


def test_prefilled_opening_keeps_its_newline(base_tokenizer):
    """continue_final_message strips the prefill's trailing newline; the backend puts it back, so an old template
    gives the same prompt tokens as a new one."""
    old, new = copy.deepcopy(base_tokenizer), copy.deepcopy(base_tokenizer)
    old.chat_template, new.chat_template = R1_OLD, R1_NEW
    messages = [{"role": "user", "content": "What is 2+2?"}]
    fake = SimpleNamespace(model_cfg=R1)
    fake.tokenizer = old
    prefilled = HFBackend.encode(fake, Prompt(messages, prefill=r1_prefill(R1, old)))
    fake.tokenizer = new
    plain = HFBackend.encode(fake, Prompt(messages, prefill=r1_prefill(R1, new)))
    assert prefilled == plain
    assert old.decode(prefilled).endswith("<|Assistant|><think>\n")


def test_aime_prompt_carries_the_prefill(base_tokenizer):
    import tasks.aime24 as aime
    from tasks.aime24.data import Item

    tok = copy.deepcopy(base_tokenizer)
    tok.chat_template = R1_OLD
    cfg = OmegaConf.create({"templates": {"r1": "{problem}\nPlease reason step by step."}})
    assert aime.prompt(Item("1", "p", "5"), R1, cfg=cfg, tokenizer=tok).prefill == "<think>\n"


def test_tasks_without_their_own_protocol_use_split_thinking():
    assert answer_part(object(), "a</think>b", True) == ("b", True)
    assert answer_part(object(), "still thinking", True) == ("", False)


BASE = {"device": "cpu", "attn_implementation": "sdpa"}  # the rest of a model node that check_model_config reads


def test_model_revision_is_checked():
    random = OmegaConf.create({"source": "random", "dtype": "float32", "revision": "abc123", **BASE})
    with pytest.raises(ValueError, match="model.revision"):
        check_model_config(random)
    with pytest.raises(ValueError, match="model.revision"):
        hub = {"source": "hub", "dtype": "bfloat16", "hub_id": "x/y", "revision": 5, **BASE}
        check_model_config(OmegaConf.create(hub))
