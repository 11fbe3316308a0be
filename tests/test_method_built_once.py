"""A run builds its compression method once: :func:`evals.config.spec.check` builds it, and planning, execution and
recording read the spec's instance (issue 45). The headline printed at the end is the analysis side: it reads the
finished run directory (``meta.json``'s knobs), as the report does, and is left out of the count."""

from __future__ import annotations

from collections import Counter

import evals.execute.runmeta as runmeta
from evals.run import run
from snapstream_core.methods.base import CompressionMethod
from tests.runner_utils import TINY, compose_cfg

SNAP = ["compression=snapstream", "compression.prompt_budget=64", "compression.recent=8", "compression.window=16"]


def test_a_run_builds_its_method_once(tmp_path, monkeypatch):
    built: Counter[str] = Counter()
    post_init = CompressionMethod.__post_init__

    def counting(self) -> None:
        built[type(self).__name__] += 1
        post_init(self)

    monkeypatch.setenv("SNAPSTREAM_SAMPLE_CACHE", "off")
    cfg = compose_cfg([*TINY, "task=needle", "task.limit=2", "task.context_tokens=256", "gen.max_new_tokens=4",
                       *SNAP, f"out_root={tmp_path}"])
    monkeypatch.setattr(runmeta, "show_headline", lambda run_dir: None)
    monkeypatch.setattr(CompressionMethod, "__post_init__", counting)  # from here on: the run
    run_dir = run(cfg)
    assert (run_dir / "summary.csv").is_file()
    assert built["SnapStream"] == 1, built
