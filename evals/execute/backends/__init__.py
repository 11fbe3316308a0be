"""Backends turn prompts into completions: ``hf`` generates with transformers under the compression core,
``replay`` reads completions produced elsewhere.

The runner never tests a backend's name: it reads the capabilities every backend class declares (see
:class:`~evals.execute.backends.base.Backend`): ``loads_weights``, ``replays``, ``needs_prompts``,
``supports_followup``,
``batch_size``.
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

from evals.execute.backends.base import Backend, Request, Sample
from snapstream_core.hints import did_you_mean

# name -> "module:Class", imported on first use (``hf`` imports torch and transformers).
BACKENDS: dict[str, str] = {
    "hf": "evals.execute.backends.hf:HFBackend",
    "replay": "evals.execute.backends.replay:ReplayBackend",
}
# The capabilities a config check needs, known without importing the backend (so checking a config never imports
# torch); :func:`backend_class` refuses a class whose attributes disagree. A backend left out here is imported.
TRAITS: dict[str, dict[str, bool]] = {
    "hf": {"loads_weights": True, "replays": False},
    "replay": {"loads_weights": False, "replays": True},
}


def backend_traits(name: str) -> SimpleNamespace:
    """``loads_weights`` and ``replays`` of the backend ``name`` (:data:`TRAITS`, else from its class)."""
    if name in TRAITS:
        return SimpleNamespace(**TRAITS[name])
    cls = backend_class(name)
    return SimpleNamespace(loads_weights=cls.loads_weights, replays=cls.replays)


def backend_class(name: str) -> type:
    """The backend class registered as ``name``; an unknown name raises ``ValueError`` naming ``backend.name``."""
    if name not in BACKENDS:
        hint = did_you_mean(name, BACKENDS)
        raise ValueError(f"backend.name: must be one of {', '.join(BACKENDS)}, got {name!r}.{hint}")
    module, attr = BACKENDS[name].split(":")
    cls = getattr(importlib.import_module(module), attr)
    for trait, value in TRAITS.get(name, {}).items():
        if getattr(cls, trait) != value:
            got = getattr(cls, trait)
            raise TypeError(f"evals.execute.backends.TRAITS[{name!r}]: {trait}={value}, but {attr}.{trait}={got}")
    return cls


def make_backend(cfg: Any, method, sampling, rows: int | None = None, planned_bytes: int | None = None) -> Backend:
    """Build the backend named by ``cfg.backend.name``: a replaying backend from ``backend.path`` (and
    ``backend.partial``), a generating one from the model config, the method, the sampling settings,
    ``gen.compile``, ``gen.rows`` (``rows``, when given: the planner's choice on CUDA, with its peak
    ``planned_bytes``, which an out-of-memory error quotes) and ``gen.seed``."""
    cls = backend_class(cfg.backend.name)
    if cls.replays:
        return cls(cfg.backend.path, partial=bool(cfg.backend.get("partial", False)))
    gen = cfg.gen
    rows = rows if rows is not None else gen.get("rows", "auto")
    extra = {} if planned_bytes is None else {"planned_bytes": planned_bytes}
    return cls(cfg.model, method, sampling, compile=gen.get("compile", "auto"), rows=rows,
               seed=int(gen.get("seed", 0)), **extra)


__all__ = ["BACKENDS", "Backend", "Request", "Sample", "TRAITS", "backend_class", "backend_traits", "make_backend"]
