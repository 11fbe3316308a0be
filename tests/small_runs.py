"""The smallest runs the refusal and run-directory tests start from: a two-item needle task on ``tiny_llama``, the
replay file that completes it without a model, and the paper job the planner sizes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runner_utils import TINY

NEEDLE = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "gen.max_new_tokens=4"]
IDS = ("needle-0-0", "needle-0-1")  # the item ids of NEEDLE
PAPER_JOB = ["model=llama31_8b_instruct", "task=aime24", "compression=snapstream"]


def replay_args(tmp_path: Path, completions=("x", "y"), name="c.jsonl") -> list[str]:
    """Overrides of NEEDLE replayed from ``tmp_path / name``: one completion per item, in the order of IDS."""
    path = tmp_path / name
    path.write_text("".join(json.dumps({"item_id": i, "completion": c}) + "\n" for i, c in zip(IDS, completions)))
    return [*NEEDLE, "backend=replay", f"backend.path={path}"]
