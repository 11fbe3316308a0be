"""The default LiveCodeBench selection is the R1 card's: lcb_runner PR #71's command (release_latest of 2025-02-07,
i.e. release_v5; --start_date 2024-08-01 --end_date 2025-02-01), with lcb_runner's inclusive, midnight-bounded
comparison of each problem's contest date and time. The hub files cannot be fetched here: the problem count (279)
is checked against the pass@1 lcb_runner printed, not recounted (conf/task/livecodebench.yaml says so)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

from omegaconf import OmegaConf

import tasks.livecodebench as lcb
from tasks.base import iter_jsonl
from tasks.livecodebench.data import release_files

CONF = Path(__file__).resolve().parents[1] / "conf" / "task" / "livecodebench.yaml"
# lcb_runner PR #71 (2025-02-07): the command and what it printed for DeepSeek-R1-Distill-Qwen-1.5B, n=16.
PR71 = {"start_date": "2024-08-01", "end_date": "2025-02-01", "n": 16, "pass@1": 0.16308243727598568,
        "easy": 0.498134328358209, "medium": 0.12640449438202248}


def defaults():
    return OmegaConf.load(CONF)


def test_the_defaults_are_lcb_runner_pr71_command_on_release_v5():
    task = defaults()
    assert (task.start_date, task.end_date) == (PR71["start_date"], PR71["end_date"])
    # release_latest when PR #71 ran: release_v5 (added 2025-01-14); release_v6 came on 2025-04-21
    assert task.release == "release_v5" and release_files("release_v5") == release_files("release_v6")[:-1]


def problems_per_difficulty(pass_at_1: float, n: int, limit: int = 2000) -> list[int]:
    """The problem counts ``m`` for which ``pass_at_1`` is a mean of ``c/n`` over ``m`` problems (``c`` whole)."""
    exact = Fraction(pass_at_1).limit_denominator(10 ** 6)
    return [m for m in range(1, limit) if (exact * m * n).denominator == 1]


def test_the_documented_count_is_the_one_pr71_printed():
    """279 problems: PR #71's pass@1 is 728 correct samples of 279 x 16; its easy and medium figures give 67 and 89
    problems, the rest (123) hard: the yaml's plan count must agree."""
    total = problems_per_difficulty(PR71["pass@1"], PR71["n"])
    easy = problems_per_difficulty(PR71["easy"], PR71["n"])
    medium = problems_per_difficulty(PR71["medium"], PR71["n"])
    assert total[0] == 279 and easy[0] == 67 and medium[0] == 89
    # larger multiples would need more correct samples than the total has
    correct = round(PR71["pass@1"] * 279 * 16)
    assert round(PR71["easy"] * 2 * 67 * 16) + round(PR71["medium"] * 89 * 16) > correct
    assert round(PR71["easy"] * 67 * 16) + round(PR71["medium"] * 2 * 89 * 16) > correct
    assert defaults().plan.n_items == 279


def test_the_window_compares_date_and_time_as_lcb_runner(tmp_path):
    """lcb_runner keeps ``start <= contest_date <= end`` with both bounds at midnight and the contest's time of day:
    a problem on 2025-01-31 at 12:00 is in, one a second after 2025-02-01 00:00 is out."""
    sample = Path(lcb.__file__).resolve().parents[1] / "data" / "livecodebench" / "sample.jsonl"
    base = next(r for _, r in iter_jsonl(sample))
    dates = {"before": "2024-07-31T23:59:59", "first": "2024-08-01T00:00:00", "jan31": "2025-01-31T12:00:00",
             "last": "2025-02-01T00:00:00", "after": "2025-02-01T00:00:01"}
    path = tmp_path / "window.jsonl"
    path.write_text("".join(json.dumps({**base, "question_id": k, "contest_date": d}) + "\n" for k, d in dates.items()))
    task = OmegaConf.merge(defaults(), {"source": "path", "path": str(path)})
    assert [p.question_id for p in lcb.load(task)] == ["first", "jan31", "last"]
    paper_months = OmegaConf.merge(task, {"end_date": "2025-01-31"})  # the old default dropped 2025-01-31 12:00
    assert [p.question_id for p in lcb.load(paper_months)] == ["first"]
