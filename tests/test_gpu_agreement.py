"""The GPU check's greedy token agreement (bench/gpu/agreement.py): teacher-forced argmax, judged exactly in fp32
and within a stated tolerance in bf16 (disagreements only at the reference's near-ties)."""

from __future__ import annotations

import torch

from bench.gpu.agreement import BF16, EXACT, against_transformers, engine_greedy, forced_tokens, judge

REF = [5, 6, 7, 8, 9, 10, 11, 12]


def flipping_path(flip_at: set[int]):
    """A path that follows the reference (REF after the prompt) except at the positions in ``flip_at`` (counted from
    the prompt's end), where it picks another token."""
    def run(ids: list[int], n: int) -> list[int]:
        k = len(ids) - 2  # the prompt is two tokens
        return [REF[k + j] + (100 if k + j in flip_at else 0) for j in range(n)]
    return run


def reference(ids: list[int], n: int) -> list[int]:
    k = len(ids) - 2
    return REF[k:k + n]


def test_forced_tokens_compares_the_argmax_at_every_position_fed_the_reference():
    """A path that leaves the reference at positions 2 and 5 is fed the reference's tokens after each: it is
    compared at every position (not only up to its first departure), and disagrees at exactly those two."""
    ref, got, starts = forced_tokens(reference, flipping_path({2, 5}), [1, 2], len(REF))
    assert ref == REF and starts == 3
    assert [i for i in range(len(REF)) if got[i] != ref[i]] == [2, 5]
    ref, got, starts = forced_tokens(reference, flipping_path({0, 1, 2, 3, 4, 5}), [1, 2], len(REF), max_starts=4)
    assert starts == 4 and ref == REF[:4] and got == [t + 100 for t in REF[:4]]  # bounded: judged on what it compared


def test_the_verdict_exact_in_fp32_and_near_ties_only_in_bf16():
    gaps = [0.5] * 8
    gaps[3] = 0.01  # a near-tie in bf16 (margin 2**-5), not in fp32
    one_tie = [*REF[:3], 99, *REF[4:]]
    assert judge(REF, REF, gaps, EXACT)["passed"]
    assert not judge(REF, one_tie, gaps, EXACT)["passed"]  # fp32: exact
    v = judge(REF, one_tie, gaps, BF16)
    assert v["disagree_at"] == [3] and v["disagree_not_near_tie"] == [] and v["agreement"] == 7 / 8
    assert not v["passed"]  # 7/8 < 0.95: too many even at near-ties
    long_ref = REF * 4
    long_got = [*long_ref[:3], 99, *long_ref[4:]]
    long_gaps = gaps * 4
    assert judge(long_ref, long_got, long_gaps, BF16)["passed"]  # 31/32 agree, the one miss a near-tie
    wide = [*long_ref[:1], 99, *long_ref[2:]]  # a miss where the reference's top-2 gap is wide
    assert judge(long_ref, wide, long_gaps, BF16)["disagree_not_near_tie"] == [1]
    assert not judge(long_ref, wide, long_gaps, BF16)["passed"]
    assert not judge(REF, REF[:4], None, BF16)["passed"]  # a path that stopped short disagrees where it has none


def test_the_engine_agrees_with_plain_transformers_exactly_in_fp32_and_within_tolerance_in_bf16():
    """The tiny model's engine (eager, through Engine.run) against transformers' own greedy loop, teacher-forced:
    fp32 exact; bf16 judged with BF16 (what the GPU check states)."""
    import snapstream_core as ss
    from bench.gpu.model import build_model
    from snapstream_core.engine import Engine

    model, _ = build_model(tiny=True)
    prompt = torch.randint(0, model.config.vocab_size, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    for dtype, tol in ((torch.float32, EXACT), (torch.bfloat16, BF16)):
        model = model.to(dtype)
        engine = Engine(model, ss.compression_from_config({"method": "none"}), ss.SamplingConfig(max_new_tokens=24),
                        eos=[], rows=1)
        out = against_transformers(model, {"engine": engine_greedy(engine)}, prompt, 24)
        v = out["engine"]
        assert (v["min_agreement"], v["margin"]) == (tol.min_agreement, tol.margin)
        assert v["positions"] == 24 and v["passed"], v
