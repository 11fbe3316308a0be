"""TriAttention's key scores: pure tensor functions (tensors in, scores out), testable without a model.

Mao et al. 2026, "TriAttention" (arXiv 2604.04921); we follow ``WeianMao/triattention`` c3744ee6,
``triattention/methods/pruning_utils.py`` (``invert_rope``, ``to_complex_pairs``,
``compute_frequency_statistics_from_means``, ``score_keys_for_round``) and ``triattention/methods/triattention.py``
(``TriAttention._compute_layer_head_scores``, ``compute_keep_indices``, ``_select_per_head_independent``).

A key ``k`` cached at position ``p`` is un-rotated to position 0 and split into ``F = D/2`` complex pairs ``k_f``
(RoPE's half-split convention). With the calibration's mean query ``q_f`` and mean modulus ``a_f`` of a query head,
the score of the key for a query ``Δ`` positions later is the trigonometric series
``Σ_f |q_f| |k_f| cos(Δ ω_f + arg(q_f k̄_f)) + Σ_f (a_f - |q_f|) |k_f|`` (times ``s²``, the RoPE attention scaling
squared, 1 for Llama), averaged over ``Δ = now - p + o`` for the geometric offsets ``o = 1, 2, 4, ..., ≤ max``.
With ``aggregation="mean"`` the average over offsets is taken inside the cosine's complex form,
``mean_o cos(θ + o ω) = Re(e^{iθ} · mean_o e^{i o ω})``, which equals the reference's grid (``score_keys_for_round``)
up to float rounding without its (…, offsets, F) intermediate.

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


def unrotated_pairs(keys: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor,
                    attention_scaling: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys (..., S, D) post-RoPE at ``positions`` (..., S) rotated back to position 0, as the real and imaginary
    parts (..., S, F) float32 of their complex pairs (``invert_rope`` then ``to_complex_pairs``, half style):
    ``(k / s) · e^{-i p ω}``. Real arithmetic throughout, so the compaction compiles like the decode step."""
    F = keys.shape[-1] // 2
    k = keys.to(torch.float32) / attention_scaling
    angle = positions.to(torch.float32)[..., None] * inv_freq.to(keys.device, torch.float32)
    cos, sin = angle.cos(), angle.sin()
    re, im = k[..., :F], k[..., F:]
    return re * cos + im * sin, im * cos - re * sin


def head_scores(
    keys: torch.Tensor,
    positions: torch.Tensor,
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

    ``keys`` (R, H_kv, S, D) post-RoPE; ``positions`` (R, H_kv, S) the position each slot's key was rotated at;
    ``now`` (R,) the round's reference position (the reference's ``absolute_position``: tokens seen so far, the
    last one included); ``q_mean`` the real and imaginary parts (H, F) of the layer's mean query and ``q_abs_mean``
    (H, F) its mean modulus (the calibration); ``inv_freq`` (F,) the model's RoPE inverse frequencies; ``offsets``
    the future offsets (:func:`geometric_offsets`).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"score_aggregation: must be one of {AGGREGATIONS}, got {aggregation!r}")
    R, H_kv, S, D = keys.shape
    group = q_abs_mean.shape[0] // H_kv
    omega = inv_freq.to(keys.device, torch.float32)
    kr, ki = (t.repeat_interleave(group, dim=1) for t in unrotated_pairs(keys, positions, omega, attention_scaling))
    qr, qi = (t.to(keys.device, torch.float32)[None, :, None, :] for t in q_mean)  # (1, H, 1, F)
    k_abs = (kr * kr + ki * ki).sqrt()  # (R, H, S, F)
    q_abs = (qr * qr + qi * qi).sqrt()
    scale_sq = attention_scaling**2
    extra = ((q_abs_mean.to(keys.device)[None, :, None, :] - q_abs) * k_abs).sum(-1) * scale_sq  # (R, H, S)
    rel_re, rel_im = qr * kr + qi * ki, qi * kr - qr * ki  # q · conj(k) = |q||k| e^{i arg(q k̄)}
    delta = (now.to(keys.device)[:, None, None] - positions).to(torch.float32).repeat_interleave(group, dim=1)
    off = torch.tensor(offsets, device=keys.device, dtype=torch.float32)
    if aggregation == "mean":
        turn = delta[..., None] * omega  # (R, H, S, F)
        m_re, m_im = (off[:, None] * omega).cos().mean(0), (off[:, None] * omega).sin().mean(0)  # mean_o e^{i o ω}
        z_re = turn.cos() * m_re - turn.sin() * m_im
        z_im = turn.cos() * m_im + turn.sin() * m_re
        return (rel_re * z_re - rel_im * z_im).sum(-1) * scale_sq + extra
    amp, phi = (rel_re * rel_re + rel_im * rel_im).sqrt(), torch.atan2(rel_im, rel_re)
    phase = (delta[..., None, None] + off[:, None]) * omega + phi[..., None, :]  # (R, H, S, O, F)
    series = (amp[..., None, :] * torch.cos(phase)).sum(-1) * scale_sq  # (R, H, S, O)
    return (series + extra[..., None]).amax(-1)


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
