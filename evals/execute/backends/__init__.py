"""Backends turn prompts into completions: ``hf`` generates with transformers under the compression core,
``replay`` reads completions produced elsewhere, and :class:`~.cached.CachingBackend` puts the sample cache in front
of either.

A new backend subclasses :class:`~.base.Backend` (defaults for every optional capability) and is registered by name
in :data:`evals.config.registry.BACKENDS` and ``TRAITS``. The runner never tests a backend's name: it reads the
capabilities every backend class declares (``loads_weights``, ``replays``, ``needs_prompts``, ``supports_followup``,
``streams``, ``batch_size``).
"""

from __future__ import annotations

import importlib

from evals.config.registry import BACKENDS, CLASS_TRAITS, TRAITS, backend_traits
from evals.config.spec import RunSpec
from evals.execute.backends.base import Backend, Request, Sample


def backend_class(name: str) -> type[Backend]:
    """The backend class registered as ``name``; an unknown name raises ``ValueError`` naming ``backend.name``."""
    backend_traits(name)  # refuses an unknown name
    module, attr = BACKENDS[name].split(":")
    cls = getattr(importlib.import_module(module), attr)
    for trait in CLASS_TRAITS:
        value = getattr(TRAITS[name], trait)
        if getattr(cls, trait) != value:
            got = getattr(cls, trait)
            raise TypeError(f"evals.config.registry.TRAITS[{name!r}]: {trait}={value}, but {attr}.{trait}={got}")
    return cls


def make_backend(spec: RunSpec, rows: int | None, requested: int | str, planned_bytes: int | None = None) -> Backend:
    """Build the run's backend: a replaying backend from ``backend.path`` (and ``backend.partial``), a generating one
    from the model settings, the method, the sampling settings, ``gen.compile``, ``rows`` (the decode rows of
    :func:`evals.plan.job.choose_rows`, with their peak ``planned_bytes`` on CUDA, which an out-of-memory error
    quotes; ``requested``: ``gen.rows`` as ``meta.json`` reports it) and ``gen.seed``."""
    cls = backend_class(spec.backend.name)
    if cls.replays:
        return cls(spec.backend.path, partial=spec.backend.partial)
    if not cls.engine:  # a backend with its own engine (vLLM): its checked settings instead of our engine's knobs
        return cls(spec.model, spec.backend.settings, spec.sampling)
    extra = {} if planned_bytes is None else {"planned_bytes": planned_bytes}
    return cls(spec.model, spec.method, spec.sampling, compile=spec.gen.compile, rows=rows,
               requested=requested, seed=spec.gen.seed, **extra)


__all__ = ["BACKENDS", "Backend", "Request", "Sample", "TRAITS", "backend_class", "make_backend"]
