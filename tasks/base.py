"""Shared vocabulary of the tasks: the prompt record, thinking-model handling, and small loaders.

The task interface itself (required functions and optional hooks) is :mod:`tasks.protocol`; the data knobs every
task shares (``task.source``, ``task.path``, ``task.limit``) are read by :mod:`tasks.source`.

``model_cfg`` has at least ``name``, ``family`` (``llama3``, ``r1``, ``chatml``), ``thinking`` (bool) and
``max_context`` (tokens). ``summarize`` groups are ``"all"`` or ``"<field>=<value>"``.
"""

from __future__ import annotations

import json
import os
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


def split_thinking(completion: str, thinking: bool, *, whole: bool = False) -> tuple[str, bool]:
    """Return ``(answer_text, thinking_closed)``: the one split at ``</think>`` every task uses.

    The answer is the text after the last ``</think>`` when there is one. For a thinking model whose completion never
    closes its thinking, the answer is empty and ``thinking_closed`` is False (the row is flagged, the item counts as
    unanswered). Non-thinking models keep their whole completion when no ``</think>`` appears.

    ``whole=True`` (protocols that grade the whole output: lighteval's AIME, lcb_runner, LongBench-v2 ``raw``): the
    answer text is the completion itself; ``thinking_closed`` is computed the same way.
    """
    head, sep, tail = completion.rpartition(THINK_CLOSE)
    closed = bool(sep) or not thinking
    if whole:
        return completion, closed
    if sep:
        return tail, True
    return ("", False) if thinking else (completion, True)


MAX_JSON_DEPTH = 64  # the deepest real record: a task line (1) holding a functional test value (a few levels)


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests lists/dicts deeper than ``limit`` (iterative: never recurses)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def loads_bounded(text: str | bytes, where: str, max_depth: int = MAX_JSON_DEPTH,
                  max_objects: int | None = None) -> Any:
    """``json.loads`` for untrusted text: raises ``ValueError`` starting with ``where`` for malformed JSON, invalid
    UTF-8 (with the byte offset), nesting deeper than ``max_depth`` (never a ``RecursionError``) or, when
    ``max_objects`` is given, more JSON objects than that (the parse stops at the first one over)."""
    hook = None
    if max_objects is not None:
        count = [0]

        def hook(obj: dict) -> dict:
            count[0] += 1
            if count[0] > max_objects:
                raise _TooMany
            return obj
    try:
        value = json.loads(text, object_hook=hook)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: invalid UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested deeper than {max_depth} levels") from None
    except _TooMany:
        raise ValueError(f"{where}: more than {max_objects} JSON objects") from None
    if too_deep(value, max_depth):
        raise ValueError(f"{where}: JSON nested deeper than {max_depth} levels")
    return value


class _TooMany(Exception):
    """Raised inside ``json.loads`` to stop a parse at an object budget."""


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


def read_records(path: str | Path, field: str = "task.path") -> list[dict[str, Any]]:
    """Read a ``.jsonl``/``.json``/``.parquet`` file into a list of dicts.

    Raises ``ValueError`` naming the file (and the line, for JSONL) when it is missing or malformed, not UTF-8, or
    nested deeper than :data:`MAX_JSON_DEPTH`.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{field}: no such file: {path}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pandas as pd  # local: keep task imports light

        try:
            return pd.read_parquet(path).to_dict(orient="records")
        except Exception as exc:  # noqa: BLE001 - report any reader failure as a data error
            raise ValueError(f"{field}: cannot read parquet {path}: {exc}") from exc
    if suffix == ".json":
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise ValueError(f"{field}: {path} line {line}: invalid UTF-8 at byte {exc.start}") from None
        try:
            data = loads_bounded(text, f"{field}: {path}")
        except ValueError as exc:
            lineno = getattr(exc.__context__, "lineno", None)
            raise ValueError(f"{exc}" + (f" (line {lineno})" if lineno else "")) from None
        if not isinstance(data, list):
            raise ValueError(f"{field}: {path} must hold a JSON list of records")
        for i, record in enumerate(data):
            if isinstance(record, Mapping):
                refuse_surrogates(record, f"{field}: {path} record {i}")
        return data
    records = []
    for lineno, record in iter_jsonl(path, field):
        refuse_surrogates(record, f"{field}: {path} line {lineno}")
        records.append(record)
    return records


def refuse_surrogates(record: Mapping[str, Any], where: str) -> None:
    """Raise ``ValueError`` naming ``where`` and the field when a string of ``record`` (at any depth) holds a lone
    UTF-16 surrogate (JSON's ``"\\ud800"``): not text, and UTF-8 cannot hold it, so no prompt, row or file could.
    Task data is refused before any work (a replayed completion is repaired instead: :mod:`evals.record.text`)."""
    for name, value in record.items():
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                if item.isascii():  # O(1): no surrogate in it
                    continue
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValueError(f"{where}: field '{name}' holds a lone surrogate "
                                     f"(U+{ord(item[exc.start]):04X} at character {exc.start}), which is not "
                                     "text; fix the data") from None
            elif isinstance(item, Mapping):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)


MAX_LINE_BYTES = 256 << 20  # a JSONL line (a task record, a row): far above a 2M-word LongBench-v2 context


def iter_jsonl(path: str | Path, field: str = "task.path",
               max_line_bytes: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(line number, record)`` from a JSONL file, skipping blank and ``//`` comment lines.

    Raises ``ValueError`` prefixed by ``field`` (the config key that named the file) and naming the file and line
    when a line is longer than ``max_line_bytes`` (default :data:`MAX_LINE_BYTES`; at most that much is read before
    the error), not valid UTF-8, not a JSON object, or nested deeper than :data:`MAX_JSON_DEPTH`.
    """
    path = Path(path)
    limit = MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    with path.open("rb") as fh:
        lineno = 0
        while raw := _read_line(fh, limit):
            lineno += 1
            where = f"{field}: {path} line {lineno}"
            if raw is TOO_LONG:
                raise ValueError(f"{where}: longer than {_size(limit)} (a line of this file is at most that)")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where}: invalid UTF-8 at byte {exc.start} of the line") from None
            if not line.strip() or line.lstrip().startswith("//"):
                continue
            record = loads_bounded(line, where)
            if not isinstance(record, dict):
                raise ValueError(f"{where}: not a JSON object")
            yield lineno, record


READ_CHUNK = 1 << 20


TOO_LONG = b"too long"  # returned by identity: no line read from a file is this object


def _read_line(fh: Any, limit: int) -> bytes | bytearray:
    """The next line of a binary file (empty at the end), read 1 MiB at a time into one growing buffer, so that
    memory stays near the line's length; :data:`TOO_LONG` as soon as it passes ``limit`` bytes."""
    want = min(READ_CHUNK, limit + 1)
    piece = fh.readline(want)
    if piece.endswith(b"\n") or len(piece) < want:  # the usual case: a whole line (or the end) in one read
        return piece
    buf = bytearray(piece)
    while True:
        if len(buf) > limit:
            return TOO_LONG
        piece = fh.readline(min(READ_CHUNK, limit + 1 - len(buf)))
        buf += piece
        if not piece or piece.endswith(b"\n"):
            return buf


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def require_fields(record: dict[str, Any], fields: tuple[str, ...], where: str) -> None:
    """Raise ``ValueError`` naming ``where`` and the first missing field."""
    for name in fields:
        if name not in record:
            raise ValueError(f"{where}: missing field '{name}'")


DATA_ENV = "SNAPSTREAM_TASK_DATA"


def data_root() -> Path:
    """The folder of the bundled task data: ``tasks/data``, or a copy of it named by ``$SNAPSTREAM_TASK_DATA`` (a
    seam for trying edited prompt files without touching the checkout; what the tasks read there is hashed into the
    run identity by content, wherever it lies: :func:`evals.execute.code_identity.prompt_data`)."""
    value = os.environ.get(DATA_ENV, "").strip()
    if not value:
        return Path(__file__).resolve().parent / "data"
    root = Path(value).expanduser()
    if not root.is_dir():
        raise ValueError(f"${DATA_ENV}: not a folder: {value!r} (a copy of tasks/data, or unset)")
    return root.resolve()


def bundled_path(name: str) -> Path:
    """Path of a file shipped in ``tasks/data`` (under :func:`data_root`)."""
    return data_root() / name
