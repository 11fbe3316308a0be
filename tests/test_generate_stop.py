"""Stop strings in the core's ``generate`` and the HF backend's text cut: early stop on generated text only, samples
cut after the completing token, the text cut before the stop string (lm-eval's ``until``)."""

from __future__ import annotations

import pytest
import torch

import snapstream_core as ss
from evals.execute.backends.hf import cut_at_stop
from snapstream_core.generate import SamplingConfig, generate
from tests.lm_eval_helpers import one_thread

_one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)
NEW = 16
PROMPTS = ["There is a pass key hidden in the text below. The pass key is 52445. What is the pass key?",
           "Short prompt:"]  # fmt: skip


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_llama_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_llama_dir)


def run(model, tok, prompts, n=1, method=None, **kw):
    ids = [tok(p)["input_ids"] for p in prompts]
    sampling = SamplingConfig(max_new_tokens=NEW, n=n)
    return generate(model, ids, method or ss.NoCompression(), sampling, eos_token_ids=[tok.eos_token_id],
                    pad_token_id=tok.pad_token_id, tokenizer=tok, **kw)  # fmt: skip


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("method", [ss.NoCompression(), ss.SnapStream(prompt_budget=8, window=2, sinks=1, recent=4)])
def test_a_stop_string_ends_each_sample_after_its_completing_token(model_and_tokenizer, n, method):
    model, tok = model_and_tokenizer
    free = run(model, tok, PROMPTS, n=n, method=method)
    text = tok.decode(free.tokens[0][0], skip_special_tokens=True)
    words = [w for w in text.split()[1:] if w.isalpha()]
    stop = words[len(words) // 2]  # a word the model writes for the first prompt, mid-completion
    out = run(model, tok, PROMPTS, n=n, method=method, stop_strings=[stop])
    for free_row, row, reasons in zip(free.tokens, out.tokens, out.finish_reasons):
        for full, cut, reason in zip(free_row, row, reasons):
            full_text = tok.decode(full, skip_special_tokens=True)
            if stop not in full_text:
                assert cut == full
                continue
            assert reason == "stop" and cut == full[: len(cut)] and len(cut) < len(full)
            assert stop in tok.decode(cut, skip_special_tokens=True)
            assert stop not in tok.decode(cut[:-1], skip_special_tokens=True)  # nothing after the completing token
            assert cut_at_stop(tok.decode(cut, skip_special_tokens=True), (stop,)) == full_text[: full_text.index(stop)]
    assert out.finish_reasons[0] == ["stop"] * n


def test_generation_stops_early_rather_than_being_cut_afterwards(model_and_tokenizer):
    model, tok = model_and_tokenizer
    free = run(model, tok, PROMPTS[:1])
    text = tok.decode(free.tokens[0][0], skip_special_tokens=True)
    words = [w for w in text.split()[1:] if w.isalpha()]
    forwards = []
    hook = model.register_forward_hook(lambda *a: forwards.append(1))
    try:
        out = run(model, tok, PROMPTS[:1], stop_strings=[words[len(words) // 2]])
    finally:
        hook.remove()
    assert len(forwards) == len(out.tokens[0][0]) < NEW  # prefill + one step per new token but the last


def test_a_stop_string_across_the_prompt_boundary_does_not_stop(model_and_tokenizer):
    model, tok = model_and_tokenizer
    prompt = PROMPTS[1]
    free = run(model, tok, [prompt])
    first_text = tok.decode(free.tokens[0][0][:1], skip_special_tokens=True)
    rest = tok.decode(free.tokens[0][0], skip_special_tokens=True)
    stop = prompt[-1] + first_text[:1]  # begins in the prompt, completed by the first new token
    assert stop not in rest  # absent from the generated text itself
    out = run(model, tok, [prompt], stop_strings=[stop])
    assert out.tokens == free.tokens and out.finish_reasons == free.finish_reasons


def test_the_text_is_cut_before_the_earliest_stop_string():
    assert cut_at_stop("a\n\nQuestion: b\n", ("Question:", "\n\n")) == "a"
    assert cut_at_stop("no stop here", ("\n",)) == "no stop here"
    assert cut_at_stop("x", ()) == "x"


def test_stop_strings_need_the_tokenizer(model_and_tokenizer):
    model, tok = model_and_tokenizer
    with pytest.raises(ValueError, match="stop_strings needs the tokenizer"):
        generate(model, [[1, 2, 3]], ss.NoCompression(), SamplingConfig(max_new_tokens=2), eos_token_ids=[2],
                 pad_token_id=2, stop_strings=["x"])  # fmt: skip
