"""The geometry the per-token prompt scorers share (``knorm``, ``tova``, ``keydiff``, ``expected_attention``).

kvpress's ``ScorerPress`` template (kvpress 0.5.5 ``presses/scorer_press.py``, ``ScorerPress.compress``): a method
scores every prompt token of a layer, (B, H_kv, T), and the highest ``n_kept`` are kept per KV head. Here the
method only writes :meth:`PromptScorer.token_scores`; the budget (``prompt_budget``, or kvpress's ``ratio``), the
``sinks`` always kept, and the optional decode ring (``recent``, as SnapStream: a fixed footprint of
``budget + recent``) are this class's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from snapstream_core.methods.base import (
    TAG,
    CompressionMethod,
    PrefillView,
    Selection,
    check_positive,
    resolve_prompt_budget,
)


@dataclass(frozen=True)
class PromptScorer(CompressionMethod):
    """Knobs: ``prompt_budget`` KV entries kept per layer and KV head after prefill (default
    ``DEFAULT_PROMPT_BUDGET``), or instead ``ratio``, the share of each prompt dropped (kvpress's
    ``compression_ratio``: a prompt of T tokens keeps ``int(T * (1 - ratio))``); ``sinks`` first prompt tokens always
    kept; ``recent`` ring slots for decoded tokens (None: decoded tokens are appended, as kvpress; a number: the
    cache holds ``budget + recent`` entries whatever the length generated).

    With ``ratio``, a left-padded batch shares the budget of its padded length, so the runner asks for
    ``gen.batch_size=1`` with it (as :class:`~snapstream_core.methods.snapkv.SnapKV`)."""

    DEFAULT_PROMPT_BUDGET: ClassVar[int] = 1024
    # Last prompt tokens the scores always keep (TOVA keeps the token whose query it reads).
    tail: ClassVar[int] = 0
    tag_order: ClassVar[tuple[str, ...]] = ("prompt_budget", "recent", "sinks", "positions", "ratio")
    prompt_budget: int | None = None  # None: DEFAULT_PROMPT_BUDGET, unless ratio is given
    ratio: float | None = field(default=None, metadata={TAG: "cr"})  # None: the fixed prompt_budget
    sinks: int = 0
    recent: int | None = None  # None: decoded tokens are appended

    def __post_init__(self) -> None:
        super().__post_init__()
        resolve_prompt_budget(self, self.DEFAULT_PROMPT_BUDGET)
        check_positive("sinks", self.sinks, minimum=0)
        if self.prompt_budget is not None:
            check_positive("prompt_budget", self.prompt_budget, minimum=self.least_kept())
        if self.recent is not None:
            check_positive("recent", self.recent)

    def least_kept(self) -> int:
        """The smallest budget: the sinks, the tail the scores always keep, and one scored token."""
        return self.sinks + self.tail + 1

    def budget(self, prompt_len: int) -> int:
        """Prompt tokens kept of a prompt of ``prompt_len`` tokens (padded length): ``min(prompt_len,
        prompt_budget)``, or with ``ratio``, ``int(prompt_len * (1 - ratio))`` as kvpress's ``compute_n_kept``
        (kvpress 0.5.5 ``utils.py``), raised to :meth:`least_kept` and capped at ``prompt_len``."""
        if self.ratio is None:
            return min(prompt_len, self.prompt_budget)
        return min(prompt_len, max(int(prompt_len * (1 - self.ratio)), self.least_kept()))

    @property
    def ring(self) -> int | None:
        return self.recent

    @property
    def storage_kind(self) -> str:
        """Appended decoded tokens, or with ``recent`` a ring of them (the kept prompt frozen whole)."""
        return self.policy if self.recent is None else "ring"

    def kept(self, prompt_len: int) -> int:
        return self.budget(prompt_len)

    def needs_selection(self, prompt_len: int) -> bool:
        return self.budget(prompt_len) < prompt_len

    def query_rows(self, prompt_len: int) -> int:
        """None by default: a scorer that reads queries says how many."""
        return 0

    def select(self, view: PrefillView) -> Selection:
        n_keep = self.budget(view.keys.shape[2])
        scores = self.token_scores(view)
        if self.sinks:
            rank = view.key_valid.long().cumsum(-1)[:, None, :] - 1  # (B, 1, T): index among the row's real tokens
            scores = scores.masked_fill(view.key_valid[:, None, :] & (rank < self.sinks), float("inf"))
        scores = scores.masked_fill(~view.key_valid[:, None, :], float("-inf"))
        return Selection(scores, n_keep=n_keep, n_frozen=n_keep)

    def token_scores(self, view: PrefillView) -> torch.Tensor:
        """(B, H_kv, T) priority of every prompt token (higher is kept first); padding and sinks are set after."""
        raise NotImplementedError
