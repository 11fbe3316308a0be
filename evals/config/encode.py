"""A prompt's token ids as the model sees it: needs the tokenizer and the model settings only, so the planner and
the full cache's copy count prompts before any weights load."""

from __future__ import annotations

from typing import Any

from tasks.base import Prompt


def encode_prompt(tokenizer: Any, model_cfg: Any, prompt: Prompt) -> list[int]:
    """Token ids of a prompt: chat messages through the tokenizer's chat template (``model.system_prompt``
    prepended unless thinking), raw text as is. Needs only the tokenizer: the runner counts prompts before any
    weights load (evals/execute/alias.py)."""
    if isinstance(prompt.messages, str):
        return tokenizer(prompt.messages, add_special_tokens=True)["input_ids"]
    messages = list(prompt.messages)
    system = model_cfg.system_prompt
    if system and not model_cfg.thinking and messages and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": system}, *messages]
    if prompt.prefill:
        text = tokenizer.apply_chat_template(
            [*messages, {"role": "assistant", "content": prompt.prefill}],
            continue_final_message=True,
            tokenize=False,
        )
        # continue_final_message cuts trailing whitespace of the prefill (R1's "<think>\n"): put it back
        tail = prompt.prefill[len(prompt.prefill.rstrip()):]
        if tail and not text.endswith(tail):
            text += tail
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
