"""The backends a config may name, with the capabilities a config check needs, known without importing them (so
checking a config never imports torch). :func:`evals.execute.backends.backend_class` imports the class and refuses
one whose attributes disagree with :data:`TRAITS`."""

from __future__ import annotations

from dataclasses import dataclass

from snapstream_core.hints import did_you_mean

# name -> "module:Class", imported on first use (``hf`` imports torch and transformers).
BACKENDS: dict[str, str] = {
    "hf": "evals.execute.backends.hf:HFBackend",
    "replay": "evals.execute.backends.replay:ReplayBackend",
}


@dataclass(frozen=True)
class Traits:
    """What a config check needs to know of a backend (see :class:`evals.execute.backends.base.Backend`)."""

    loads_weights: bool
    replays: bool


TRAITS: dict[str, Traits] = {
    "hf": Traits(loads_weights=True, replays=False),
    "replay": Traits(loads_weights=False, replays=True),
}


def backend_traits(name: str) -> Traits:
    """``loads_weights`` and ``replays`` of the backend ``name``; an unknown name raises ``ValueError`` naming
    ``backend.name``."""
    if name not in BACKENDS:
        hint = did_you_mean(name, BACKENDS)
        raise ValueError(f"backend.name: must be one of {', '.join(BACKENDS)}, got {name!r}.{hint}")
    return TRAITS[name]
