"""Pass-key retrieval in long real prose: the diagnostic where a 135M model shows what compression drops.

A random key is stated once ("The special magic number is 4817263.") at a chosen depth of a haystack of Paul
Graham essays (RULER's filler; see ``tasks/data/needle/README.md``), and the model is asked for it at the end, in
RULER's wording. Items are deterministic given ``task.seed``. Scored by exact match (case-insensitive) of the first
key-shaped span of the answer, and by ``key_prefix``, the share of the key's leading characters recovered.

Key kinds (``task.key_kind``), RULER's three (``scripts/data/synthetic/niah.py``: ``numbers``, ``words``,
``uuids``):

- ``number``: 7 digits (RULER's niah_single_2). A tokenizer that splits digits one by one (SmolLM2) makes it a
  7-token key, and SnapKV's pooling kernel of 7 keeps only its first digits: it measures tokenisation as much as
  retrieval;
- ``words``: ``adjective-noun`` from ``tasks/data/needle/words.json`` (as RULER's wonderwords keys), a few tokens for
  any tokenizer, but harder to tell from the prose around it (SmolLM2 with the full cache: 2 of 6 at 1.5k tokens);
- ``uuid``: a UUID4-shaped hex string (RULER's uuids), the hardest: about 25 tokens.

The default comes from the model (``model.needle_key_kind``, else ``number``), so that each model gets the kind it
can retrieve with the full cache; ``key_prefix`` then tells a cut key from a missed one.

Not one of the paper's benchmarks: it runs the whole pipeline on a CPU and isolates the prompt-selection question.
"""

from __future__ import annotations

import json
import os
import random
import re
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tasks import terms
from tasks.base import Prompt, bundled_path
from tasks.lazy import LazyModule

pd = LazyModule("pandas")  # imported at first use: the planner imports task modules, not pandas

PRIMARY_METRIC = "accuracy"
GENERATED = True  # items are made from a seed and the bundled haystack: no fixed benchmark size (evals.power)
REPORT_METRICS = ("accuracy", "key_prefix")  # evals.report: exact match beside the share of the key recovered
HAYSTACK = "needle/paul_graham_essays.json"
WORDS = "needle/words.json"
PROMPT_FILES = (HAYSTACK, WORDS)  # read to build items and prompts: in the run identity by content
NEEDLE = "The special magic {noun} is {key}."
TEMPLATE = (
    "Some special magic {noun} is hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {noun} afterwards.\n{context}\n"
    "What is the special magic {noun} mentioned in the provided text?"
)
ANSWER_PREFIX = "The special magic {noun} mentioned in the provided text is"
KEY_KINDS = ("number", "words", "uuid")
NOUNS = {"number": "number", "words": "word", "uuid": "uuid"}
KEY_PATTERNS = {  # the first key-shaped span of an answer; a partial key still counts for key_prefix
    "number": re.compile(r"\d+"),
    "words": re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*"),
    "uuid": re.compile(r"[0-9A-Fa-f]+(?:-[0-9A-Fa-f]+)*"),
}
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class NeedleItem:
    item_id: str
    key: str
    depth: float  # 0 = start of the haystack, 1 = end
    offset: int  # where in the essays this item's haystack starts (characters)
    context_tokens: int
    key_kind: str = "number"

    @property
    def noun(self) -> str:
        return NOUNS[self.key_kind]

    @property
    def breakdown(self) -> dict[str, Any]:
        return {"depth": round(self.depth, 2), "context_tokens": self.context_tokens, "key_kind": self.key_kind}


def _bundled_json(name: str) -> dict[str, Any]:
    """A bundled JSON file (under ``tasks.base.data_root``: the checkout's or a copy), read again only when its path,
    size or mtime changed: what the run identity hashed is what builds the prompts, in a long-lived process too."""
    path = bundled_path(name)
    st = os.stat(path)
    return _read_json(str(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=4)
def _read_json(path: str, size: int, mtime_ns: int) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def haystack_text() -> str:
    return _bundled_json(HAYSTACK)["text"]


def word_lists() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(adjectives, nouns)`` for ``words`` keys."""
    data = _bundled_json(WORDS)
    return tuple(data["adjectives"]), tuple(data["nouns"])


def make_key(kind: str, rng: random.Random) -> str:
    """One key of ``kind``: ``4817263``, ``quiet-harbor`` or ``1b4e28ba-2fa1-4d2e-8c3a-0f9e7d6c5b4a``."""
    if kind == "number":
        return str(rng.randrange(1_000_000, 10_000_000))
    if kind == "words":
        adjectives, nouns = word_lists()
        return f"{rng.choice(adjectives)}-{rng.choice(nouns)}"
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


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
    if cfg.get("key_kind", "number") not in KEY_KINDS:
        raise ValueError(f"task.key_kind: must be one of {', '.join(KEY_KINDS)}, got {cfg.get('key_kind')!r}")


def load(cfg) -> list[NeedleItem]:
    """``task.n_items`` items from ``task.seed``: key, depth (uniform in [depth_lo, depth_hi]) and haystack offset."""
    validate(cfg)
    rng = random.Random(cfg.seed)
    text = haystack_text()
    span = len(text) - 6 * cfg.context_tokens  # characters needed, with room to spare (about 4.3 per token)
    if span <= 0:
        raise ValueError(f"task.context_tokens: {cfg.context_tokens} tokens is more than the bundled haystack holds")
    lo, hi = _depths(cfg)
    kind = cfg.get("key_kind", "number")
    items = []
    for i in range(cfg.n_items):
        key = make_key(kind, rng)
        depth = rng.uniform(lo, hi)
        offset = text.find(" ", rng.randrange(0, span)) + 1
        items.append(NeedleItem(f"needle-{cfg.seed}-{i}", key, depth, offset, cfg.context_tokens, kind))
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
    return " ".join([*sentences[:at], NEEDLE.format(noun=item.noun, key=item.key), *sentences[at:]])


def prompt(item: NeedleItem, model_cfg, *, cfg=None, tokenizer=None) -> Prompt:
    question = TEMPLATE.format(noun=item.noun, context=haystack(item, tokenizer))
    return Prompt([{"role": "user", "content": question}], prefill=ANSWER_PREFIX.format(noun=item.noun))


def score(item: NeedleItem, completion: str, *, cfg=None) -> dict[str, Any]:
    """Exact match of the first span of the answer shaped like a key of the item's kind (lower-cased)."""
    match = KEY_PATTERNS[item.key_kind].search(completion or "")
    prediction = match.group(0).lower() if match else None
    return {"prediction": prediction, "answer": item.key, "correct": prediction == item.key.lower()}


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return str(int(value)) if isinstance(value, float) else str(value)


def key_prefix(prediction: Any, answer: Any) -> float:
    """Share (0..1) of the key's leading characters that the prediction reproduces (case-insensitive): 1 for an
    exact answer, about 0.4 for a model that found the needle but lost the tail of the number, 0 for one that never
    saw it."""
    pred, key = _text(prediction).lower(), _text(answer).lower()
    return len(os.path.commonprefix([pred, key])) / len(key) if key else 0.0


def summarize(rows: pd.DataFrame, *, cfg=None) -> pd.DataFrame:
    """Accuracy (%) overall and by depth third; ``key_prefix`` (%): the mean share of leading key characters
    recovered."""
    correct = rows["correct"].astype(float) * 100
    prefix = pd.Series([key_prefix(p, a) for p, a in zip(rows["prediction"], rows["answer"])], index=rows.index)
    out = [
        {"metric": "accuracy", "group": "all", "value": correct.mean(), "n": len(rows)},
        {"metric": "key_prefix", "group": "all", "value": 100 * prefix.mean(), "n": len(rows)},
    ]
    for name, part in correct.groupby(_thirds(rows), observed=True):
        out.append({"metric": "accuracy", "group": f"depth={name}", "value": part.mean(), "n": len(part)})
    return pd.DataFrame(out)


def item_terms(rows: pd.DataFrame, *, cfg=None) -> pd.DataFrame:
    """Every metric of :func:`summarize` as a row mean (:func:`tasks.terms.row_mean`): the bootstrap's input."""
    correct = rows["correct"].astype(float) * 100
    prefix = pd.Series([100 * key_prefix(p, a) for p, a in zip(rows["prediction"], rows["answer"])], index=rows.index)
    ids = rows["item_id"]
    parts = [terms.row_mean(ids, correct, "accuracy"), terms.row_mean(ids, prefix, "key_prefix")]
    thirds = _thirds(rows)
    for name in thirds.dropna().unique():
        part = thirds == name
        parts.append(terms.row_mean(ids[part], correct[part], "accuracy", f"depth={name}"))
    return terms.concat(parts)


def _thirds(rows: pd.DataFrame) -> pd.Series:
    """The depth third of each row: ``early``, ``middle``, ``late`` (NaN without a depth)."""
    return pd.cut(rows["depth"].astype(float), [-0.01, 1 / 3, 2 / 3, 1.0], labels=["early", "middle", "late"])
