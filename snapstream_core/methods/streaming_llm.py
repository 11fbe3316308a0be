"""StreamingLLM: attention sinks (the first tokens) plus a window of the most recent tokens, at every step.

Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks" (arXiv 2309.17453). The prompt is
prefilled with full attention, then cut to ``sinks`` + the last ``recent`` tokens; decoding writes into a ring of
``recent`` slots, so the footprint is fixed at ``sinks + recent``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from snapstream_core.methods.base import (
    CompressionMethod,
    PrefillView,
    Selection,
    check_positive,
    sink_and_tail_scores,
)


@dataclass(frozen=True)
class StreamingLLM(CompressionMethod):
    """Knobs: ``sinks`` first tokens always kept; ``recent`` ring slots for the latest tokens; ``prompt_budget``
    (optional) the whole footprint, which then sets ``recent = prompt_budget - sinks``; ``positions`` original (kept
    keys keep their RoPE phase) | in_cache (the paper's re-indexing). Give ``recent`` or ``prompt_budget``, not
    both (unless they agree): an explicit ``recent`` is never silently replaced."""

    method: ClassVar[str] = "streaming_llm"
    policy: ClassVar[str] = "ring"
    budget_cap: ClassVar[str] = "cache"  # sinks + recent hold the whole sequence, decoded tokens included
    DEFAULT_RECENT: ClassVar[int] = 1020
    tag_order: ClassVar[tuple[str, ...]] = ("prompt_budget", "sinks", "recent", "positions")
    budget_derived: ClassVar[tuple[str, ...]] = ("recent",)  # recent = prompt_budget - sinks
    sinks: int = 4
    recent: int | None = None  # None: DEFAULT_RECENT, or prompt_budget - sinks when prompt_budget is given
    prompt_budget: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("sinks", self.sinks, minimum=0)
        if self.prompt_budget is None:
            recent = self.DEFAULT_RECENT if self.recent is None else self.recent
            check_positive("recent", recent)
            object.__setattr__(self, "recent", recent)
            object.__setattr__(self, "prompt_budget", self.sinks + recent)
        else:
            check_positive("prompt_budget", self.prompt_budget, minimum=self.sinks + 1)
            derived = self.prompt_budget - self.sinks
            if self.recent is not None and self.recent != derived:
                raise ValueError(
                    f"compression.recent: {self.recent} conflicts with compression.prompt_budget={self.prompt_budget} "
                    f"(streaming_llm sets recent = prompt_budget - sinks = {derived}); give one of them"
                )
            object.__setattr__(self, "recent", derived)

    @classmethod
    def from_bench(cls, knobs: Mapping[str, Any]) -> StreamingLLM:
        """The same footprint as SnapStream's: ``sinks`` + a ring of ``prompt_budget + recent - sinks`` slots."""
        sinks = knobs.get("sinks", cls.sinks)
        return cls(sinks=sinks, recent=knobs["prompt_budget"] + knobs["recent"] - sinks)

    def check_context(self, positions: int, model: str = "the model") -> None:
        """The footprint ``sinks + recent`` (what ``prompt_budget`` sets) at most the model's ``positions``: one line
        naming both knobs, whichever of ``recent`` and ``prompt_budget`` was given."""
        footprint = self.sinks + self.recent
        if footprint > positions:
            raise ValueError(f"compression.prompt_budget: the footprint sinks + recent ({self.sinks} + {self.recent} = "
                             f"{footprint}) must be at most {positions:,}, the positions of {model}; lower "
                             "compression.recent or compression.prompt_budget")

    @property
    def ring(self) -> int:
        return self.recent

    def kept(self, prompt_len: int) -> int:
        """The sinks and the last prompt tokens, ``sinks + recent`` at most."""
        return min(prompt_len, self.sinks + self.recent)

    def needs_selection(self, prompt_len: int) -> bool:
        return True  # the split between sinks and ring is needed even when nothing is dropped

    def frozen(self, prompt_len: int) -> int:
        """The sinks; the rest of the kept prompt seeds the ring."""
        return min(self.sinks, prompt_len)

    def query_rows(self, prompt_len: int) -> int:
        """None: StreamingLLM scores by position."""
        return 0

    def select(self, view: PrefillView) -> Selection:
        T = view.keys.shape[2]
        n_keep = min(T, self.sinks + self.recent)
        scores = sink_and_tail_scores(view.key_valid, self.sinks, n_keep - min(self.sinks, n_keep))
        H_kv = view.keys.shape[1]
        scores = scores[:, None, :].expand(-1, H_kv, -1)
        return Selection(scores, n_keep=n_keep, n_frozen=min(self.sinks, n_keep))
