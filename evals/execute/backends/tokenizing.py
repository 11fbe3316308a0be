"""What the backends that tokenize prompts themselves share (``hf``, ``vllm``): the prompt encoding with the model's
tokenizer and chat template, the prompt record a request is stored as, the token ids that end a sample and the cut at
a stop string. No torch: the ``vllm`` backend's process imports this without the compression core."""

from __future__ import annotations

from typing import Any

from evals.config.encode import encode_prompt
from evals.execute.backends.base import Backend
from evals.execute.backends.prompts import prompt_record
from tasks.base import Prompt

# End-of-turn tokens of the chat formats we run, besides the tokenizer's own EOS.
END_OF_TURN = ("<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<｜end▁of▁sentence｜>")


class TokenizingBackend(Backend):
    """A backend that encodes prompts with ``self.tokenizer`` and ``self.model_cfg`` (set by the subclass)."""

    model_cfg: Any = None

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt (:func:`encode_prompt` with this backend's tokenizer and model config)."""
        return encode_prompt(self.tokenizer, self.model_cfg, prompt)

    def prompt_tokens(self, prompt: Prompt) -> int:
        return len(self.encode(prompt))

    def prompt_record(self, prompt: Prompt) -> dict[str, Any]:
        """The exact input of a request as this backend sends it (the system prompt it prepends included)."""
        return prompt_record(prompt, None if self.model_cfg.thinking else self.model_cfg.system_prompt)


def eos_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """The token ids that end a sample: the generation config's ``eos_token_id`` (one or a list), the tokenizer's
    EOS and the end-of-turn tokens of :data:`END_OF_TURN` the vocabulary has (the hf and vllm backends both stop
    at these)."""
    ids: set[int] = set()
    gen_eos = getattr(generation_config, "eos_token_id", None)
    ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    return sorted(ids)


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """``text`` up to (not including) the earliest occurrence of any stop string, as lm-eval cuts ``until``."""
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return text[: min(found)] if found else text
