"""Pass-key retrieval in long real prose: the diagnostic where a 135M model shows what compression drops.

A random 7-digit key is stated once ("The special magic number is 4817263.") at a chosen depth of a haystack of Paul
Graham essays (RULER's filler; see ``tasks/data/needle/README.md``), and the model is asked for it at the end, in
RULER's wording. Items are deterministic given ``task.seed``. Scored by exact match of the first number in the answer.
Not one of the paper's benchmarks: it runs the whole pipeline on a CPU and isolates the prompt-selection question.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pandas as pd

from tasks.base import Prompt, bundled_path

PRIMARY_METRIC = "accuracy"
HAYSTACK = "needle/paul_graham_essays.json"
NEEDLE = "The special magic number is {key}."
TEMPLATE = (
    "Some special magic number is hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the number afterwards.\n{context}\n"
    "What is the special magic number mentioned in the provided text?"
)
ANSWER_PREFIX = "The special magic number mentioned in the provided text is"
NUMBER = re.compile(r"\d+")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class NeedleItem:
    item_id: str
    key: str
    depth: float  # 0 = start of the haystack, 1 = end
    offset: int  # where in the essays this item's haystack starts (characters)
    context_tokens: int

    @property
    def breakdown(self) -> dict[str, Any]:
        return {"depth": round(self.depth, 2), "context_tokens": self.context_tokens}


@lru_cache(maxsize=1)
def haystack_text() -> str:
    return json.loads(bundled_path(HAYSTACK).read_text(encoding="utf-8"))["text"]


def _depths(cfg) -> tuple[float, float]:
    return float(cfg.depth_lo), float(cfg.depth_hi)


def validate(cfg) -> None:
    if cfg.source != "bundled":
        raise ValueError(f"task.source: needle items are generated from the bundled haystack; got {cfg.source!r}")
    if not isinstance(cfg.context_tokens, int) or not 64 <= cfg.context_tokens <= 30000:
        raise ValueError(f"task.context_tokens: must be an integer in [64, 30000], got {cfg.context_tokens!r}")
    lo, hi = _depths(cfg)
    if not 0 <= lo <= hi <= 1:
        raise ValueError(f"task.depth_lo, task.depth_hi: need 0 <= lo <= hi <= 1, got {lo}, {hi}")
    if not isinstance(cfg.n_items, int) or cfg.n_items < 1:
        raise ValueError(f"task.n_items: must be a positive integer, got {cfg.n_items!r}")
    if cfg.limit is not None and (not isinstance(cfg.limit, int) or cfg.limit < 1):
        raise ValueError(f"task.limit: must be a positive integer or null, got {cfg.limit!r}")


def load(cfg) -> list[NeedleItem]:
    """``task.n_items`` items from ``task.seed``: key, depth (uniform in [depth_lo, depth_hi]) and haystack offset."""
    validate(cfg)
    rng = random.Random(cfg.seed)
    text = haystack_text()
    span = len(text) - 6 * cfg.context_tokens  # characters needed, with room to spare (about 4.3 per token)
    if span <= 0:
        raise ValueError(f"task.context_tokens: {cfg.context_tokens} tokens is more than the bundled haystack holds")
    lo, hi = _depths(cfg)
    items = []
    for i in range(cfg.n_items):
        key = str(rng.randrange(1_000_000, 10_000_000))
        depth = rng.uniform(lo, hi)
        offset = text.find(" ", rng.randrange(0, span)) + 1
        items.append(NeedleItem(f"needle-{cfg.seed}-{i}", key, depth, offset, cfg.context_tokens))
    return items[: cfg.limit] if cfg.limit else items


def haystack(item: NeedleItem, tokenizer=None) -> str:
    """The haystack of ``item`` with its needle inserted after ``round(depth * n_sentences)`` sentences, as RULER
    places its needles.

    With a tokenizer, the haystack is cut to exactly ``context_tokens`` tokens of essay text before the needle goes
    in (joining the sentences back normalises whitespace, a few percent fewer tokens); without one, to
    ``4 * context_tokens`` characters.
    """
    raw = haystack_text()[item.offset : item.offset + 6 * item.context_tokens]
    if tokenizer is not None:
        ids = tokenizer(raw, add_special_tokens=False)["input_ids"][: item.context_tokens]
        raw = tokenizer.decode(ids)
    else:
        raw = raw[: 4 * item.context_tokens]
    sentences = SENTENCE_END.split(raw)
    at = min(len(sentences), max(0, round(item.depth * len(sentences))))
    return " ".join([*sentences[:at], NEEDLE.format(key=item.key), *sentences[at:]])


def prompt(item: NeedleItem, model_cfg, *, cfg=None, tokenizer=None) -> Prompt:
    question = TEMPLATE.format(context=haystack(item, tokenizer))
    return Prompt([{"role": "user", "content": question}], prefill=ANSWER_PREFIX)


def score(item: NeedleItem, completion: str, *, cfg=None) -> dict[str, Any]:
    match = NUMBER.search(completion or "")
    prediction = match.group(0) if match else None
    return {"prediction": prediction, "answer": item.key, "correct": prediction == item.key}


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return str(int(value)) if isinstance(value, float) else str(value)


def key_prefix(prediction: Any, answer: Any) -> float:
    """Share (0..1) of the key's leading digits that the prediction reproduces: 1 for an exact answer, about 0.4
    for a model that found the needle but lost the tail of the number, 0 for one that never saw it."""
    pred, key = _text(prediction), _text(answer)
    return len(os.path.commonprefix([pred, key])) / len(key) if key else 0.0


def summarize(rows: pd.DataFrame, *, cfg=None) -> pd.DataFrame:
    """Accuracy (%) overall and by depth third; ``key_prefix`` (%): the mean share of leading key digits recovered."""
    correct = rows["correct"].astype(float) * 100
    prefix = pd.Series([key_prefix(p, a) for p, a in zip(rows["prediction"], rows["answer"])], index=rows.index)
    out = [
        {"metric": "accuracy", "group": "all", "value": correct.mean(), "n": len(rows)},
        {"metric": "key_prefix", "group": "all", "value": 100 * prefix.mean(), "n": len(rows)},
    ]
    thirds = pd.cut(rows["depth"].astype(float), [-0.01, 1 / 3, 2 / 3, 1.0], labels=["early", "middle", "late"])
    for name, part in correct.groupby(thirds, observed=True):
        out.append({"metric": "accuracy", "group": f"depth={name}", "value": part.mean(), "n": len(part)})
    return pd.DataFrame(out)
