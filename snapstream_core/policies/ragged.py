"""Ragged: per-layer or per-head budgets (AdaKV's head-wise top-k, PyramidKV's budgets decreasing with depth). Each
head keeps its own count of prompt tokens (``Selection.counts``), stored padded: every layer and head of a row is
allocated the largest count (one slot schedule for the whole row, as the engine needs), the padding slots not valid.
So the tokens held (the counts: ``kept``, a mean over layers and heads) and the bytes allocated (``cap`` padded slots)
differ; decoded tokens are appended to every head alike.

kvpress's AdaKV masks the dropped entries and frees nothing (it allocates the whole prompt); here the padding is
what is allocated beyond the tokens held, and the planner plans it (``slots``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snapstream_core.policies.base import StoragePolicy


@dataclass(frozen=True)
class RaggedPolicy(StoragePolicy):
    """``kept``: prompt entries held per layer and KV head after prefill, the mean over layers and heads (a ragged
    method's budget); ``cap``: the most any head of any layer may keep, the slots every head is padded to (at least
    ``kept``, at most the prompt)."""

    name: ClassVar[str] = "ragged"
    cap: int = 0

    def __post_init__(self) -> None:
        if not self.kept <= self.cap <= max(self.prompt_len, self.kept):
            raise ValueError(f"RaggedPolicy.cap: must be in [kept, prompt_len] = [{self.kept}, {self.prompt_len}], "
                             f"got {self.cap}")

    @property
    def prefill_slots(self) -> int:
        """Every head padded to the largest count."""
        return self.cap

    def tokens_held(self, steps: int) -> int:
        return self.kept + steps

    def slots(self, max_new_tokens: int) -> int:
        """The padded prompt and the ``max_new_tokens - 1`` tokens fed back."""
        return self.cap + max(max_new_tokens - 1, 0)

    def padding(self, max_new_tokens: int) -> int:
        """Slots allocated per layer and KV head beyond the tokens held at the end (``cap - kept``)."""
        return self.slots(max_new_tokens) - self.tokens_held(max(max_new_tokens - 1, 0))

    @classmethod
    def layer_class(cls) -> type:
        from snapstream_core.layer import RaggedLayer

        return RaggedLayer
