"""Shared vocabulary of the tasks: the prompt record, thinking-model handling, and small loaders.

The task interface (DESIGN.md, Contract 2), as the runner calls it::

    load(cfg) -> list[Item]                      # Item: frozen dataclass with .item_id (str) and .breakdown (dict)
    validate(cfg) -> None                        # optional: raise ValueError naming the field, before any model loads
    prompt(item, model_cfg, *, cfg, tokenizer=None) -> Prompt | list[dict] | str
    score(item, completion, *, cfg=None) -> dict # at least prediction (None if nothing extracted), answer, correct
    score_many(pairs, *, cfg) -> list[dict]      # optional: grade many (item, completion) pairs at once
    summarize(rows: DataFrame, *, cfg=None) -> DataFrame  # columns: metric, group, value, n

``completion`` given to ``score`` is the answer part: for thinking models the runner passes the text after the last
``</think>`` (see :func:`split_thinking`); the raw text is kept in ``samples.jsonl``.
``model_cfg`` has at least ``name``, ``family`` (``llama3``, ``r1``, ``chatml``), ``thinking`` (bool) and
``max_context`` (tokens). ``summarize`` groups are ``"all"`` or ``"<field>=<value>"``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
R1_OPENING = "<think>\n"  # DeepSeek-R1 card: "enforce the model to initiate its response with <think>\n"


@dataclass(frozen=True)
class Prompt:
    """What a task asks the model. ``messages`` is a chat (list of ``{"role", "content"}``) or a raw string that is
    tokenised as is (no chat template). ``truncated`` says whether the task cut the item to fit the context.
    ``prefill`` starts the assistant's turn (RULER's answer prefix, lm-eval's ``gen_prefix``); the completion is what
    the model writes after it.

    Generation settings a task's protocol fixes per request (lm-eval's ``generation_kwargs``), over the run's
    ``gen.*``: ``stop`` strings end the completion, which is cut before the first of them (lm-eval's ``until``);
    ``gen`` holds ``max_new_tokens``, ``temperature``, ``top_p``, ``top_k`` (fields of ``SamplingConfig``)."""

    messages: list[dict[str, str]] | str
    truncated: bool = False
    prefill: str | None = None
    stop: tuple[str, ...] = ()
    gen: Mapping[str, Any] | None = None


def split_thinking(completion: str, thinking: bool) -> tuple[str, bool]:
    """Return ``(answer_text, thinking_closed)``.

    The answer is the text after the last ``</think>`` when there is one. For a thinking model whose completion never
    closes its thinking, the answer is empty and ``thinking_closed`` is False (the row is flagged, the item counts as
    unanswered). Non-thinking models keep their whole completion when no ``</think>`` appears.
    """
    head, sep, tail = completion.rpartition(THINK_CLOSE)
    if sep:
        return tail, True
    if thinking:
        return "", False
    return completion, True


def answer_part(task: Any, completion: str, thinking: bool, cfg: Any = None) -> tuple[str, bool]:
    """``(text the task grades, thinking_closed)``: the task's own ``answer_part`` when it has one (its protocol
    decides what a thinking block means), else :func:`split_thinking`."""
    own = getattr(task, "answer_part", None)
    if own is not None:
        return own(completion, thinking, cfg=cfg)
    return split_thinking(completion, thinking)


def decode_keeping_think_tags(tokenizer: Any, ids: list[int]) -> str:
    """``tokenizer.decode(ids, skip_special_tokens=True)``, except that ``<think>``/``</think>`` survive even when the
    tokenizer marks them special (tokenizer revisions differ; dropping them would make every thinking row look
    unclosed). Other special tokens (EOS, padding, end of turn) are dropped as before."""
    keep = {tid for tid in (_token_id(tokenizer, t) for t in (THINK_OPEN, THINK_CLOSE)) if tid is not None}
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    for tid, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(added, "special", False):
            special.add(int(tid))
    if not keep & special:
        return tokenizer.decode(ids, skip_special_tokens=True)
    drop = special - keep
    return tokenizer.decode([t for t in ids if t not in drop], skip_special_tokens=False)


def _token_id(tokenizer: Any, token: str) -> int | None:
    """The id of ``token`` when it is one token of the vocabulary, else None."""
    tid = tokenizer.convert_tokens_to_ids(token)
    return tid if isinstance(tid, int) and tid != getattr(tokenizer, "unk_token_id", None) else None


def r1_prefill(model_cfg: Any, tokenizer: Any) -> str | None:
    """``"<think>\\n"`` when an R1 model's chat template does not already open the reply with it, else None.

    The DeepSeek-R1 card asks that the reply start with ``<think>\\n``; the hub template does this since 2025-02,
    older revisions do not. Checked on the tokenizer in use (the rendered generation prompt), so any revision works.
    Only for ``model.family == "r1"`` with a tokenizer that has a chat template (replay needs none).
    """
    if str(model_cfg.get("family")) != "r1" or tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=True,
                                             tokenize=False)
    return None if rendered.endswith(R1_OPENING) else R1_OPENING


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Read a ``.jsonl``/``.json``/``.parquet`` file into a list of dicts.

    Raises ``ValueError`` naming the file (and the line, for JSONL) when it is missing or malformed.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"task.path: no such file: {path}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pandas as pd  # local: keep task imports light

        try:
            return pd.read_parquet(path).to_dict(orient="records")
        except Exception as exc:  # noqa: BLE001 - report any reader failure as a data error
            raise ValueError(f"task.path: cannot read parquet {path}: {exc}") from exc
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"task.path: malformed JSON in {path} (line {exc.lineno}): {exc.msg}") from exc
        if not isinstance(data, list):
            raise ValueError(f"task.path: {path} must hold a JSON list of records")
        return data
    return [record for _, record in iter_jsonl(path)]


def iter_jsonl(path: str | Path, field: str = "task.path") -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(line number, record)`` from a JSONL file, skipping blank and ``//`` comment lines.

    Raises ``ValueError`` prefixed by ``field`` (the config key that named the file) and naming the line
    when a line is not a JSON object.
    """
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip() or line.lstrip().startswith("//"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{field}: malformed JSON in {path} line {lineno}: {exc.msg}") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{field}: {path} line {lineno} is not a JSON object")
            yield lineno, record


def require_fields(record: dict[str, Any], fields: tuple[str, ...], where: str) -> None:
    """Raise ``ValueError`` naming ``where`` and the first missing field."""
    for name in fields:
        if name not in record:
            raise ValueError(f"{where}: missing field '{name}'")


def bundled_path(name: str) -> Path:
    """Path of a file shipped in ``tasks/data``."""
    return Path(__file__).resolve().parent / "data" / name
