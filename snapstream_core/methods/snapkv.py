"""SnapKV: keep the prompt tokens the observation window attends to most; decoded tokens are appended.

Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation" (arXiv 2404.14469). Selection runs once,
at the end of each layer's prefill attention, only when the prompt is longer than ``prompt_budget``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

from snapstream_core.methods.base import (
    GQA_AGGS,
    POOLINGS,
    TAG,
    CompressionMethod,
    PrefillView,
    Selection,
    check_positive,
    resolve_prompt_budget,
)


@dataclass(frozen=True)
class SnapKV(CompressionMethod):
    """Knobs: ``prompt_budget`` KV entries kept per layer and KV head after prefill (window included; default
    ``DEFAULT_PROMPT_BUDGET``); or instead ``ratio``, the share of each prompt dropped (kvpress's
    ``compression_ratio``: a prompt of T tokens keeps ``int(T * (1 - ratio))``, never fewer than
    ``window + sinks + 1``; give one of the two); ``window`` observation queries; ``kernel`` pooling width (odd);
    ``pooling`` max|avg; ``gqa_agg`` mean|max; ``sinks`` first prompt tokens always kept (0 = pure SnapKV).

    With ``ratio``, a left-padded batch shares one budget, that of its padded length (the selection keeps one
    count per batch), so the runner asks for ``gen.batch_size=1`` with it."""

    method: ClassVar[str] = "snapkv"
    DEFAULT_PROMPT_BUDGET: ClassVar[int] = 1024
    # the run tag as it was before tags were generated (``ratio`` came last): run directories keep their names
    tag_order: ClassVar[tuple[str, ...]] = (
        "prompt_budget", "window", "kernel", "pooling", "gqa_agg", "sinks", "positions", "ratio"
    )
    prompt_budget: int | None = None  # None: DEFAULT_PROMPT_BUDGET, unless ratio is given
    window: int = 32
    kernel: int = 7
    pooling: str = field(default="max", metadata={TAG: ""})
    gqa_agg: str = field(default="mean", metadata={TAG: ""})
    sinks: int = 0
    ratio: float | None = field(default=None, metadata={TAG: "cr"})  # None: the fixed prompt_budget

    def __post_init__(self) -> None:
        super().__post_init__()
        resolve_prompt_budget(self, self.DEFAULT_PROMPT_BUDGET)
        if self.prompt_budget is not None:
            check_positive("prompt_budget", self.prompt_budget)
        check_positive("window", self.window)
        check_positive("kernel", self.kernel)
        check_positive("sinks", self.sinks, minimum=0)
        if self.kernel % 2 == 0:
            raise ValueError(f"compression.kernel: must be odd (pooling keeps the length), got {self.kernel}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"compression.pooling: must be one of {POOLINGS}, got {self.pooling!r}")
        if self.gqa_agg not in GQA_AGGS:
            raise ValueError(f"compression.gqa_agg: must be one of {GQA_AGGS}, got {self.gqa_agg!r}")
        if self.prompt_budget is not None and self.window + self.sinks >= self.prompt_budget:
            raise ValueError(
                f"compression.prompt_budget: must exceed window + sinks ({self.window} + {self.sinks}), "
                f"got {self.prompt_budget}"
            )

    @classmethod
    def from_bench(cls, knobs: Mapping[str, Any]) -> SnapKV:
        """Benchmarks time pure SnapKV (``sinks=0``, the default): the bench's ``sinks`` are the ring methods'."""
        return super().from_bench({k: v for k, v in knobs.items() if k != "sinks"})

    def budget(self, prompt_len: int) -> int:
        """Prompt tokens kept of a prompt of ``prompt_len`` tokens (padded length): ``min(prompt_len, prompt_budget)``,
        or with ``ratio``, ``int(prompt_len * (1 - ratio))`` as kvpress's ``ScorerPress.compress`` computes
        ``n_kept``, raised to ``window + sinks + 1`` (the least a fixed budget may be) and capped at ``prompt_len``."""
        if self.ratio is None:
            return min(prompt_len, self.prompt_budget)
        kept = max(int(prompt_len * (1 - self.ratio)), self.window + self.sinks + 1)
        return min(prompt_len, kept)

    def kept(self, prompt_len: int) -> int:
        return self.budget(prompt_len)

    def needs_selection(self, prompt_len: int) -> bool:
        return self.budget(prompt_len) < prompt_len

    def query_rows(self, prompt_len: int) -> int:
        """The observation window (none when the prompt fits the budget)."""
        return min(self.window, prompt_len) if self.needs_selection(prompt_len) else 0

    def select(self, view: PrefillView) -> Selection:
        n_keep = self.budget(view.keys.shape[2])
        return Selection(self.priorities(view), n_keep=n_keep, n_frozen=n_keep)

    def priorities(self, view: PrefillView) -> torch.Tensor:
        """(B, H_kv, T): SnapKV scores on the prefix, ``+inf`` on the window and the sinks, ``-inf`` on padding."""
        import torch

        from snapstream_core.selection import snapkv_scores

        T = view.keys.shape[2]
        prefix = snapkv_scores(
            view.query[:, :, -self.window :],
            view.keys,
            view.scaling,
            kernel=self.kernel,
            pooling=self.pooling,
            gqa_agg=self.gqa_agg,
            key_valid=view.key_valid,
        )
        window = torch.full_like(prefix[..., :1], float("inf")).expand(*prefix.shape[:2], self.window)
        scores = torch.cat([prefix, window], dim=-1)  # the window is always kept
        valid = view.key_valid[:, None, :]
        if self.sinks:
            rank = view.key_valid.long().cumsum(-1)[:, None, :] - 1
            scores = scores.masked_fill(valid & (rank < self.sinks), float("inf"))
        assert scores.shape[-1] == T
        return scores.masked_fill(~valid, float("-inf"))
