"""What a layer shows a method at the end of its prefill (:class:`PrefillView`) and what the method answers
(:class:`Selection`): plain frozen dataclasses, below both the methods and the cache layers (no import of either,
so the layers that store a selection and the methods that make one import the same types without a loop)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the dataclasses import no torch: configs are checked before torch loads
    import torch


@dataclass(frozen=True)
class PrefillView:
    """What a layer exposes to a method at the end of its prefill attention.

    Shapes: ``query`` (B, H, w, D) post-RoPE queries of the last ``w = method.query_rows(T)`` positions (or more);
    ``keys`` (B, H_kv, T, D) post-RoPE keys; ``key_valid`` (B, T) bool, False on left padding; ``scaling`` the
    attention scale (1/sqrt(D) for Llama); ``values`` (B, H_kv, T, D); ``moments`` the running moments of the pre-RoPE
    queries (:class:`snapstream_core.moments.QueryMoments`) when ``method.query_moments(T)`` asks for them, else None;
    ``inv_freq`` (D/2,) the model's RoPE inverse frequencies (None when its angle is not linear in the position);
    ``layer_idx`` the layer (-1: unknown) of ``n_layers`` (0: unknown), for per-layer budgets; ``attn_sum``
    (B, H_kv, T) float32: each prompt token's attention summed over every prompt query, when the method
    ``accumulates_attention`` (H2O), else None.
    """

    query: torch.Tensor
    keys: torch.Tensor
    key_valid: torch.Tensor
    scaling: float
    values: torch.Tensor | None = None
    moments: Any = None
    inv_freq: torch.Tensor | None = None
    layer_idx: int = -1
    n_layers: int = 0
    attn_sum: torch.Tensor | None = None


@dataclass(frozen=True)
class Selection:
    """Prompt tokens a layer keeps after prefill.

    ``scores`` (B, H_kv, T): priority of each prompt token (higher is kept first; ``-inf`` never kept unless there is
    room); ``n_keep`` tokens are kept per (row, KV head), of which the ``n_frozen`` with the highest priority form the
    frozen prefix and the rest seed the ring (StreamingLLM's recent tokens). ``indices`` (B, H_kv, n_keep) long,
    when given, are the kept tokens in the order the layer stores them (a method that orders its slots itself, as
    the decode-time methods store the references' score order); otherwise the kept tokens are stored in position
    order. ``counts`` (B, H_kv) long, when given, makes the keep ragged (the ``ragged`` storage policy): head h of
    row b keeps ``indices[b, h, :counts[b, h]]`` and the rest of its ``n_keep`` slots is padding (never valid).
    """

    scores: torch.Tensor
    n_keep: int
    n_frozen: int
    indices: torch.Tensor | None = None
    counts: torch.Tensor | None = None
