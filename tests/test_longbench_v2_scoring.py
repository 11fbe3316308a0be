"""LongBench-v2 scoring: the official extraction on realistic responses, per-item scores, and the summary table."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from omegaconf import OmegaConf

from tasks.longbench_v2 import extract_answer, load, score, summarize


def official_extract_answer(response: str):
    """pred.py's extract_answer, re-stated from the official source as the reference for ours."""
    response = response.replace("*", "")
    m = re.search(r"The correct answer is \(([A-D])\)", response)
    if m:
        return m.group(1)
    m = re.search(r"The correct answer is ([A-D])", response)
    return m.group(1) if m else None


# (response, the letter a careful reader of pred.py expects), written by hand.
BATTERY = [
    ("The correct answer is (B)", "B"),
    ("The correct answer is (B).", "B"),
    ('The correct answer is (C)".', "C"),
    ("The correct answer is D", "D"),
    ("The correct answer is D.", "D"),
    ("**The correct answer is (A)**", "A"),
    ("The correct answer is **(C)**", "C"),
    ("**The correct answer is** (D)", "D"),
    ("The correct answer is *B*", "B"),
    ("the correct answer is (B)", None),  # lower-case "the": case-sensitive
    ("The correct answer is (b)", None),  # lower-case letter
    ("The Correct Answer Is (A)", None),
    ("The correct answer is: (A)", None),  # a colon breaks both patterns
    ("The correct answer is (E)", None),
    ("The correct answer is (insert answer here)", None),  # the instruction echoed back
    ("The correct answer is  (A)", None),  # two spaces
    ("The correct answer is\n(A)", None),
    ("The correct answer is (A) or (B), probably (B).", "A"),  # first match wins
    ("The correct answer is (A). Wait, no: The correct answer is (C).", "A"),
    ("The correct answer is C, not (D). The correct answer is (D)", "D"),  # the parenthesised form is tried first
    ("The correct answer is Bob's favourite.", "B"),  # no word boundary, as in the official runs
    ("The correct answer is A Tale of Two Cities", "A"),
    ("The correct answer is (A Tale of Two Cities)", None),  # no ")" after the letter, and "(" is not a letter
    ("The correct answer is (AB)", None),
    ("I think it is (B).", None),
    ("Answer: B", None),
    ("(B)", None),
    ("", None),
    ("The answer is (C)", None),
    ("Based on the text, The correct answer is (B)", "B"),
    ("Let's reason. Option (A) ignores the toplevel; option (C) is about research.\n"
     "Therefore, The correct answer is (B).", "B"),
    ("Step 1: the author tried Interleaf after Florence.\nStep 2: Viaweb was sold in 1998.\n\n"
     "**Answer:** The correct answer is (C)", "C"),
    ("The correct answer is (D)\n\nExplanation: the essay lists correctness, importance, novelty and strength.", "D"),
    ("The correct answer is \\(B\\)", None),  # LaTeX-escaped parentheses
    ("The correct answer is [B]", None),
    ("The correct answer is (B) ", "B"),
    ("The correct answer is ( B )", None),
    ("</think>The correct answer is (A)", "A"),  # if a stray tag survives, it does not matter
    ("THE CORRECT ANSWER IS (A)", None),
    ("### Final answer\nThe correct answer is **C**.", "C"),
]


@pytest.mark.parametrize(("response", "expected"), BATTERY)
def test_extraction_matches_the_official_function_and_hand_labels(response, expected):
    assert official_extract_answer(response) == expected
    assert extract_answer(response) == expected


def test_battery_is_broad():
    assert len(BATTERY) >= 30
    assert sum(e is None for _, e in BATTERY) >= 10 and len({e for _, e in BATTERY if e}) == 4


@pytest.mark.parametrize("bad", [None, 3, b"The correct answer is (A)"])
def test_extraction_never_raises(bad):
    assert extract_answer(bad) is None


@pytest.fixture(scope="module")
def items():
    return load(OmegaConf.create({"source": "bundled", "cot": False}))


def test_score_fields(items):
    item = items[0]
    assert score(item, f"The correct answer is ({item.answer})") == {
        "prediction": item.answer, "answer": item.answer, "correct": True, "answered": True, "skipped": False,
        "protocol": "strict"}
    wrong = "A" if item.answer != "A" else "B"
    assert score(item, f"**The correct answer is {wrong}**")["correct"] is False
    assert score(item, "I cannot tell.") == {"prediction": None, "answer": item.answer, "correct": False,
                                             "answered": False, "skipped": False, "protocol": "strict"}
    assert score(item, "")["skipped"] is False  # strict (default): an empty answer is wrong, never dropped
    assert score(item, "", cfg={"protocol": "drop_empty"})["skipped"] is True  # the old behaviour, by name only


def rows_for(items, completion_of) -> pd.DataFrame:
    """Result rows as the runner writes them (score columns + breakdown columns)."""
    return pd.DataFrame([{"item_id": item.item_id, "sample_idx": 0, **item.breakdown,
                          **score(item, completion_of(item))} for item in items])


def value(summary: pd.DataFrame, metric: str, group: str) -> tuple[float, int]:
    row = summary[(summary.metric == metric) & (summary.group == group)]
    assert len(row) == 1, (metric, group)
    return float(row.value.iloc[0]), int(row.n.iloc[0])


def test_right_letters_score_100_and_wrong_letters_0(items):
    right = summarize(rows_for(items, lambda it: f"The correct answer is ({it.answer})"))
    wrong = summarize(rows_for(items, lambda it: f"The correct answer is ({'B' if it.answer == 'A' else 'A'})"))
    assert list(right.columns) == ["metric", "group", "value", "n"]
    assert set(right.value[~right.metric.isin(["answered", "skipped"])]) == {100.0}
    assert set(wrong.value[wrong.metric.isin(["accuracy", "compensated"])]) == {0.0}
    assert value(right, "accuracy", "all") == (100.0, 8)


def test_groups_follow_result_py_then_domains(items):
    summary = summarize(rows_for(items, lambda it: "no idea"))
    groups = list(summary[summary.metric == "accuracy"].group)
    assert groups == ["all", "difficulty=easy", "difficulty=hard", "length=short", "length=medium", "length=long",
                      "domain=Multi-Document QA", "domain=Single-Document QA"]
    assert value(summary, "accuracy", "all") == (0.0, 8)
    assert value(summary, "compensated", "all") == (25.0, 8)  # unanswered items earn 0.25
    assert value(summary, "answered", "length=long") == (0.0, 1)


def test_summary_values_by_hand():
    rows = pd.DataFrame([
        # item, sample, correct, prediction, difficulty, length, domain
        ("a", 0, True, "A", "easy", "short", "Single-Document QA"),
        ("b", 0, False, "C", "hard", "short", "Single-Document QA"),
        ("c", 0, False, None, "hard", "long", "Multi-Document QA"),
        ("d", 0, True, "D", "hard", "medium", "Multi-Document QA"),
        ("d", 1, False, None, "hard", "medium", "Multi-Document QA"),  # two samples: the item counts once
    ], columns=["item_id", "sample_idx", "correct", "prediction", "difficulty", "length", "domain"])
    summary = summarize(rows)
    # per item: a=1, b=0, c=0 (compensated .25), d=.5 (compensated (1+.25)/2=.625)
    assert value(summary, "accuracy", "all") == (pytest.approx(100 * 1.5 / 4), 4)
    assert value(summary, "compensated", "all") == (pytest.approx(100 * (1 + 0 + 0.25 + 0.625) / 4), 4)
    assert value(summary, "accuracy", "difficulty=hard") == (pytest.approx(100 * 0.5 / 3), 3)
    assert value(summary, "compensated", "domain=Multi-Document QA") == (pytest.approx(100 * 0.875 / 2), 2)
    assert value(summary, "answered", "all") == (pytest.approx(100 * 2.5 / 4), 4)
    assert "length=medium" in set(summary.group) and "difficulty=easy" in set(summary.group)


def test_summary_reads_rows_back_from_csv(tmp_path, items):
    rows = rows_for(items, lambda it: f"The correct answer is ({it.answer})" if it.difficulty == "easy" else "?")
    path = tmp_path / "samples.csv"
    rows.to_csv(path, index=False)
    again = summarize(pd.read_csv(path))
    assert value(again, "accuracy", "difficulty=easy") == (100.0, 4)
    assert value(again, "compensated", "difficulty=hard") == (25.0, 4)


def test_empty_rows_give_an_empty_table():
    empty = summarize(pd.DataFrame(columns=["item_id", "correct", "prediction"]))
    assert empty.empty and list(empty.columns) == ["metric", "group", "value", "n"]


def _r1_battery(items):
    """R1-style completions over the bundled items: closed thinking with an answer, unfinished thinking (with and
    without a letter inside it), an empty answer after </think>, a wrong letter."""
    out = []
    for i, item in enumerate(items):
        right, wrong = item.answer, "A" if item.answer != "A" else "B"
        kind = i % 5
        text = {
            0: f"<think>\nLet me read.\n</think>\n\nThe correct answer is ({right})",
            1: f"<think>\nThe correct answer is ({right}) I think, but let me check the",  # unfinished
            2: "<think>\nStill reading the document and",  # unfinished, no letter
            3: f"<think>\nThe correct answer is ({right})\n</think>\n\n",  # nothing after </think>
            4: f"<think>\nhmm\n</think>\nThe correct answer is ({wrong})",
        }[kind]
        out.append((item, text))
    return out


def _official_accuracy(pairs, whole_text: bool) -> float:
    """pred.py + result.py: every item written (no failed API call), extract_answer on the served text (the whole
    text without a reasoning parser; else the content after </think>, None -> no letter), judge = pred == answer,
    overall = 100 * sum(judge) / len(written)."""
    judged = []
    for item, text in pairs:
        served = text if whole_text else (text.rpartition("</think>")[2] if "</think>" in text else "")
        judged.append(official_extract_answer(served.strip()) == item.answer)
    return 100.0 * sum(judged) / len(judged)


@pytest.mark.parametrize("protocol,whole", [("strict", False), ("raw", True)])
def test_r1_replay_accuracy_equals_pred_and_result_over_all_rows(items, protocol, whole):
    """Every row stays in the denominator: strict = pred.py on the content after </think> with an unfinished answer
    wrong; raw = pred.py on the whole text. drop_empty (the old default) leaves rows out."""
    from tasks.longbench_v2 import answer_part

    cfg = {"protocol": protocol}
    pairs = _r1_battery(items)
    rows = []
    for item, text in pairs:
        part, closed = answer_part(text, True, cfg=cfg)
        rows.append({"item_id": item.item_id, "sample_idx": 0, **item.breakdown, **score(item, part, cfg=cfg),
                     "thinking_closed": closed})
    summary = summarize(pd.DataFrame(rows))
    assert value(summary, "accuracy", "all") == (pytest.approx(_official_accuracy(pairs, whole)), len(items))
    assert value(summary, "skipped", "all")[0] == 0.0
    dropped = pd.DataFrame([{"item_id": it.item_id, "sample_idx": 0, **it.breakdown,
                             **score(it, answer_part(t, True, cfg={"protocol": "drop_empty"})[0],
                                     cfg={"protocol": "drop_empty"})} for it, t in pairs])
    assert value(summarize(dropped), "accuracy", "all")[1] < len(items)
