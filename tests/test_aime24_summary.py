"""AIME metrics against hand-computed values: pass@1, pass@k (unbiased), cons@n (majority vote), answered,
truncated, token means, per-exam groups, and the per-problem table."""

from __future__ import annotations

import random

import pandas as pd
import pytest

import tasks.aime24 as aime
from evals.analysis.summary import behaviour_rows
from tasks.aime24.data import Item

# Three problems x 8 samples. (sample_idx, prediction, correct, finish_reason)
A = [(0, "204", True), (1, "12", False), (2, "13", False), (3, "14", False),
     (4, None, False), (5, "204", True), (6, "15", False), (7, None, False)]  # c=2, vote 204 (2 votes): right
B = [(0, "7", False), (1, "7", False), (2, "7", False), (3, "8", False),
     (4, "9", False), (5, None, False), (6, "10", False), (7, "25", True)]  # c=1, vote 7: wrong
C = [(i, None, False) for i in range(8)]  # c=0, every sample cut before an answer: no vote
TABLE = {"A": ("2024-I", "204", A), "B": ("2024-I", "25", B), "C": ("2024-II", "110", C)}


def rows(shuffle: bool = True) -> pd.DataFrame:
    out = []
    for item_id, (exam, answer, samples) in TABLE.items():
        for idx, pred, correct in samples:
            out.append({"item_id": item_id, "sample_idx": idx, "prediction": pred, "answer": answer,
                        "correct": correct, "exam": exam, "finish_reason": "length" if pred is None else "stop",
                        "gen_tokens": 1000 * (idx + 1), "kv_tokens_peak": 512})
    if shuffle:  # rows arrive in any order (resume, parallel workers): votes must follow sample_idx
        random.Random(1).shuffle(out)
    return pd.DataFrame(out)


def metric(summary: pd.DataFrame, name: str, group: str = "all") -> tuple[float, int]:
    row = summary[(summary.metric == name) & (summary.group == group)]
    assert len(row) == 1, f"{name}/{group}: {len(row)} rows"
    return row.value.item(), row.n.item()


def test_pass_at_k_and_cons_against_hand_computed_values():
    s = aime.summarize(rows())
    assert list(s.columns) == ["metric", "group", "value", "n"]
    # pass@1 = mean_i c_i/n = (2/8 + 1/8 + 0) / 3 = 1/8
    assert metric(s, "pass@1") == (pytest.approx(1 / 8), 3)
    # pass@4 = mean_i 1 - C(n-c,4)/C(n,4): A 1 - C(6,4)/C(8,4) = 1 - 15/70 = 11/14; B 1 - C(7,4)/C(8,4) = 1/2; C 0
    assert metric(s, "pass@4") == (pytest.approx((11 / 14 + 1 / 2 + 0) / 3), 3)
    # pass@8 = A 1, B 1, C 0
    assert metric(s, "pass@8") == (pytest.approx(2 / 3), 3)
    assert set(s.metric) >= {"pass@1", "pass@4", "pass@8"} and "pass@16" not in set(s.metric)
    # cons@8: A votes 204 (right), B votes 7 (wrong), C has no vote (wrong) -> 1/3
    assert metric(s, "cons@8") == (pytest.approx(1 / 3), 3)
    # answered: 24 rows, 2 + 1 + 8 = 11 without a prediction
    assert metric(s, "answered") == (pytest.approx(13 / 24), 24)
    # lengths and cut generations are the shared behaviour rows of evals.analysis.summary, not AIME's own
    assert not {"truncated", "gen_tokens_mean", "kv_tokens_peak_mean"} & set(s.metric)
    shared = pd.DataFrame(behaviour_rows(rows()))
    # the same 11 rows were cut by length
    assert metric(shared, "share_gen_truncated") == (pytest.approx(100 * 11 / 24), 24)
    assert metric(shared, "mean_gen_tokens") == (pytest.approx(4500.0), 24)
    assert metric(shared, "mean_kv_tokens_peak") == (512.0, 24)
    assert metric(s, "pass@1", "exam=2024-I") == (pytest.approx(3 / 16), 2)
    assert metric(s, "pass@1", "exam=2024-II") == (0.0, 1)


def test_majority_ties_go_to_the_answer_of_the_lowest_sample_idx():
    tie = pd.DataFrame([
        {"item_id": "T", "sample_idx": 3, "prediction": "12", "correct": False},
        {"item_id": "T", "sample_idx": 1, "prediction": "204", "correct": True},
        {"item_id": "T", "sample_idx": 0, "prediction": None, "correct": False},
        {"item_id": "T", "sample_idx": 2, "prediction": "12", "correct": False},
        {"item_id": "T", "sample_idx": 4, "prediction": "204", "correct": True},
    ])
    problem = aime.per_problem(tie).iloc[0]
    assert (problem.majority, problem.majority_votes, problem.cons_correct) == ("204", 2, True)
    assert "cons@5" in set(aime.summarize(tie).metric)


def test_equivalent_forms_vote_together():
    """Votes are over canonical predictions: \\boxed{025}, \\boxed{\\dfrac{50}{2}} and \\boxed{25} are one answer."""
    item = Item(item_id="67", problem="p", answer="025")
    completions = ["\\boxed{025}", "\\boxed{\\dfrac{50}{2}}", "\\boxed{24}", "\\boxed{24}", "\\boxed{25}"]
    scored = [{"item_id": "67", "sample_idx": i, **aime.score(item, c)} for i, c in enumerate(completions)]
    problem = aime.per_problem(pd.DataFrame(scored)).iloc[0]
    assert (problem.majority, problem.majority_votes, problem.cons_correct, problem.n_correct) == ("25", 3, True, 3)


def test_per_problem_table():
    assert list(aime.per_problem(rows(shuffle=False)).item_id) == ["A", "B", "C"]  # order of first appearance
    table = aime.per_problem(rows())
    a = table.set_index("item_id").loc["A"]
    assert (a.exam, a.answer, a.n, a.n_correct, a["pass@1"], a.majority, a.gen_truncated) == (
        "2024-I", "204", 8, 2, 0.25, "204", 2)
    assert a.answered == pytest.approx(6 / 8) and a.gen_tokens_mean == pytest.approx(4500.0)
    assert pd.isna(table.set_index("item_id").loc["C"].majority)


def test_single_sample_runs_report_no_cons_and_only_pass_at_1():
    greedy = rows(shuffle=False)
    greedy = greedy[greedy.sample_idx == 0]
    s = aime.summarize(greedy)
    assert metric(s, "pass@1") == (pytest.approx(1 / 3), 3)
    assert not any(m.startswith("cons@") or (m.startswith("pass@") and m != "pass@1") for m in s.metric)


def test_rows_read_back_from_csv_keep_their_votes(tmp_path):
    """A samples.csv round trip turns "204" into 204 and None into NaN; the summary must not change."""
    path = tmp_path / "samples.csv"
    rows().to_csv(path, index=False)
    assert aime.summarize(pd.read_csv(path)).equals(aime.summarize(rows()))


def test_empty_rows_and_missing_optional_columns():
    assert aime.summarize(pd.DataFrame()).empty
    bare = rows()[["item_id", "prediction", "correct"]]
    assert {"pass@1", "answered"} <= set(aime.summarize(bare).metric)
    with pytest.raises(ValueError, match="correct"):
        aime.summarize(rows().drop(columns=["correct"]))
