"""PyramidKV: SnapKV's selection with a budget per layer that decreases linearly with depth, the same total.

Cai et al. 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling" (arXiv
2406.02069). Budgets as kvpress 0.5.5 ``presses/pyramidkv_press.py``, ``PyramidKVPress.get_layer_budget`` (itself
KVCache-Factory's ``pyramidkv_utils.py`` formula, with kvpress's changes: the budget always follows the compression,
the observation window counts inside each layer's budget, a layer keeps its ``n_l`` highest SnapKV scores per KV
head as ``PyramidKVPress.compress``); scores as SnapKV (:class:`~snapstream_core.methods.snapkv.SnapKV`, kvpress's
``SnapKVPress.score`` with ``pooling="avg"``).

With ``m`` the mean budget per layer (``prompt_budget``, or ``T * (1 - ratio)`` as kvpress's float) and ``w`` the
window: ``min = m / beta``, ``max = 2 m - min``; when ``max >= T - w`` then ``max = T - w`` and ``min = 2 m - max``;
unless ``T >= max >= min >= w`` every layer keeps ``max(1, round(m))`` (the fallback to SnapKV); otherwise layer
``l`` of ``L`` keeps ``round(max - l * (max - min) / (L - 1))``. Layer 0 keeps the most, so a layer's storage is
padded to twice the mean budget, a bound on layer 0's (the ``ragged`` storage policy: the slots past a layer's
budget are not valid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snapstream_core.methods.base import PrefillView, Selection, check_positive
from snapstream_core.methods.snapkv import SnapKV


@dataclass(frozen=True)
class PyramidKV(SnapKV):
    """SnapKV's knobs (``prompt_budget`` | ``ratio``: the *mean* kept per layer and KV head, ``window``, ``kernel``,
    ``pooling``, ``gqa_agg``, ``sinks``) and ``beta``, the pyramid's steepness (kvpress's default 20: the last layer
    keeps ``m / beta``, the first ``2 m - m / beta``, unless clamped). Decoded tokens are appended."""

    method: ClassVar[str] = "pyramidkv"
    policy: ClassVar[str] = "ragged"  # a budget per layer: storage padded to the largest, the rest not valid
    tag_order: ClassVar[tuple[str, ...]] = (
        "prompt_budget", "beta", "window", "kernel", "pooling", "gqa_agg", "sinks", "positions", "ratio"
    )
    beta: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("beta", self.beta)
        if self.positions != "original":
            raise ValueError("compression.positions: pyramidkv keeps a different count per layer; only 'original' "
                             f"positions are supported, got {self.positions!r}")

    def mean_budget(self, prompt_len: int) -> float:
        """The mean kept per layer, ``m``: ``min(T, prompt_budget)``, or kvpress's ``T * (1 - ratio)`` (a float, as
        ``PyramidKVPress.get_layer_budget`` computes it)."""
        if self.ratio is None:
            return float(min(prompt_len, self.prompt_budget))
        return prompt_len * (1 - self.ratio)

    def layer_budget(self, prompt_len: int, layer_idx: int, n_layers: int) -> int:
        """Prompt tokens layer ``layer_idx`` of ``n_layers`` keeps per KV head (the module docstring's formula, in
        kvpress's order of float operations so that every rounding agrees)."""
        T, w = prompt_len, self.window
        capacity = w + self.mean_budget(T)  # kvpress's max_capacity_prompt
        low = (capacity - w) / self.beta
        high = (capacity - w) * 2 - low
        if high >= T - w:
            high = T - w
            low = (capacity - w) * 2 - high
        if not (T >= high >= low >= w):
            return min(T, max(1, round(self.mean_budget(T))))
        step = (high - low) / (n_layers - 1) if n_layers > 1 else 0.0
        return round(high - layer_idx * step)

    def kept(self, prompt_len: int) -> int:
        """Prompt entries held per layer and KV head after the selection, the mean over layers: the mean budget."""
        if not self.needs_selection(prompt_len):
            return prompt_len
        return round(self.mean_budget(prompt_len))

    def kept_cap(self, prompt_len: int) -> int:
        """Slots per KV head a layer allocates, a bound on every layer's budget that never falls as the prompt
        grows (the engine sizes its rows for the longest prompt): ``2 m`` (layer 0 keeps ``2 m - m / beta`` or the
        prompt's clamp, the fallback ``m``), at most the prompt; a layer's slots past its budget are not valid."""
        import math

        if not self.needs_selection(prompt_len):
            return prompt_len
        return min(prompt_len, math.ceil(2 * self.mean_budget(prompt_len)))

    def select(self, view: PrefillView) -> Selection:
        """Each KV head of layer ``view.layer_idx`` keeps its ``n_l`` highest SnapKV scores (:meth:`layer_budget`),
        in position order: ``indices`` (B, H_kv, n_l), ``counts`` (B, H_kv) all ``n_l``."""
        import torch

        from snapstream_core.selection import top_set

        if view.layer_idx < 0 or view.n_layers < 1:
            raise RuntimeError("snapstream_core: pyramidkv needs the layer index and count in its PrefillView")
        from snapstream_core.methods.adakv import refuse_padding

        refuse_padding(self.method, view.key_valid)
        B, H_kv, T, _ = view.keys.shape
        n = self.layer_budget(T, view.layer_idx, view.n_layers)
        scores = self.priorities(view)  # (B, H_kv, T)
        idx = top_set(scores, n, view.key_valid).sort(dim=-1).values  # (B, H_kv, n)
        counts = torch.full((B, H_kv), n, dtype=torch.long, device=idx.device)
        return Selection(scores, n_keep=n, n_frozen=n, indices=idx, counts=counts)
