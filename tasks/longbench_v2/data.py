"""LongBench-v2 items: the record schema, the three sources (hub, local file, bundled sample) and the filters.

Schema of ``THUDM/LongBench-v2`` (split ``train``, 503 rows), as the official ``pred.py`` reads it::

    {"_id": "66f36490821e116aacb2cc22", "domain": "Single-Document QA", "sub_domain": "Financial",
     "difficulty": "easy", "length": "short", "question": "...", "choice_A": "...", "choice_B": "...",
     "choice_C": "...", "choice_D": "...", "answer": "A", "context": "<8k to 2M words>"}
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from snapstream_core.hints import did_you_mean
from tasks.base import read_records, refuse_surrogates, require_fields
from tasks.longbench_v2.protocols import protocol_name
from tasks.source import apply_limit, check_limit, local_file

log = logging.getLogger(__name__)

HUB_ID = "THUDM/LongBench-v2"
BUNDLED = "longbench_v2/sample.jsonl"
LETTERS = ("A", "B", "C", "D")
DIFFICULTIES = ("easy", "hard")
LENGTHS = ("short", "medium", "long")
DOMAINS = (
    "Single-Document QA",
    "Multi-Document QA",
    "Long In-context Learning",
    "Long-dialogue History Understanding",
    "Code Repository Understanding",
    "Long Structured Data Understanding",
)
FIELDS = ("_id", "domain", "sub_domain", "difficulty", "length", "question",
          "choice_A", "choice_B", "choice_C", "choice_D", "answer", "context")
# Filter knob -> (record field, allowed values).
FILTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "difficulty": ("difficulty", DIFFICULTIES),
    "length": ("length", LENGTHS),
    "domain": ("domain", DOMAINS),
}


@dataclass(frozen=True)
class Item:
    """One LongBench-v2 question: a long ``context``, a question with four choices, the gold letter."""

    item_id: str
    domain: str
    sub_domain: str
    difficulty: str
    length: str
    question: str
    choices: tuple[str, str, str, str]
    answer: str
    context: str

    @property
    def breakdown(self) -> dict[str, str]:
        """Columns of every result row: the official breakdowns (``difficulty``, ``length``) and the domains."""
        return {"difficulty": self.difficulty, "length": self.length, "domain": self.domain,
                "sub_domain": self.sub_domain}


def validate(cfg: Any) -> None:
    """Check the task knobs and that the data source is reachable; ``ValueError("task.<field>: ...")`` if not."""
    local_file(cfg, BUNDLED, default=None)  # source, and a path that exists with a known suffix
    check_limit(cfg)
    for knob in ("max_len", "cot_tokens", "answer_tokens"):
        value = cfg.get(knob)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"task.{knob}: must be a positive integer or null, got {value!r}")
    if not isinstance(cfg.get("cot", False), bool):
        raise ValueError(f"task.cot: must be true or false, got {cfg.get('cot')!r}")
    for knob in FILTERS:
        filter_values(cfg, knob)
    protocol_name(cfg)


def filter_values(cfg: Any, knob: str) -> tuple[str, ...] | None:
    """The values a filter knob keeps (a value or a list), checked against the official vocabulary."""
    raw = cfg.get(knob)
    if raw is None:
        return None
    values = (raw,) if isinstance(raw, str) else tuple(raw) if isinstance(raw, Iterable) else (raw,)
    allowed = FILTERS[knob][1]
    if not values:
        raise ValueError(f"task.{knob}: empty list; use null to keep every {knob}")
    for value in values:
        if value not in allowed:
            hint = did_you_mean(value, allowed)
            raise ValueError(f"task.{knob}: unknown value {value!r}; expected one of {', '.join(allowed)}.{hint}")
    return values


def load(cfg: Any) -> list[Item]:
    """Items of ``cfg.source`` in their stable (file/hub) order, filtered, then the first ``cfg.limit``."""
    validate(cfg)
    path = local_file(cfg, BUNDLED, default=None)
    if path is None:
        where, records = _hub_records(cfg)
    else:
        where, records = str(path), read_records(path)
    items = [to_item(record, f"{where} record {i}") for i, record in enumerate(records, 1)]
    refuse_duplicates(items, where)
    kept = select(items, cfg)
    log.info("longbench_v2: %d of %d items from %s", len(kept), len(items), where)
    return kept


def select(items: list[Item], cfg: Any) -> list[Item]:
    """Apply the ``difficulty``/``length``/``domain`` filters, then ``limit``; an empty selection is an error."""
    kept = items
    for knob, (field, _) in FILTERS.items():
        values = filter_values(cfg, knob)
        if values is not None:
            kept = [item for item in kept if getattr(item, field) in values]
    if not kept:
        filters = {k: cfg.get(k) for k in FILTERS if cfg.get(k) is not None}
        raise ValueError(f"task.difficulty/length/domain: the filters {filters} keep none of {len(items)} items")
    return apply_limit(kept, cfg)


def refuse_duplicates(items: list[Item], where: str) -> None:
    """Two questions under one ``_id`` would share every row key (``item_id``, ``sample_idx``): refused, as AIME and
    LiveCodeBench refuse theirs, naming both records."""
    first: dict[str, int] = {}
    for i, item in enumerate(items, 1):
        if item.item_id in first:
            raise ValueError(f"{where} record {i}: field '_id': duplicate id {item.item_id!r} "
                             f"(first at record {first[item.item_id]})")
        first[item.item_id] = i


def to_item(record: Mapping[str, Any], where: str) -> Item:
    """Check one record of the official schema and make it an :class:`Item`; ``where`` names it in errors."""
    require_fields(dict(record), FIELDS, where)
    for name in FIELDS:
        if not isinstance(record[name], str):
            raise ValueError(f"{where}: field '{name}' must be a string, got {type(record[name]).__name__}")
    refuse_surrogates({name: record[name] for name in FIELDS}, where)
    if not record["_id"].strip():
        raise ValueError(f"{where}: field '_id' is empty")
    where = f"{where} (_id={record['_id']})"
    checks = (("answer", LETTERS), ("difficulty", DIFFICULTIES), ("length", LENGTHS))
    for name, allowed in checks:
        if record[name] not in allowed:
            raise ValueError(f"{where}: field '{name}' must be one of {', '.join(allowed)}, got {record[name]!r}")
    return Item(
        item_id=record["_id"],
        domain=record["domain"],
        sub_domain=record["sub_domain"],
        difficulty=record["difficulty"],
        length=record["length"],
        question=record["question"],
        choices=(record["choice_A"], record["choice_B"], record["choice_C"], record["choice_D"]),
        answer=record["answer"],
        context=record["context"],
    )


def _hub_records(cfg: Any) -> tuple[str, Iterable[Mapping[str, Any]]]:
    """The hub split through ``datasets`` (cached by it; the same call as the official ``pred.py``); with the hub
    unreachable, the cached copy or one ``task.source`` error (:mod:`tasks.hub`)."""
    from tasks.hub import load_hub_dataset

    hub_id = cfg.get("hub_id") or HUB_ID
    split = cfg.get("split") or "train"
    return f"{hub_id}[{split}]", load_hub_dataset(hub_id, split, cfg.get("revision"))
