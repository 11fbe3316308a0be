"""Backends turn prompts into completions: ``hf`` generates with transformers under the compression core,
``replay`` reads completions produced elsewhere."""

from __future__ import annotations

from typing import Any

from evals.backends.base import Backend, Request, Sample

BACKENDS = ("hf", "replay")


def make_backend(cfg: Any, method, sampling) -> Backend:
    """Build the backend named by ``cfg.backend.name`` (imports torch only for ``hf``)."""
    name = cfg.backend.name
    if name == "replay":
        from evals.backends.replay import ReplayBackend

        return ReplayBackend(cfg.backend.path)
    if name == "hf":
        from evals.backends.hf import HFBackend

        return HFBackend(cfg.model, method, sampling, compile=cfg.gen.get("compile", "auto"))
    raise ValueError(f"backend.name: must be one of {BACKENDS}, got {name!r}")


__all__ = ["BACKENDS", "Backend", "Request", "Sample", "make_backend"]
