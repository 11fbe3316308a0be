"""The official LongBench-v2 prompts (THUDM/LongBench ``prompts/``, ``pred.py``) and middle truncation.

What ``pred.py`` does, and we do in the same order:

1. fill a template by plain string replacement in this order: ``$DOC$`` (context, stripped), ``$Q$`` (question,
   stripped), ``$C_A$`` .. ``$C_D$`` (choices, stripped), and for the CoT answer call ``$COT$`` last (the stripped
   first response). It is a chain of replacements, not a one-pass substitution: a context that itself contains
   ``$Q$`` gets the question spliced in, exactly as in the official runs;
2. tokenise the filled prompt with the model's tokenizer (``tokenizer.encode(prompt)``, special tokens included as
   the tokenizer adds them, e.g. Llama-3.1's ``<|begin_of_text|>``); if longer than ``max_len`` keep the first
   ``max_len // 2`` and the last ``max_len - max_len // 2`` ids and decode them with ``skip_special_tokens=True``;
3. send it as one user message (no system prompt); the chat template is applied afterwards (by vLLM there, by our
   runner here).

Modes: direct (``0shot.txt``, one call); CoT (``task.cot=true``: ``0shot_cot.txt``, then ``0shot_cot_ans.txt`` with
the first response in place of ``$COT$``, via :func:`followup`); thinking models (``model.thinking``): one call with
``0shot.txt``, the answer read after ``</think>`` (the runner strips the thinking), ``task.cot`` ignored.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Protocol

from tasks.base import Prompt, bundled_path
from tasks.longbench_v2.data import Item

log = logging.getLogger(__name__)

DIRECT, COT, COT_ANSWER = "0shot.txt", "0shot_cot.txt", "0shot_cot_ans.txt"
PROMPT_FILES = tuple(f"longbench_v2/prompts/{name}" for name in (DIRECT, COT, COT_ANSWER))  # in the run identity


class Tokenizer(Protocol):
    """The two tokenizer calls the official truncation makes (any ``transformers`` tokenizer has them)."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


def template(name: str) -> str:
    """The official template text, byte for byte (read as bytes: no newline translation, no trailing newline)."""
    path = bundled_path(f"longbench_v2/prompts/{name}")
    st = os.stat(path)
    return _read(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read(path: str, size: int, mtime_ns: int) -> str:
    """A template file (under ``tasks.base.data_root``: the checkout's or a copy), read again only when its path,
    size or mtime changed: what the run identity hashed is what builds the prompts, in a long-lived process too."""
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8")


def fill(template_text: str, item: Item, cot: str | None = None) -> str:
    """Fill a template as ``pred.py`` does: chained ``str.replace`` in the official order (see module doc)."""
    text = template_text.replace("$DOC$", item.context.strip()).replace("$Q$", item.question.strip())
    for letter, choice in zip("ABCD", item.choices):
        text = text.replace(f"$C_{letter}$", choice.strip())
    if cot is not None:
        text = text.replace("$COT$", cot)
    return text


def truncate_middle(text: str, tokenizer: Tokenizer, max_len: int) -> tuple[str, bool]:
    """Return ``(text, truncated)``: ``text`` unchanged when its ids fit in ``max_len``, else the decoded first
    ``max_len // 2`` and last ``max_len - max_len // 2`` ids (``pred.py``'s ``ids[:m//2] + ids[-m//2:]``).

    The cut is exact on the ids; re-encoding the decoded text may give a slightly different count (tokens merge
    across the cut, special tokens are dropped by the decode and re-added by the next encode).
    """
    ids = tokenizer.encode(text)
    if len(ids) <= max_len:
        return text, False
    head = max_len // 2
    kept = ids[:head] + ids[len(ids) - (max_len - head):]
    return tokenizer.decode(kept, skip_special_tokens=True), True


def max_len_for(model_cfg: Any, cfg: Any) -> int:
    """``task.max_len`` if set, else the model's ``max_context`` (the official per-model ``max_len``)."""
    value = cfg.get("max_len") if cfg is not None else None
    if value is None:
        value = model_cfg.get("max_context")
    if value is None or isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"model.max_context: must be a positive integer (the truncation length), got {value!r}")
    return value


def prompt(item: Item, model_cfg: Any, *, cfg: Any = None, tokenizer: Tokenizer | None = None) -> Prompt:
    """The first (or only) call: ``0shot.txt``, or ``0shot_cot.txt`` in CoT mode for non-thinking models."""
    use_cot = _cot_mode(model_cfg, cfg)
    text = fill(template(COT if use_cot else DIRECT), item)
    return _as_prompt(text, model_cfg, cfg, tokenizer)


def followup(item: Item, completion: str, model_cfg: Any, *, cfg: Any = None,
             tokenizer: Tokenizer | None = None) -> tuple[Prompt, int] | None:
    """The CoT answer call (``0shot_cot_ans.txt`` with the stripped CoT), or None when there is no second call.

    No second call: direct mode, thinking models, and an empty first output (``pred.py``: ``if output == '':
    continue``; the row then has an empty completion: left out under ``task.protocol=drop_empty``, unanswered under
    ``strict``). A whitespace-only CoT does get its answer call, with an empty ``$COT$``, as in ``pred.py``. The
    answer call gets ``task.answer_tokens`` new tokens (128 officially) and contains no document ("The text is too
    long and omitted here.").
    """
    if not _cot_mode(model_cfg, cfg):
        return None
    if not completion:
        log.warning("longbench_v2: item %s produced an empty CoT; no answer call (pred.py skips the item)",
                    item.item_id)
        return None
    cot = completion.strip()
    text = fill(template(COT_ANSWER), item, cot=cot)
    return _as_prompt(text, model_cfg, cfg, tokenizer), _answer_tokens(cfg)


def followup_bound(prompt_tokens: int, max_new_tokens: int, model_cfg: Any, *, cfg: Any = None,
                   tokenizer: Tokenizer | None = None) -> tuple[int, int] | None:
    """``(prompt tokens, new tokens)`` the CoT answer call can reach after a first call of at most ``prompt_tokens``
    prompt tokens (chat template included) and ``max_new_tokens`` new tokens; None without a second call.

    The bound is ``prompt_tokens + max_new_tokens + `` the answer template's tokens (``0shot_cot_ans.txt`` as
    stored, placeholders included, counted with ``tokenizer``; without one, its UTF-8 bytes, which no byte-level
    tokenizer's count exceeds). Why it holds: the answer call is that template with the question and choices (the
    first prompt holds them too, around the document), the stripped CoT (at most ``max_new_tokens`` tokens) and the
    same chat template; both calls are cut to ``max_len`` the same way. Text decoded and encoded again can in rare
    cases count a few more tokens than it was generated as: the placeholders counted here, and the first template's
    own text, leave that slack, and a second call past the bound is refused by the decode rows in one line rather
    than allocated again. The new tokens are ``task.answer_tokens``."""
    if not _cot_mode(model_cfg, cfg):
        return None
    text = template(COT_ANSWER)
    extra = len(tokenizer.encode(text)) if tokenizer is not None else len(text.encode("utf-8"))
    return int(prompt_tokens) + int(max_new_tokens) + extra, _answer_tokens(cfg)


def _answer_tokens(cfg: Any) -> int:
    """New tokens of the CoT answer call: ``task.answer_tokens`` (128 officially)."""
    return (cfg.get("answer_tokens") if cfg is not None else None) or 128


def _cot_mode(model_cfg: Any, cfg: Any) -> bool:
    cot = bool(cfg.get("cot", False)) if cfg is not None else False
    if cot and model_cfg.get("thinking", False):
        _warn_thinking_cot(str(model_cfg.get("name")))
        return False
    return cot


@functools.cache
def _warn_thinking_cot(model_name: str) -> None:
    log.warning("longbench_v2: %s is a thinking model: task.cot is ignored, one call with 0shot.txt and the "
                "answer read after </think>", model_name)


@functools.cache
def _warn_no_tokenizer() -> None:
    log.warning("longbench_v2: no tokenizer given, prompts are not truncated to max_len")


def _as_prompt(text: str, model_cfg: Any, cfg: Any, tokenizer: Tokenizer | None) -> Prompt:
    truncated = False
    if tokenizer is None:
        _warn_no_tokenizer()
    else:
        text, truncated = truncate_middle(text, tokenizer, max_len_for(model_cfg, cfg))
    messages = [{"role": "user", "content": text}]
    system = model_cfg.get("system_prompt")
    if system:  # the official runs have none; a model config that sets one gets it
        messages.insert(0, {"role": "system", "content": system})
    return Prompt(messages=messages, truncated=truncated)
