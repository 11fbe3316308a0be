"""AdaKV: head-wise budgets, the kept tokens of a layer chosen by one top-k over all its KV heads and prompt tokens.

Feng et al. 2024, "Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget Allocation for Efficient LLM Inference"
(arXiv 2407.11550). Selection as kvpress 0.5.5 ``presses/adakv_press.py``, ``AdaKVPress.compress``, on any prompt
scorer (``compression.scorer``; kvpress wraps any ``ScorerPress``): with ``n`` the budget per KV head (the
scorer's ``prompt_budget``, or kvpress's ``compute_n_kept`` of ``ratio``) and ``H_kv`` KV heads,

1. the scorer's priorities (B, H_kv, T) (what it always keeps, SnapKV's window or the sinks, at ``+inf``);
2. the safeguard: each head's ``n_safe = int(n * alpha_safeguard)`` best (at least 1 when ``alpha_safeguard > 0``)
   are raised to ``+inf`` (kvpress: the dtype's maximum);
3. of the ``H_kv * T`` (head, token) pairs of each row, the ``H_kv * (T - n)`` lowest are dropped, by one
   ``torch.topk`` over the flattened heads as kvpress ranks them; a head keeps the rest.

The layer keeps ``H_kv * n`` tokens, a count per head. kvpress masks the dropped keys in attention and frees nothing;
here a head's kept tokens are stored first, in position order, and its other slots are padding, not valid (the
``ragged`` storage policy). Without the model's head count the most one head may keep is the whole prompt, so the
slots allocated are the prompt's (:meth:`AdaKV.kept`) while the tokens held are ``n`` per head on average.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from snapstream_core.methods.base import (
    TAG,
    CompressionMethod,
    PrefillView,
    Selection,
    resolve_prompt_budget,
)

# Knobs AdaKV passes to its scorer when the scorer has them (None: the scorer's default); each is refused for a
# scorer that does not read it.
SCORER_KNOBS = ("window", "kernel", "pooling", "gqa_agg", "sinks", "n_future")


def prompt_scorers() -> dict[str, type[CompressionMethod]]:
    """The methods AdaKV can rank with: SnapKV and every prompt scorer (kvpress's ``ScorerPress``es), by name: the
    subclasses of :class:`PromptScorer` (found by the class tree, not the registry, which imports this module)."""
    from snapstream_core.methods.scorer import PromptScorer
    from snapstream_core.methods.snapkv import SnapKV

    found: dict[str, type[CompressionMethod]] = {SnapKV.method: SnapKV}
    todo = [PromptScorer]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.setdefault(sub.method, sub)
            todo.append(sub)
    return found


def refuse_padding(method: str, key_valid) -> None:
    """A ragged method's budgets are a function of its row's length (PyramidKV's per-layer budgets, AdaKV's top-k
    over the layer's heads and tokens): a left-padded row would be cut at its padded length's budget, unlike the
    same prompt alone. Refused in one line (the engine and the runner prefill one prompt at a time)."""
    if not bool(key_valid.all()):
        raise ValueError(f"compression.method: {method} budgets each row by its own length and cannot select in a "
                         "left-padded batch; decode one prompt at a time (the engine does)")


@dataclass(frozen=True)
class AdaKV(CompressionMethod):
    """Knobs: ``scorer`` (a prompt scorer: ``snapkv``, ``knorm``, ``tova``, ``keydiff``, ``expected_attention``);
    ``prompt_budget`` the *mean* kept per layer and KV head (default the scorer's), or instead ``ratio`` (kvpress's
    ``compression_ratio``); ``alpha_safeguard`` the share of the budget every head keeps by its own scores (kvpress's
    default 0.2); and the scorer's own knobs (``window``, ``kernel``, ``pooling``, ``gqa_agg``, ``sinks``,
    ``n_future``: None takes the scorer's default; one the scorer lacks is refused). Decoded tokens are appended."""

    method: ClassVar[str] = "adakv"
    policy: ClassVar[str] = "ragged"  # a count per KV head: storage padded, the slots past a head's count not valid
    tag_order: ClassVar[tuple[str, ...]] = ("scorer", "prompt_budget", "alpha_safeguard", "positions", "ratio")
    scorer: str = field(default="snapkv", metadata={TAG: ""})
    prompt_budget: int | None = None  # None: the scorer's default, unless ratio is given
    ratio: float | None = field(default=None, metadata={TAG: "cr"})
    alpha_safeguard: float = field(default=0.2, metadata={TAG: "as"})
    window: int | None = field(default=None, metadata={TAG: None})
    kernel: int | None = field(default=None, metadata={TAG: None})
    pooling: str | None = field(default=None, metadata={TAG: None})
    gqa_agg: str | None = field(default=None, metadata={TAG: None})
    sinks: int | None = field(default=None, metadata={TAG: None})
    n_future: int | None = field(default=None, metadata={TAG: None})

    def __post_init__(self) -> None:
        super().__post_init__()
        scorers = prompt_scorers()
        if self.scorer not in scorers:
            raise ValueError(f"compression.scorer: adakv ranks tokens with a prompt scorer, one of "
                             f"{', '.join(scorers)}; got {self.scorer!r}")
        a = self.alpha_safeguard
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= a <= 1:
            raise ValueError(f"compression.alpha_safeguard: must be a number in [0, 1] (the share of the budget "
                             f"each head keeps by its own scores), got {a!r}")
        if self.positions != "original":
            raise ValueError("compression.positions: adakv keeps a different count per KV head; only 'original' "
                             f"positions are supported, got {self.positions!r}")
        reads = set(scorers[self.scorer].field_names())
        for name in SCORER_KNOBS:
            if getattr(self, name) is not None and name not in reads:
                own = ", ".join(n for n in SCORER_KNOBS if n in reads) or "none"
                raise ValueError(f"compression.{name}: adakv's scorer {self.scorer} does not read it (its knobs "
                                 f"here: {own})")
        resolve_prompt_budget(self, scorers[self.scorer].DEFAULT_PROMPT_BUDGET)
        self.scorer_method()  # the scorer checks its knobs (budget against window + sinks, pooling, ...)

    @classmethod
    def from_bench(cls, knobs: Mapping[str, Any]) -> AdaKV:
        """On SnapKV as the bench times it (``sinks=0``): the bench's ``sinks`` are the ring methods'."""
        return super().from_bench({k: v for k, v in knobs.items() if k != "sinks"})

    def scorer_method(self) -> CompressionMethod:
        """The scorer at this method's budget and its knobs (no decode ring: decoded tokens are appended)."""
        cls = prompt_scorers()[self.scorer]
        given = {n: getattr(self, n) for n in SCORER_KNOBS if getattr(self, n) is not None}
        return cls(prompt_budget=self.prompt_budget, ratio=self.ratio, **given)

    def knobs(self) -> dict[str, Any]:
        """The method, scorer, budget and safeguard, then the scorer's knobs at their effective values (those it
        lacks left out), then ``positions``."""
        inner = self.scorer_method().knobs()
        out = {"method": self.method}
        for f in fields(self):
            if f.name in SCORER_KNOBS:
                if f.name in inner:
                    out[f.name] = inner[f.name]
            elif f.name not in ("positions", "kv_dtype", "kv_scale"):
                out[f.name] = getattr(self, f.name)
        out["positions"] = self.positions
        return {**out, **self.kv_knobs()}

    @property
    def reads_rope(self) -> bool:  # type: ignore[override]
        return self.scorer_method().reads_rope

    def budget(self, prompt_len: int) -> int:
        """The mean kept per KV head, ``n``: the scorer's budget of a prompt of ``prompt_len`` tokens."""
        return self.scorer_method().budget(prompt_len)

    def needs_selection(self, prompt_len: int) -> bool:
        return self.scorer_method().needs_selection(prompt_len)

    def kept(self, prompt_len: int) -> int:
        """Prompt entries held per KV head after the selection, the mean over heads: the budget ``n`` (exact: a
        layer holds ``H_kv * n``), or the prompt when it is within it."""
        return self.budget(prompt_len) if self.needs_selection(prompt_len) else prompt_len

    def kept_cap(self, prompt_len: int) -> int:
        """Slots per KV head a layer allocates: the prompt (one head may keep up to ``H_kv * n - (H_kv - 1) *
        n_safe`` tokens, and the head count is not known here); a head's slots past its count are not valid."""
        return prompt_len

    def query_rows(self, prompt_len: int) -> int:
        return self.scorer_method().query_rows(prompt_len)

    def query_moments(self, prompt_len: int) -> int | None:
        return self.scorer_method().query_moments(prompt_len)

    def score_buffers(self, prompt_len: int) -> tuple[int, int]:
        """The scorer's, and the flattened (H_kv * T) scores, their negation and the top-k: counted as one (H, T)."""
        n, m = self.scorer_method().score_buffers(prompt_len)
        return (n, m + 1) if self.needs_selection(prompt_len) else (n, m)

    def safe_count(self, n_keep: int) -> int:
        """Tokens each head keeps by its own scores: ``int(n * alpha_safeguard)``, at least 1 when the safeguard is
        on (kvpress 0.5.5 ``AdaKVPress.compress``)."""
        n_safe = int(n_keep * self.alpha_safeguard)
        if self.alpha_safeguard > 0:
            n_safe = max(1, n_safe) if n_keep > 0 else 0
        return n_safe

    def select(self, view: PrefillView) -> Selection:
        """``indices`` (B, H_kv, n_max): each head's kept tokens in position order, then padding; ``counts`` (B,
        H_kv) how many each head keeps (summing to ``H_kv * n`` per row); ``scores`` the scorer's priorities."""
        import torch

        refuse_padding(self.method, view.key_valid)
        scores = self.scorer_method().select(view).scores  # (B, H_kv, T): +inf always kept, -inf padding
        B, H_kv, T = scores.shape
        n = self.budget(T)
        ranked = scores.clone()
        n_safe = self.safe_count(n)
        if n_safe:
            ranked.scatter_(-1, scores.topk(n_safe, dim=-1).indices, float("inf"))
        dropped = (-ranked).reshape(B, H_kv * T).topk(H_kv * (T - n), dim=-1).indices  # (B, H_kv * (T - n))
        keep = torch.ones(B, H_kv * T, dtype=torch.bool, device=scores.device)
        keep = keep.scatter_(-1, dropped, False).reshape(B, H_kv, T)
        counts = keep.sum(-1)  # (B, H_kv)
        order = torch.argsort((~keep).to(torch.uint8), dim=-1, stable=True)  # kept first, each in position order
        idx = order[..., : int(counts.max())]
        return Selection(scores, n_keep=idx.shape[-1], n_frozen=idx.shape[-1], indices=idx, counts=counts)
