"""Helpers for runner tests: compose the Hydra config in-process, run a subprocess of the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from evals.config.conf_store import register_methods

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
TINY = ["model=tiny_llama"]


def compose_cfg(overrides: list[str], return_hydra_config: bool = False):
    register_methods()  # as evals/run.py does before composing
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=return_hydra_config)


def cli(args: list[str], timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m evals.run ARGS`` from the repository root."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "evals.run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def plan_cfg(cfg):
    """The run plan of a composed config: :func:`evals.config.spec.check`, then :func:`evals.execute.prepare.plan`
    (items, identity, run directory; no weights)."""
    from evals.config.spec import check
    from evals.execute.prepare import plan

    return plan(check(cfg))
