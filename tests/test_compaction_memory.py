"""Every registered decode-time method's compaction scratch (``memory.compaction_bytes`` with the method's own
``compaction_scratch``) against the tensor bytes one ``compact_rows`` call allocates, tracked on CPU
(``bench.live_bytes.LiveBytes``): never below, at most 15% above, at a few shapes (rows, heads, KV heads, slots,
layers, head dim, dtype bytes). The methods come from the registry, so a new one is checked the day it registers."""

from __future__ import annotations

import pytest

from bench.planner_terms import arch_of, decode_methods, method_for, modelled_compaction, tracked_compaction

SHAPES = [  # (R, H, H_kv, S, L, D, b): tiny_llama's heads in fp32; bf16; SmolLM2's heads over a few layers
    (2, 4, 2, 64, 2, 16, 4),
    (2, 4, 2, 128, 2, 16, 2),
    pytest.param((1, 9, 3, 96, 3, 64, 2), marks=pytest.mark.slow),
]

@pytest.mark.parametrize("shape", SHAPES, ids=["tiny-fp32", "tiny-bf16", "smollm2-heads-bf16"])
@pytest.mark.parametrize("name", sorted(decode_methods()))
def test_modelled_compaction_scratch_bounds_the_tracked_peak_within_15_percent(name, shape, tmp_path):
    R, H, H_kv, S, L, D, b = shape
    arch = arch_of(H, H_kv, L, D, b)
    method = method_for(decode_methods()[name], arch, S, tmp_path)
    tracked = tracked_compaction(method, arch, R, S)
    modelled = R * modelled_compaction(method, arch, S)
    assert tracked <= modelled <= 1.15 * tracked, (tracked, modelled)

def test_triattention_per_layer_pruning_is_bounded_too(tmp_path):
    """The knob that changes what TriAttention holds across layers (no stack of every layer's scores)."""
    arch = arch_of(9, 3, 3, 64, 2)
    method = method_for(decode_methods()["triattention"], arch, 96, tmp_path, pruning="per_layer_per_head")
    tracked = tracked_compaction(method, arch, 1, 96)
    assert tracked <= modelled_compaction(method, arch, 96) <= 1.15 * tracked
