"""AIME 2024 items: the record type, the two hub schemas, and loading from the hub, a local file or the bundle.

Sources (``task.source``):

- ``hub``: ``datasets.load_dataset(task.hub_id, split=task.split, revision=task.revision)``. The default
  ``HuggingFaceH4/aime_2024`` (30 rows, split ``train``: ``id, problem, solution, answer, url, year``) is what
  open-r1/lighteval evaluate R1 on; ``Maxwell-Jia/AIME_2024`` (``ID, Problem, Solution, Answer``, the set lm-eval's
  ``aime24`` task uses) is mapped field by field.
- ``path``: a local ``.jsonl``/``.json``/``.parquet`` in either schema (detected from its fields).
- ``bundled``: ``tasks/data/aime24/aime24_sample.jsonl``, eight real AIME 2024 problems in the H4 schema.

``item_id`` is the dataset's own id as a string (``"60"`` for H4, ``"2024-I-1"`` for Maxwell-Jia). Order is the
dataset's; ``task.limit`` takes the first N.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tasks.base import read_records
from tasks.source import apply_limit, cfg_get, check_limit, local_file, source_of

log = logging.getLogger(__name__)

BUNDLED = "aime24/aime24_sample.jsonl"
_URL_EXAM = re.compile(r"(\d{4})_AIME_(I{1,2})_Problems/Problem_(\d+)")
_ID_EXAM = re.compile(r"^(\d{4})-(I{1,2})-(\d+)$")


@dataclass(frozen=True)
class Item:
    """One AIME problem. ``answer`` is the gold as the dataset writes it ("025" stays "025"; grading compares
    integers). ``exam`` is ``"2024-I"``/``"2024-II"`` when the id or url says so, else None."""

    item_id: str
    problem: str
    answer: str
    solution: str = ""
    url: str | None = None
    exam: str | None = None
    number: int | None = None

    @property
    def breakdown(self) -> dict[str, Any]:
        """Columns added to every result row of this item."""
        return {"exam": self.exam}


@dataclass(frozen=True)
class Schema:
    """Field names of one published layout of the data set."""

    name: str
    id: str
    problem: str
    answer: str
    solution: str
    url: str | None


H4 = Schema("HuggingFaceH4/aime_2024", id="id", problem="problem", answer="answer", solution="solution", url="url")
MAXWELL_JIA = Schema(
    "Maxwell-Jia/AIME_2024", id="ID", problem="Problem", answer="Answer", solution="Solution", url=None
)


def detect_schema(record: Mapping[str, Any], where: str) -> Schema:
    """The schema whose problem field ``record`` has; ``ValueError`` naming ``where`` otherwise."""
    for schema in (H4, MAXWELL_JIA):
        if schema.problem in record:
            return schema
    fields = ", ".join(sorted(map(str, record))[:12]) or "none"
    raise ValueError(
        f"{where}: unknown AIME schema (fields: {fields}); expected those of {H4.name} (id, problem, answer) "
        f"or {MAXWELL_JIA.name} (ID, Problem, Answer)"
    )


def to_items(records: list[Mapping[str, Any]], source: str) -> list[Item]:
    """Turn raw records into items; ``ValueError`` names ``source``, the record index and the field."""
    if not records:
        raise ValueError(f"{source}: no records")
    schema = detect_schema(records[0], f"{source} record 0")
    items: list[Item] = []
    seen: set[str] = set()
    for index, record in enumerate(records):
        where = f"{source} record {index}"
        if not isinstance(record, Mapping):
            raise ValueError(f"{where}: not a JSON object")
        item = _to_item(record, schema, where)
        if item.item_id in seen:
            raise ValueError(f"{where}: field '{schema.id}': duplicate id {item.item_id!r}")
        seen.add(item.item_id)
        items.append(item)
    return items


def _to_item(record: Mapping[str, Any], schema: Schema, where: str) -> Item:
    for name in (schema.id, schema.problem, schema.answer):
        if name not in record:
            raise ValueError(f"{where}: missing field '{name}' ({schema.name} schema)")
    item_id = _scalar_text(record[schema.id], where, schema.id)
    problem = record[schema.problem]
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"{where}: field '{schema.problem}' must be a non-empty string")
    answer = _scalar_text(record[schema.answer], where, schema.answer)
    solution = record.get(schema.solution)
    url = record.get(schema.url) if schema.url else None
    exam, number = _exam_of(item_id, url if isinstance(url, str) else None)
    return Item(
        item_id=item_id,
        problem=problem,
        answer=answer,
        solution=solution if isinstance(solution, str) else "",
        url=url if isinstance(url, str) else None,
        exam=exam,
        number=number,
    )


def _scalar_text(value: Any, where: str, field: str) -> str:
    """An id or answer as text: 60 -> "60", 204.0 -> "204" (parquet integer columns with gaps become floats)."""
    if isinstance(value, float):
        if math.isnan(value):
            value = None
        elif value.is_integer():
            value = int(value)
    if value is None or isinstance(value, (bool, list, dict)):
        raise ValueError(f"{where}: field '{field}' must be a string or an integer, got {value!r}")
    text = str(value).strip()
    if not text:
        raise ValueError(f"{where}: field '{field}' is empty")
    return text


def _exam_of(item_id: str, url: str | None) -> tuple[str | None, int | None]:
    match = _ID_EXAM.match(item_id) or (_URL_EXAM.search(url) if url else None)
    if match is None:
        return None, None
    return f"{match.group(1)}-{match.group(2)}", int(match.group(3))


def load(cfg: Any) -> list[Item]:
    """Items from ``cfg.source`` (``hub`` | ``path`` | ``bundled``), the first ``cfg.limit`` of them."""
    items = _read(cfg)
    log.info("aime24: %d items from %s", len(items), source_of(cfg))
    return items


def _read(cfg: Any) -> list[Item]:
    """:func:`load` without its log line (the check before a run reads a local source too)."""
    source = source_of(cfg)
    path = local_file(cfg, BUNDLED)
    if path is not None:
        items = to_items(read_records(path), f"bundled file {path}" if source == "bundled" else f"task.path {path}")
    else:
        hub_id = cfg_get(cfg, "hub_id", H4.name)
        split = cfg_get(cfg, "split", "train")
        items = to_items(_hub_records(hub_id, split, cfg_get(cfg, "revision")), f"hub {hub_id} split {split}")
    return apply_limit(items, cfg)


def _hub_records(hub_id: str, split: str, revision: str | None) -> list[dict[str, Any]]:
    """The hub rows, read the way a user's machine reads them (``datasets.load_dataset``, cached by ``datasets``);
    with the hub unreachable, the cached copy or one ``task.source`` error (:mod:`tasks.hub`)."""
    from tasks.hub import load_hub_dataset

    return load_hub_dataset(hub_id, split, revision).to_list()


def validate(cfg: Any) -> None:
    """Check the data knobs, and that a local source reads cleanly, before any model is loaded."""
    check_limit(cfg)
    if source_of(cfg) == "hub":
        for knob, default in (("hub_id", H4.name), ("split", "train")):
            value = cfg_get(cfg, knob, default)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"task.{knob}: must be a non-empty string, got {value!r}")
        return
    _read(cfg)  # local sources are small: reading them is the check
