"""Backends turn prompts into completions: ``hf`` generates with transformers under the compression core,
``replay`` reads completions produced elsewhere.

The runner never tests a backend's name: it reads the capabilities every backend class declares (see
:class:`~evals.backends.base.Backend`): ``loads_weights``, ``replays``, ``needs_prompts``, ``supports_followup``,
``batch_size``.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from evals.backends.base import Backend, Request, Sample

# name -> "module:Class", imported on first use (``hf`` imports torch and transformers).
BACKENDS: dict[str, str] = {
    "hf": "evals.backends.hf:HFBackend",
    "replay": "evals.backends.replay:ReplayBackend",
}


def backend_class(name: str) -> type:
    """The backend class registered as ``name``; an unknown name raises ``ValueError`` naming ``backend.name``."""
    if name not in BACKENDS:
        close = difflib.get_close_matches(str(name), BACKENDS, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"backend.name: must be one of {', '.join(BACKENDS)}, got {name!r}.{hint}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_backend(cfg: Any, method, sampling, rows: int | None = None) -> Backend:
    """Build the backend named by ``cfg.backend.name``: a replaying backend from ``backend.path`` (and
    ``backend.partial``), a generating one from the model config, the method, the sampling settings,
    ``gen.compile``, ``gen.rows`` (``rows``, when given: the planner's choice on CUDA) and ``gen.seed``."""
    cls = backend_class(cfg.backend.name)
    if cls.replays:
        return cls(cfg.backend.path, partial=bool(cfg.backend.get("partial", False)))
    gen = cfg.gen
    rows = rows if rows is not None else gen.get("rows", "auto")
    return cls(cfg.model, method, sampling, compile=gen.get("compile", "auto"), rows=rows,
               seed=int(gen.get("seed", 0)))


__all__ = ["BACKENDS", "Backend", "Request", "Sample", "backend_class", "make_backend"]
