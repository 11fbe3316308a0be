"""No compression: the full cache, as plain ``DynamicCache`` (the reference every method is compared with)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snapstream_core.methods.base import CompressionMethod


@dataclass(frozen=True)
class NoCompression(CompressionMethod):
    """Keep every token. Outputs are token-identical to generation with a plain ``DynamicCache``."""

    method: ClassVar[str] = "none"
    budget_cap: ClassVar[str] = "none"

    @property
    def compresses(self) -> bool:
        return False

    def kept(self, prompt_len: int) -> int:
        return prompt_len

    def needs_selection(self, prompt_len: int) -> bool:
        return False

    def knobs(self) -> dict:
        return {"method": self.method, **self.kv_knobs()}  # no knob but the storage applies to the full cache
