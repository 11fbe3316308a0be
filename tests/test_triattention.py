"""TriAttention without a model: its scores against their definition, its schedule, its calibration file (written,
converted, refused in one line before weights load) and its knobs."""

from __future__ import annotations

import math

import pytest
import torch
from runner_utils import compose_cfg

from evals.config.spec import check
from snapstream_core.calibration import check_for_model, read_header, save_stats
from snapstream_core.methods import TriAttention
from snapstream_core.rope import rotate
from snapstream_core.triattention_scores import geometric_offsets, head_scores, normalized

TINY = {"n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16, "rope_theta": 10000.0, "rope_type": "default"}


def _calibration(path, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, rope_theta=10000.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_layers, n_heads, head_dim // 2, 2, generator=g)
    q_mean = torch.complex(q[..., 0], q[..., 1])
    return str(save_stats(path, q_mean, q_mean.abs() * 1.5, n_kv_heads=n_kv_heads, rope_theta=rope_theta,
                          rope_type="default"))


def test_offsets_are_the_references_geometric_series():
    assert geometric_offsets(65536) == [2.0**i for i in range(17)]


def _unrotated(keys, positions, inv_freq):
    """The reference's ``invert_rope`` then ``to_complex_pairs``: each key rotated back to position 0, as pairs."""
    k0 = rotate(keys, -positions, inv_freq)
    F = keys.shape[-1] // 2
    return torch.complex(k0[..., :F], k0[..., F:])


def test_scores_equal_the_series_with_explicit_rope_inversion_summed_over_future_offsets():
    """``score_keys_for_round``'s definition, written out with the reference's inversion of each key at its
    position: mean (or max) over offsets of Σ_f |q||k| cos(Δω + φ) plus Σ_f (a - |q|)|k|, Δ = now - p + o. Ours
    folds the inversion into the phase (it cancels), so it reads no position."""
    g = torch.Generator().manual_seed(2)
    R, H_kv, H, S, D = 2, 2, 4, 6, 16
    k_at_zero = torch.randn(R, H_kv, S, D, generator=g)
    positions = torch.randint(0, 3000, (R, H_kv, S), generator=g)
    inv_freq = 1.0 / 10000 ** (torch.arange(0, D, 2) / D)
    keys = rotate(k_at_zero, positions, inv_freq)  # as cached: rotated at their positions
    now = torch.tensor([3000, 3001])
    q = torch.randn(H, D // 2, 2, generator=g)
    q_mean = torch.complex(q[..., 0], q[..., 1])
    q_abs = q_mean.abs() + torch.rand(H, D // 2, generator=g)
    offsets = geometric_offsets(4096)
    for aggregation in ("mean", "max"):
        ours = head_scores(keys, now, (q_mean.real, q_mean.imag), q_abs, inv_freq, offsets, aggregation=aggregation)
        worst = 0.0
        for r in range(R):
            for h in range(H):
                k = _unrotated(keys[r, h // 2], positions[r, h // 2], inv_freq)[:, None, :]  # (S, 1, F)
                assert torch.allclose(k[:, 0], torch.complex(k_at_zero[r, h // 2, :, :8], k_at_zero[r, h // 2, :, 8:]),
                                      atol=1e-3)
                rel = q_mean[h] * k.conj()
                delta = ((now[r] - positions[r, h // 2]).double()[:, None, None]
                         + torch.tensor(offsets).double()[:, None])  # (S, O, 1)
                series = (rel.abs().double() * torch.cos(delta * inv_freq.double() + rel.angle().double())).sum(-1)
                extra = ((q_abs[h] - q_mean[h].abs()) * k[:, 0].abs()).sum(-1).double()[:, None]
                expected = (series + extra).mean(-1) if aggregation == "mean" else (series + extra).amax(-1)
                worst = max(worst, float((ours[r, h].double() - expected).abs().max() / expected.abs().max()))
        assert worst < 1e-4, aggregation


def test_normalisation_reads_only_the_candidates():
    scores = torch.tensor([[[1.0, 2.0, 3.0, 100.0]]])
    cand = torch.tensor([[[True, True, True, False]]])
    z = normalized(scores, cand)
    assert torch.allclose(z[0, 0, :3], torch.tensor([-1.0, 0.0, 1.0]) * math.sqrt(1.5)) and z[0, 0, 3] == 0


@pytest.mark.parametrize("prompt", [1, 100, 511, 600])
def test_the_slack_trigger_is_an_exact_sawtooth(prompt):
    """The cache grows to budget + interval entries, the step that writes the last one compacts to the cap, then
    every ``interval`` steps again; ``slots`` is the most held at once."""
    m = TriAttention(budget=512, interval=128)
    held, peak, points = prompt, prompt, []
    for k in range(1, 2000):
        held += 1
        peak = max(peak, held)
        if held >= 512 + 128:
            held = max(512, prompt)
            points.append(k)
        assert m.compacts(prompt, k) == (points[-1:] == [k])
        assert m.tokens_held(prompt, k) == held
    assert m.slots(prompt, 2000) == peak
    if prompt < 512:
        assert peak == 640 and all(b - a == 128 for a, b in zip(points, points[1:]))
    assert m.keeps_all(prompt, 512 + 128 - prompt) and not m.keeps_all(prompt, 512 + 128 - prompt + 1)


@pytest.mark.parametrize("knobs, message", [
    ({"interval": 0}, r"^compression\.interval: must be an integer > 0"),
    ({"budget": 0}, r"^compression\.budget: must be an integer >= 1"),
    ({"window": 8, "budget": 8}, r"^compression\.budget: must be an integer >= 9"),
    ({"protect_prompt": False}, r"^compression\.protect_prompt: triattention keeps the prompt"),
    ({"pruning": "global"}, r"^compression\.pruning: must be one of"),
    ({"score_aggregation": "sum"}, r"^compression\.score_aggregation: must be mean or max"),
    ({"offset_max_length": 0}, r"^compression\.offset_max_length: must be an integer >= 1"),
    ({"positions": "in_cache"}, r"^compression\.positions: triattention compacts in the engine"),
    ({"calibration": "/nonexistent/stats.safetensors"}, r"^compression\.calibration: no such file"),
])
def test_bad_knobs_are_one_line(knobs, message):
    with pytest.raises(ValueError, match=message):
        TriAttention(**knobs)


def test_a_calibration_file_is_refused_unless_it_is_ours_and_whole(tmp_path):
    good = _calibration(tmp_path / "good.safetensors")
    assert read_header(good).n_layers == 2
    data = open(good, "rb").read()
    for name, content in [("text.safetensors", b"not a calibration"), ("cut.safetensors", data[:40]),
                          ("empty.safetensors", b"")]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=r"^compression\.calibration: .* is not a TriAttention calibration file"):
            read_header(tmp_path / name)


@pytest.mark.parametrize("shape, diff", [
    ({"n_layers": 3}, "layers 2 vs 3"), ({"n_heads": 8}, "heads 4 vs 8"), ({"n_kv_heads": 1}, "KV heads 2 vs 1"),
    ({"head_dim": 32}, "head dim 16 vs 32"), ({"rope_theta": 500000.0}, "rope_theta 10000 vs 500000"),
    ({"rope_type": "llama3"}, "rope_type default vs llama3"),
])
def test_a_calibration_of_another_model_shape_is_refused(tmp_path, shape, diff):
    path = _calibration(tmp_path / "c.safetensors")
    check_for_model(path, TINY)
    with pytest.raises(ValueError, match=rf"^compression\.calibration: .* another model shape \({diff}\)"):
        check_for_model(path, {**TINY, **shape})


def test_the_runner_refuses_a_missing_or_mismatched_calibration_before_weights_load(tmp_path):
    tiny = _calibration(tmp_path / "tiny.safetensors")
    assert check(compose_cfg(["model=tiny_llama", "compression=triattention", f"compression.calibration={tiny}"]),
                 offline=True).method.calibration == tiny
    with pytest.raises(ValueError, match=r"^compression\.calibration: required"):
        check(compose_cfg(["model=tiny_llama", "compression=triattention"]), offline=True)
    with pytest.raises(ValueError, match=r"^compression\.calibration: .* another model shape \(layers 2 vs 30\)"):
        check(compose_cfg(["model=smollm2_135m", "compression=triattention", f"compression.calibration={tiny}"]),
              offline=True)


def test_calibrate_writes_a_file_from_text_that_the_model_accepts(tmp_path):
    from evals.calibrate import from_text, model_config

    cfg = model_config("tiny_llama")
    path = from_text(cfg, "The quick brown fox jumps over the lazy dog. " * 20, 64, tmp_path / "t.safetensors")
    header = check_for_model(path, TINY)
    assert header.extra["model"] == "tiny_llama" and int(header.extra["tokens"]) == 64


def test_the_calibration_forward_pass_reports_each_layer_as_it_is_read(tiny_model):
    from snapstream_core.calibration import query_statistics

    seen = []
    ids = torch.arange(32)[None]
    q_mean, q_abs = query_statistics(tiny_model, ids, on_layer=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]  # a progress bar moves during the one long forward pass
    assert torch.equal(q_mean, query_statistics(tiny_model, ids)[0])  # the callback changes nothing


def test_the_references_own_stats_file_converts_and_an_incomplete_one_is_refused(tmp_path):
    from evals.calibrate import from_reference, model_config
    from snapstream_core.calibration import load_stats

    g = torch.Generator().manual_seed(3)
    stats = {f"layer{layer:02d}_head{head:02d}": {"q_mean_real": torch.randn(8, generator=g),
                                                "q_mean_imag": torch.randn(8, generator=g),
                                                "q_abs_mean": torch.rand(8, generator=g)}
             for layer in range(2) for head in range(4)}
    meta = {"sampled_heads": [[layer, head] for layer in range(2) for head in range(4)], "head_dim": 16,
            "rope_style": "half", "rope_type": "default"}
    torch.save({"metadata": meta, "stats": stats}, tmp_path / "ref.pt")
    out = from_reference(model_config("tiny_llama"), tmp_path / "ref.pt", tmp_path / "ours.safetensors")
    loaded = load_stats(out)
    assert torch.equal(loaded.q_mean[1, 3].real, stats["layer01_head03"]["q_mean_real"])
    assert torch.equal(loaded.q_abs_mean[0, 2], stats["layer00_head02"]["q_abs_mean"])
    check_for_model(out, TINY)
    del stats["layer01_head02"]
    torch.save({"metadata": meta, "stats": stats}, tmp_path / "part.pt")
    with pytest.raises(ValueError, match=r"^from_reference: .* lacks 1 of 8 heads of tiny_llama"):
        from_reference(model_config("tiny_llama"), tmp_path / "part.pt", tmp_path / "x.safetensors")
    torch.save({"metadata": {**meta, "model_name": "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"}, "stats": stats},
               tmp_path / "r1.pt")  # the reference's files name their model: another model is refused
    with pytest.raises(ValueError, match=r"^from_reference: .* was made for deepseek-ai/DeepSeek-R1-Distill-Llama-8B, "
                                         r"not smollm2_135m"):
        from_reference(model_config("smollm2_135m"), tmp_path / "r1.pt", tmp_path / "y.safetensors")


def test_the_run_tag_says_the_cache_is_capped_and_leaves_the_file_path_out(tmp_path):
    from evals.config.conf_store import CAP_MARK
    from evals.execute.identity import run_identity
    from snapstream_core.methods import METHODS

    path = _calibration(tmp_path / "c.safetensors")
    cfg = compose_cfg(["model=tiny_llama", "compression=triattention", f"compression.calibration={path}"])
    assert cfg.compression.tag == "triattention-cache-b512-i128-w0-off65536-mean-normTrue-per_head-ppTrue-original"
    for name, cls in METHODS.items():
        tag = compose_cfg([f"compression={name}"]).compression.tag
        assert (f"{name}-{CAP_MARK}" in tag) == (cls.budget_cap == "cache"), tag
    knobs = TriAttention(calibration=path).knobs()
    identity = run_identity({"model": {}, "task": {}, "gen": {}, "backend": {"name": "hf"}}, knobs, "w", [])
    assert identity["compression"]["calibration"] == {"sha256": __import__("hashlib").sha256(
        open(path, "rb").read()).hexdigest()}
