"""One validator per ``gen.*`` key, and the generation settings they make (:class:`GenSettings`).

Each validator takes the resolved value and returns it checked, or raises ``ValueError`` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evals.record.numbers import number
from snapstream_core.sampling import SamplingConfig


def _int_at_least_one(key: str, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"gen.{key}: must be >= 1 (an integer: {what}), got {value!r}")
    return value


def max_new_tokens(value: Any) -> int:
    """``gen.max_new_tokens``: an integer."""
    return number(value, "gen.max_new_tokens", int)


def temperature(value: Any) -> float:
    """``gen.temperature``: a number (0: greedy)."""
    return number(value, "gen.temperature", float)


def top_p(value: Any) -> float:
    """``gen.top_p``: a number."""
    return number(value, "gen.top_p", float)


def top_k(value: Any) -> int:
    """``gen.top_k``: an integer."""
    return number(value, "gen.top_k", int)


def n_samples(value: Any) -> int:
    """``gen.n_samples``: an integer (samples per item)."""
    return number(value, "gen.n_samples", int)


def compile(value: Any) -> bool | str | None:  # noqa: A001 - the key's name
    """``gen.compile``: auto, true or false (``snapstream_core.engine.step.resolve_compile`` reads it)."""
    if value not in (None, "auto", True, False):
        raise ValueError(f"gen.compile: must be auto, true or false, got {value!r}")
    return value


def rows(value: Any) -> int | str:
    """``gen.rows``: ``auto`` or an integer >= 1 (decode rows held at once)."""
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"gen.rows: must be auto or an integer >= 1 (decode rows held at once), got {value!r}")
    return value


def batch_size(value: Any) -> int:
    """``gen.batch_size``: an integer >= 1 (prompts per left-padded batch)."""
    return _int_at_least_one("batch_size", value, "prompts per left-padded batch")


def seed(value: Any) -> int:
    """``gen.seed``: an integer."""
    return int(value)


@dataclass(frozen=True)
class GenSettings:
    """The checked ``gen.*`` settings of a run."""

    max_new_tokens: int
    n_samples: int
    batch_size: int
    seed: int
    rows: int | str  # auto or an integer
    compile: bool | str | None
    sampling: SamplingConfig

    @property
    def rows_request(self) -> int | None:
        """``gen.rows`` as a number; None for ``auto``."""
        return None if self.rows == "auto" else int(self.rows)


def gen_settings(gen: dict[str, Any]) -> GenSettings:
    """Every ``gen.*`` key checked (a missing optional key takes its default)."""
    sampling = SamplingConfig(
        max_new_tokens=max_new_tokens(gen["max_new_tokens"]),
        temperature=temperature(gen["temperature"]),
        top_p=top_p(gen["top_p"]),
        top_k=top_k(gen["top_k"]),
        n=n_samples(gen["n_samples"]),
    )
    return GenSettings(  # keyword arguments are checked left to right: the order the errors are reported in
        max_new_tokens=sampling.max_new_tokens,
        n_samples=sampling.n,
        compile=compile(gen.get("compile", "auto")),
        rows=rows(gen.get("rows", "auto")),
        batch_size=batch_size(gen["batch_size"]),
        seed=seed(gen["seed"]),
        sampling=sampling,
    )
