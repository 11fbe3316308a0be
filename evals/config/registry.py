"""The backends a config may name, with the capabilities a config check needs, known without importing them (so
checking a config never imports torch). :func:`evals.execute.backends.backend_class` imports the class and refuses
one whose attributes disagree with :data:`TRAITS`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evals.config.vllm_settings import vllm_settings
from snapstream_core.hints import did_you_mean

# name -> "module:Class", imported on first use (``hf`` imports torch and transformers).
BACKENDS: dict[str, str] = {
    "hf": "evals.execute.backends.hf:HFBackend",
    "replay": "evals.execute.backends.replay:ReplayBackend",
    "vllm": "evals.execute.backends.vllm:VLLMBackend",
}


@dataclass(frozen=True)
class Traits:
    """What a config check needs to know of a backend (see :class:`evals.execute.backends.base.Backend`)."""

    loads_weights: bool
    replays: bool
    engine: bool = False  # runs our decode engine: compression methods apply, the planner sizes its rows
    # (backend node, model node, compression method name, gen node) -> the backend's checked settings; raises
    # ValueError naming the field. None: the backend has no keys of its own to check.
    settings: Callable[[dict[str, Any], dict[str, Any], str, dict[str, Any]], Any] | None = None


# The traits the backend class must declare as class attributes (evals.execute.backends.backend_class checks them).
CLASS_TRAITS = ("loads_weights", "replays", "engine")

TRAITS: dict[str, Traits] = {
    "hf": Traits(loads_weights=True, replays=False, engine=True),
    "replay": Traits(loads_weights=False, replays=True),
    "vllm": Traits(loads_weights=True, replays=False, settings=vllm_settings),
}


def backend_traits(name: str) -> Traits:
    """``loads_weights`` and ``replays`` of the backend ``name``; an unknown name raises ``ValueError`` naming
    ``backend.name``."""
    if name not in BACKENDS:
        hint = did_you_mean(name, BACKENDS)
        raise ValueError(f"backend.name: must be one of {', '.join(BACKENDS)}, got {name!r}.{hint}")
    return TRAITS[name]
