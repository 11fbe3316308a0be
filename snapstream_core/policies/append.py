"""Append: the kept prompt, then every decoded token appended (``none``, ``snapkv``, the prompt scorers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snapstream_core.policies.base import StoragePolicy


@dataclass(frozen=True)
class AppendPolicy(StoragePolicy):
    """``kept`` prompt entries, then one entry per decoded token: ``kept + steps`` held."""

    name: ClassVar[str] = "append"

    def tokens_held(self, steps: int) -> int:
        return self.kept + steps

    def slots(self, max_new_tokens: int) -> int:
        """The kept prompt and the ``max_new_tokens - 1`` tokens fed back (the last token is never fed back)."""
        return self.kept + max(max_new_tokens - 1, 0)

    @classmethod
    def layer_class(cls) -> type:
        from snapstream_core.layer import AppendLayer

        return AppendLayer
