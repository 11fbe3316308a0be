"""TriAttention's key scores: pure tensor functions (tensors in, scores out), testable without a model.

Mao et al. 2026, "TriAttention" (arXiv 2604.04921); we follow ``WeianMao/triattention`` c3744ee6,
``triattention/methods/pruning_utils.py`` (``invert_rope``, ``to_complex_pairs``,
``compute_frequency_statistics_from_means``, ``score_keys_for_round``) and ``triattention/methods/triattention.py``
(``TriAttention._compute_layer_head_scores``, ``compute_keep_indices``, ``_select_per_head_independent``).

A key ``k`` cached at position ``p`` is un-rotated to position 0 and split into ``F = D/2`` complex pairs ``k_f``
(RoPE's half-split convention; :func:`head_scores` folds the inversion into the phase advance, where it cancels).
With the calibration's mean query ``q_f`` and mean modulus ``a_f`` of a query head, the score of the key for a query
``Δ`` positions later is the trigonometric series
``Σ_f |q_f| |k_f| cos(Δ ω_f + arg(q_f k̄_f)) + Σ_f (a_f - |q_f|) |k_f|`` (times ``s²``, the RoPE attention scaling
squared, 1 for Llama), averaged over ``Δ = now - p + o`` for the geometric offsets ``o = 1, 2, 4, ..., ≤ max``.
With ``aggregation="mean"`` the average over offsets is taken inside the cosine's complex form,
``mean_o cos(θ + o ω) = Re(e^{iθ} · mean_o e^{i o ω})``, which equals the reference's grid (``score_keys_for_round``)
up to float rounding, without its (…, offsets, F) intermediate: a compaction costs one product of the keys with a
vector per (row, head), (R, H_kv, S, F) float32 of scratch per layer.

Per-head pruning (the protocol's ``per_head_pruning: true``): each query head's scores are z-normalised over the
candidate slots, the heads of one KV group take their max, and the layers their mean, so each KV head keeps one set
of tokens in every layer.
"""

from __future__ import annotations

import torch

AGGREGATIONS = ("mean", "max")


def geometric_offsets(max_length: int) -> list[float]:
    """``1, 2, 4, ...`` up to ``max_length`` (``build_geometric_offsets``; 17 offsets for 65,536)."""
    if max_length < 1:
        raise ValueError(f"offset_max_length: must be >= 1, got {max_length}")
    out, value = [], 1
    while value <= max_length:
        out.append(float(value))
        value *= 2
    return out


def head_scores(
    keys: torch.Tensor,
    now: torch.Tensor,
    q_mean: tuple[torch.Tensor, torch.Tensor],
    q_abs_mean: torch.Tensor,
    inv_freq: torch.Tensor,
    offsets: list[float],
    *,
    attention_scaling: float = 1.0,
    aggregation: str = "mean",
) -> torch.Tensor:
    """Scores (R, H, S) float32 of each slot for each query head of one layer.

    ``keys`` (R, H_kv, S, D) post-RoPE, as cached; ``now`` (R,) the round's reference position (the reference's
    ``absolute_position``: tokens seen so far, the last one included); ``q_mean`` the real and imaginary parts
    (H, F) of the layer's mean pre-RoPE query and ``q_abs_mean`` (H, F) its mean modulus (the calibration);
    ``inv_freq`` (F,) the model's RoPE inverse frequencies; ``offsets`` the future offsets
    (:func:`geometric_offsets`).

    The reference un-rotates each key from its position ``p`` (``k = k̃ e^{-ipω}``) and then advances the phase by
    ``Δ = now - p + o``; the two rotations cancel, ``q k̄ e^{iΔω} = q conj(k̃) e^{i(now + o)ω}``, and the modulus
    ``|k| = |k̃|``, so the score is a product of the cached key with one vector per (row, head) and needs no slot
    position (tests/test_triattention.py checks it against the reference's definition with explicit inversion).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"score_aggregation: must be one of {AGGREGATIONS}, got {aggregation!r}")
    R, H_kv, S, D = keys.shape
    F = D // 2
    H = q_abs_mean.shape[0]
    G = H // H_kv
    dev = keys.device
    omega = inv_freq.to(dev, torch.float32)
    k = keys.to(torch.float32) / attention_scaling
    kr, ki = k[..., :F], k[..., F:]  # (R, H_kv, S, F)
    qr, qi = (t.to(dev, torch.float32) for t in q_mean)  # (H, F)
    off = torch.tensor(offsets, device=dev, dtype=torch.float32)
    angle = (now.to(dev, torch.float32)[:, None] + off)[..., None] * omega  # (R, O, F): (now + o) ω
    er, ei = angle.cos(), angle.sin()
    if aggregation == "mean":
        er, ei = er.mean(1, keepdim=True), ei.mean(1, keepdim=True)  # (R, 1, F): mean_o e^{i(now + o)ω}
    cr = qr * er[:, :, None] - qi * ei[:, :, None]  # (R, O', H, F): q e^{i(now + o)ω}
    ci = qr * ei[:, :, None] + qi * er[:, :, None]
    n_off = cr.shape[1]
    cr, ci = (c.view(R, n_off, H_kv, G, F) for c in (cr, ci))
    series = torch.einsum("rksf,rokgf->rokgs", kr, cr) + torch.einsum("rksf,rokgf->rokgs", ki, ci)  # Re(c conj(k̃))
    weight = (q_abs_mean.to(dev, torch.float32) - (qr * qr + qi * qi).sqrt()).view(H_kv, G, F)  # a - |q|
    extra = torch.einsum("rksf,kgf->rkgs", (kr * kr + ki * ki).sqrt(), weight)  # Σ_f (a - |q|) |k|
    scores = (series + extra[:, None]) * attention_scaling**2  # (R, O', H_kv, G, S)
    scores = scores[:, 0] if aggregation == "mean" else scores.amax(1)
    return scores.reshape(R, H, S)


def normalized(scores: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """Scores (R, H, S) z-normalised per (row, head) over the ``candidates`` (R, 1 | H, S) bool slots (population
    std clamped at 1e-6, as ``compute_keep_indices`` with ``normalize_scores``); other slots are 0."""
    c = candidates.to(scores.dtype)
    n = c.sum(-1, keepdim=True).clamp_min(1)
    mean = (scores * c).sum(-1, keepdim=True) / n
    var = (((scores - mean) * c) ** 2).sum(-1, keepdim=True) / n
    return ((scores - mean) / var.sqrt().clamp_min(1e-6)) * c


def group_max(scores: torch.Tensor, n_kv_heads: int) -> torch.Tensor:
    """(R, H, S) -> (R, H_kv, S): the max over the query heads of each KV group (``_select_per_head_independent``)."""
    R, H, S = scores.shape
    return scores.view(R, n_kv_heads, H // n_kv_heads, S).amax(2)
