"""The decode-time methods' knobs and geometry without a model: one-line errors naming the field, the decoding paths
that would never compact refused, ``tokens_held`` (the sawtooth), ``peak_tokens``, ``slots`` and the mean held
against a step-by-step simulation of R-KV's schedule, and the memory model's extra terms."""

from __future__ import annotations

import pytest

import snapstream_core as ss
from snapstream_core.memory import Arch, job_terms
from snapstream_core.methods import METHODS


@pytest.mark.parametrize("knobs,field", [
    (dict(budget=8), "budget"), (dict(budget=4, window=8), "budget"), (dict(interval=0), "interval"),
    (dict(interval=-1), "interval"), (dict(interval=2.5), "interval"), (dict(window=0), "window"),
    (dict(kernel=4), "kernel"), (dict(positions="in_cache"), "positions"),
    (dict(protect_prompt="yes"), "protect_prompt"),
])
@pytest.mark.parametrize("name", ["rkv", "snapkv_decode"])
def test_bad_knobs_get_one_line_naming_the_field(name, knobs, field):
    with pytest.raises(ValueError, match=f"^compression.{field}: ") as err:
        METHODS[name](**knobs)
    assert "\n" not in str(err.value)


def test_rkv_weights_are_checked():
    for bad in (-0.1, 1.5, True):
        with pytest.raises(ValueError, match="^compression.mix_lambda: "):
            ss.RKV(mix_lambda=bad)
    with pytest.raises(ValueError, match="^compression.threshold: "):
        ss.RKV(threshold=2)


def test_paths_that_never_compact_are_refused_in_one_line():
    with pytest.raises(ValueError, match="^compression.method: rkv compacts .* generate\\(\\) would never compact$"):
        ss.RKV().check_engine("generate()")
    ss.SnapKV().check_engine("generate()")  # the others run anywhere


def simulate(method, T: int, steps: int) -> list[int]:
    """Entries held after each of ``steps`` writes, R-KV's way: the prompt cut at prefill when ``T >= budget``; the
    token at position p written, then when ``p % interval == 0`` and at least ``budget`` are held, compacted."""
    held = method.budget if T >= method.budget and not method.protect_prompt else T
    out = [held]
    for k in range(1, steps + 1):
        held += 1
        if (T + k - 1) % method.interval == 0 and held >= method.budget:
            held = min(held, method.cap(T))
        out.append(held)
    return out


@pytest.mark.parametrize("method", [ss.RKV(budget=24, interval=8, window=4), ss.SnapKVDecode(),
                                    ss.RKV(budget=40, interval=16, window=8, protect_prompt=True)])
@pytest.mark.parametrize("T", [1, 13, 23, 24, 25, 64, 100])
def test_tokens_held_is_the_sawtooth_of_the_schedule(method, T):
    steps = 3 * method.interval + 5
    held = simulate(method, T, steps)
    peaks = [held[0]] + [held[k - 1] + 1 for k in range(1, steps + 1)]
    for k in range(steps + 1):
        assert method.tokens_held(T, k) == held[k], k
        assert method.peak_tokens(T, k) == max(peaks[: k + 1]), k
    assert method.slots(T, steps + 1) == max(peaks) <= method.cap(T) + method.interval
    assert method.mean_tokens_held(T, steps) == pytest.approx(sum(held[1:]) / steps)
    assert method.keeps_all(T, steps + 1) == (max(peaks) == T + steps and T < method.budget
                                              and not any(method.compacts(T, k) for k in range(1, steps + 1)))


def test_the_memory_model_counts_positions_the_query_ring_and_the_pairwise_scratch():
    a = Arch(n_layers=32, hidden=4096, intermediate=14336, n_heads=32, n_kv_heads=8, head_dim=128, vocab=128_256,
             dtype_bytes=2)
    rkv, snap = ss.RKV(), ss.SnapKVDecode()
    T, G = 180, 32768
    slots = rkv.slots(T, G)
    assert slots == 640 == snap.slots(T, G)
    job = dict(slots=slots, max_new=G, T=T, prefill_slots=T, window=8, chunk=4096)
    plain = job_terms(a, 0, 8, **job)
    with_rkv = job_terms(a, 0, 8, **job, **rkv.row_memory(T, slots))
    extra = 8 * (slots * 32 * 8 * 8 + 32 * 32 * 8 * 128 * 2)  # positions + query ring, 8 rows
    assert with_rkv["rows"] - plain["rows"] == extra
    assert rkv.key_pairs(slots) == 640**2 and snap.key_pairs(slots) == 0
    assert rkv.row_memory(1000, slots)["prefill_pairs"] == 1000**2  # the prompt cut scores T^2 pairs
