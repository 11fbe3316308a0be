"""Every registered method through the runner on ``tiny_llama`` (needle): the same completions at ``gen.rows=1``
and ``gen.rows=4``, and rows that record the tokens held beside the slots allocated. The cases are the registry's
(``tests/method_matrix.py``), so a new method is run by being registered. Slow (about 10 s a method on 2 cores):
``make test-all``; ``tests/test_policies.py`` checks the same on the engine directly in ``make test``."""

from __future__ import annotations

import json

import pytest

from evals.run import run
from tests.method_matrix import ALL, ALL_IDS
from tests.runner_utils import TINY, compose_cfg

NEEDLE = ["task=needle", "task.context_tokens=256", "task.n_items=2", "gen.max_new_tokens=8", "gen.n_samples=2",
          "gen.temperature=0.8", "gen.top_p=0.95"]


def overrides(method) -> list[str]:
    knobs = {k: v for k, v in method.knobs().items() if k != "method" and v is not None}
    return [f"compression={method.method}", *(f"compression.{k}={v}" for k, v in knobs.items())]


@pytest.mark.slow
@pytest.mark.parametrize("method", ALL, ids=ALL_IDS)
def test_needle_completions_do_not_depend_on_the_rows(tmp_path, method):
    got = {}
    for rows in (1, 4):
        out = tmp_path / f"rows{rows}"
        run(compose_cfg([*TINY, *NEEDLE, *overrides(method), f"gen.rows={rows}", f"hydra.run.dir={out}",
                         f"out_root={tmp_path}"]), out)
        lines = (out / "samples.jsonl").read_text().splitlines()
        got[rows] = {(r["item_id"], r["sample_idx"]): r for r in map(json.loads, lines)}
    assert len(got[1]) == 4
    assert {k: r["completion"] for k, r in got[1].items()} == {k: r["completion"] for k, r in got[4].items()}
    for r in got[4].values():
        T, G = r["prompt_tokens"], r["gen_tokens"]
        assert r["kv_slots_peak"] == method.slots(T, G) >= r["kv_tokens_peak"]
        assert r["kv_held_bytes_after_prefill"] <= r["kv_bytes_after_prefill"]
