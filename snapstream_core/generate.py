"""Generation under a compression method: a left-padded batch, ``n`` samples per prompt from ONE prefill.

``generate`` wraps ``model.generate`` with a fresh :class:`CompressedCache`. For ``n > 1`` the prompts are prefilled
and compressed once, the compressed cache is expanded to ``n`` sequences per prompt, each sequence draws its first
token from the shared last-position logits, and ``model.generate`` continues from the cache with only the new token
and an attention mask covering the full logical length (so positions stay true).

It is the eager reference and the path of ``positions=in_cache`` (keys re-rotated every step); runs and benchmarks
decode through the engine (:mod:`snapstream_core.engine`), the core's one decode step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import StoppingCriteria, StoppingCriteriaList, StopStringCriteria

from snapstream_core.api import make_cache
from snapstream_core.attention import attach
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.sampling import SamplingConfig

log = logging.getLogger(__name__)


@dataclass
class GenerationOutput:
    """``tokens[i][j]``: new token ids of sample ``j`` of prompt ``i`` (cut after the first EOS, or after the token
    that completes the first stop string); ``finish_reasons[i][j]``: ``stop`` (EOS or stop string) or ``length``;
    ``stats``: the cache's measured KV figures; ``prefill_s``/``decode_s``: wall time to the first token and after
    it."""

    tokens: list[list[list[int]]]
    finish_reasons: list[list[str]]
    stats: dict[str, int] = field(default_factory=dict)
    prefill_s: float = 0.0
    decode_s: float = 0.0


class _StepClock(StoppingCriteria):
    """Records the time of each decoding step; never stops generation."""

    def __init__(self):
        self.times: list[float] = []

    def __call__(self, input_ids, scores, **kwargs):
        self.times.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class _GeneratedStopStrings(StoppingCriteria):
    """transformers' ``StopStringCriteria`` on the generated tokens only: on its own it looks at the end of the whole
    sequence, so a stop string begun in the prompt and completed by the first new token would stop generation
    (lm-eval's and OpenAI's ``stop`` only consider generated text)."""

    def __init__(self, tokenizer, stop_strings: Sequence[str], offset: int):
        self.inner = StopStringCriteria(tokenizer, list(stop_strings))
        self.offset = offset  # prompt columns of the input_ids this criterion will see

    def __call__(self, input_ids, scores, **kwargs):
        return self.inner(input_ids[:, self.offset :], scores, **kwargs)


def stop_cut(seq: list[int], stop_strings: Sequence[str], tokenizer) -> int | None:
    """Fewest leading tokens of ``seq`` whose decoded text holds a stop string (None if none does).

    Binary search on prefixes (holding a stop string is monotone in the prefix length): O(log n) decodes.
    """

    def holds(k: int) -> bool:
        text = tokenizer.decode(seq[:k], skip_special_tokens=True)
        return any(s in text for s in stop_strings)

    if not seq or not holds(len(seq)):
        return None
    lo, hi = 1, len(seq)
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def left_pad(prompts: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids and attention mask of left-padded prompts."""
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, T - len(p) :] = 1
    return ids.to(device), mask.to(device)


def cut_at_eos(seq: list[int], eos: set[int], max_new_tokens: int) -> tuple[list[int], str]:
    for i, tok in enumerate(seq):
        if tok in eos:
            return seq[: i + 1], "stop"
    return seq[:max_new_tokens], "length"


@torch.no_grad()
def generate(
    model,
    prompts: list[list[int]],
    method: CompressionMethod,
    sampling: SamplingConfig,
    *,
    eos_token_ids: list[int],
    pad_token_id: int,
    stop_strings: Sequence[str] = (),
    tokenizer=None,
) -> GenerationOutput:
    """Generate ``sampling.n`` completions for each prompt (token id lists) under ``method``.

    ``stop_strings`` (needs ``tokenizer``): a sample also ends with the token that completes the first of these
    strings in its generated text (generation stops early; the text itself is left for the caller to cut).
    """
    method.check_engine("snapstream_core.generate()")
    stop_strings = [s for s in stop_strings if s]
    if stop_strings and tokenizer is None:
        raise ValueError("generate: stop_strings needs the tokenizer")
    device = model.device
    attach(model)
    ids, mask = left_pad(prompts, pad_token_id, device)
    B, T = ids.shape
    n = sampling.n
    cache = make_cache(model, method)
    clock = _StepClock()

    def criteria(offset: int) -> StoppingCriteriaList:
        extra = [_GeneratedStopStrings(tokenizer, stop_strings, offset)] if stop_strings else []
        return StoppingCriteriaList([clock, *extra])

    start = time.perf_counter()
    if n == 1:
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            past_key_values=cache,
            generation_config=sampling.generation_config(sampling.max_new_tokens, eos_token_ids, pad_token_id),
            stopping_criteria=criteria(T),
        )
        new = out[:, T:].tolist()
        first_token_at = clock.times[0] if clock.times else time.perf_counter()
    else:
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, logits_to_keep=1
        ).logits  # (B, 1, V): the whole prompt's logits would be T * V * 4 bytes per row
        last = logits[:, -1, :].float().repeat_interleave(n, dim=0)  # (B*n, V)
        if sampling.do_sample:
            probs = torch.softmax(sampling.warpers()(ids.repeat_interleave(n, dim=0), last), dim=-1)
            first = torch.multinomial(probs, 1)  # (B*n, 1)
        else:
            first = last.argmax(-1, keepdim=True)
        first_token_at = time.perf_counter()
        cache.batch_repeat_interleave(n)
        if sampling.max_new_tokens > 1:
            full_mask = torch.cat([mask.repeat_interleave(n, dim=0), torch.ones_like(first)], dim=-1)
            out = model.generate(
                input_ids=first,
                attention_mask=full_mask,
                past_key_values=cache,
                generation_config=sampling.generation_config(
                    sampling.max_new_tokens - 1, eos_token_ids, pad_token_id
                ),
                stopping_criteria=criteria(0),
            )
        else:
            out = first
        new = out.tolist()
    end = time.perf_counter()
    eos = set(eos_token_ids)
    tokens: list[list[list[int]]] = [[] for _ in range(B)]
    reasons: list[list[str]] = [[] for _ in range(B)]
    for row, seq in enumerate(new):
        cut, reason = cut_at_eos(seq, eos, sampling.max_new_tokens)
        at = stop_cut(cut, stop_strings, tokenizer) if stop_strings else None
        if at is not None:
            cut, reason = cut[:at], "stop"
        tokens[row // n].append(cut)
        reasons[row // n].append(reason)
    return GenerationOutput(
        tokens=tokens,
        finish_reasons=reasons,
        stats=cache.stats.as_row(),
        prefill_s=first_token_at - start,
        decode_s=end - first_token_at,
    )
