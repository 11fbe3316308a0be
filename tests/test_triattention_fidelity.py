"""TriAttention's kept tokens equal the official code's, round by round, per (row, KV head), order included.

The fixture (``tests/data/triattention_fixture.safetensors``, ``python -m bench.triattention_fixture``) holds four
traces of ``tiny_llama``'s post-RoPE keys, a calibration, and the positions WeianMao/triattention c3744ee6's
``TriAttention.compute_keep_indices`` kept at each of four slack-trigger rounds (per-head pruning, normalised scores,
prompt kept), with the protocol's tie-break noise (``pruning_seed`` 0) and without. Here the same rounds run through
our scores and the engine's keep rule (:func:`snapstream_core.engine.compact.compact_orders`), the four traces as four
rows of one batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from snapstream_core.calibration import save_stats
from snapstream_core.methods import TriAttention
from snapstream_core.methods.decode_base import CompactView, compact_orders

FIXTURE = Path(__file__).parent / "data" / "triattention_fixture.safetensors"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    with safe_open(str(FIXTURE), "pt") as f:
        meta = {k: int(v) for k, v in f.metadata().items() if k != "reference"}
        data = {k: f.get_tensor(k) for k in f.keys()}
    calibration = tmp_path_factory.mktemp("calib") / "tiny.safetensors"
    L, H, F = data["q_abs_mean"].shape
    save_stats(calibration, torch.complex(data["q_mean_real"], data["q_mean_imag"]), data["q_abs_mean"],
               n_kv_heads=data["keys"].shape[2], rope_theta=10000.0, rope_type="default")
    return meta, data, str(calibration)


def run_rounds(method: TriAttention, keys: torch.Tensor, inv_freq: torch.Tensor, prompt: int) -> torch.Tensor:
    """Kept positions (R, rounds, H_kv, budget) of our compaction over traces ``keys`` (R, L, H_kv, T, D), one token
    written per step, in fixed-shape slots as the engine holds them."""
    R, L, H_kv, T, D = keys.shape
    S = method.slots(prompt, T - prompt + 1)
    slot_keys = torch.zeros(L, R, H_kv, S, D)
    slot_keys[:, :, :, :prompt] = keys[:, :, :, :prompt].transpose(0, 1)
    positions = torch.zeros(L, R, H_kv, S, dtype=torch.long)
    positions[:, :, :, :prompt] = torch.arange(prompt)
    held, rounds = prompt, []
    for step, p in enumerate(range(prompt, T), start=1):
        slot_keys[:, :, :, held] = keys[:, :, :, p].transpose(0, 1)
        positions[:, :, :, held] = p
        held += 1
        assert held == method.tokens_held(prompt, step - 1) + 1
        if not method.compacts(prompt, step):
            continue
        valid = (torch.arange(S) < held).expand(R, H_kv, S)
        views = [CompactView(keys=slot_keys[layer], values=slot_keys[layer], positions=positions[layer], valid=valid,
                             held=torch.full((R,), held), prompt_len=torch.full((R,), prompt), queries=None,
                             scaling=D**-0.5, inv_freq=inv_freq, layer_idx=layer) for layer in range(L)]
        for layer, (order, kept) in enumerate(compact_orders(method, views)):
            slot_keys[layer] = slot_keys[layer].gather(2, order[..., None].expand(-1, -1, -1, D))
            positions[layer] = positions[layer].gather(2, order)
        held = int(kept[0])
        assert held == method.tokens_held(prompt, step)
        assert all(torch.equal(positions[0, :, :, :held], positions[layer, :, :, :held]) for layer in range(L)), (
            "per-head pruning keeps one set of tokens per KV head in every layer")
        rounds.append(positions[0, :, :, :held].clone())
    return torch.stack(rounds, dim=1)


def test_kept_tokens_equal_the_official_code_on_every_round_row_and_head(fixture):
    meta, data, calibration = fixture
    method = TriAttention(budget=meta["budget"], interval=meta["interval"], calibration=calibration)
    ours = run_rounds(method, data["keys"], data["inv_freq"], meta["prompt"])
    theirs = data["kept_no_noise"]
    assert ours.shape == theirs.shape == (4, 4, 2, meta["budget"])
    same = (ours == theirs).all(-1)  # (row, round, KV head): the same positions in the same order
    assert same.all(), f"{int((~same).sum())} of {same.numel()} (row, round, head) differ"
    # the protocol's U(0, 1e-6) tie-break noise (pruning_seed 0), which we do not add, changes none of them here
    assert torch.equal(data["kept_seed0"], theirs)


def test_rows_are_independent_one_row_equals_its_row_in_the_batch(fixture):
    meta, data, calibration = fixture
    method = TriAttention(budget=meta["budget"], interval=meta["interval"], calibration=calibration)
    alone = run_rounds(method, data["keys"][2:3], data["inv_freq"], meta["prompt"])
    assert torch.equal(alone[0], data["kept_no_noise"][2])
