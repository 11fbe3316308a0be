"""The benchmark's CPU memory placement (``bench.cpu_decode.memory``): blocks on huge-page boundaries advised for
transparent huge pages, tensors carved from them, a model's parameters moved into one block with values, identities
and ties kept (by the bench's loader only), and the compiled step's K/V slot buffers in one block when the bench's
kernels are plugged in."""

from __future__ import annotations

import mmap
import sys

import pytest
import torch

import snapstream_core as ss
from bench.cpu_decode import KERNELS, memory
from snapstream_core.engine.rows import RowCache
from snapstream_core.generate import SamplingConfig, generate
from tests.conftest import tiny_config

LINUX = sys.platform.startswith("linux")


def _vm_flags(ptr: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds address ``ptr`` (Linux /proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= ptr < hi
            elif inside and line.startswith("VmFlags:"):
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {ptr:#x}")


def test_a_block_is_zeroed_writable_aligned_and_outlives_its_views():
    block = memory.cpu_block(3 * 2**20 + 5)
    assert block.dtype == torch.uint8 and block.shape == (3 * 2**20 + 5,) and block.device.type == "cpu"
    assert int(block.sum()) == 0
    view = block[128:256].view(torch.float32)
    del block
    view.fill_(2.5)  # the mapping is still there
    assert float(view.sum()) == 2.5 * 32
    if LINUX:
        assert view.data_ptr() % memory.HUGE_PAGE == 128


@pytest.mark.skipif(not LINUX, reason="madvise and /proc/self/smaps are Linux's")
def test_a_block_is_advised_for_huge_pages():
    if memory.huge_pages() == "never":
        pytest.skip("transparent huge pages are off on this machine")
    block = memory.cpu_block(4 * 2**20)
    assert "hg" in _vm_flags(block.data_ptr())  # MADV_HUGEPAGE was accepted for the mapping
    # the control is a fresh mapping of our own, never advised (the allocator's memory may sit in a mapping another
    # part of the process advised: torch madvises its large blocks under THP_MEM_ALLOC_ENABLE, for one)
    ordinary = torch.frombuffer(mmap.mmap(-1, 4 * 2**20), dtype=torch.uint8)
    assert "hg" not in _vm_flags(ordinary.data_ptr())


def test_carved_tensors_are_zeroed_aligned_and_do_not_overlap():
    shapes = [(2, 3, 5, 7), (1,), (4, 16)]
    a, b, c = memory.cpu_zeros(shapes, torch.float32)
    assert [t.shape for t in (a, b, c)] == [torch.Size(s) for s in shapes]
    assert all(t.is_contiguous() and t.dtype == torch.float32 and int(t.count_nonzero()) == 0 for t in (a, b, c))
    assert all(t.data_ptr() % memory.ALIGN == 0 for t in (a, b, c))
    assert a.untyped_storage().data_ptr() == c.untyped_storage().data_ptr()  # one block
    a.fill_(1.0)
    b.fill_(2.0)
    assert int(c.count_nonzero()) == 0 and float(a.sum()) == a.numel() and float(b.sum()) == 2.0
    assert b.data_ptr() >= a.data_ptr() + a.numel() * 4 and c.data_ptr() >= b.data_ptr() + 4
    (h,) = memory.cpu_zeros([(3,)], torch.bfloat16)
    assert h.dtype == torch.bfloat16 and h.tolist() == [0.0, 0.0, 0.0]


def test_packing_keeps_values_parameters_and_ties_and_the_generated_tokens():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config(tie_word_embeddings=True)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    prompt = torch.randint(1, 1000, (1, 80), generator=torch.Generator().manual_seed(1)).tolist()

    def tokens():
        method, config = ss.SnapStream(prompt_budget=48, recent=4), SamplingConfig(max_new_tokens=12)
        return generate(model, prompt, method, config, eos_token_ids=[], pad_token_id=0).tokens

    before_tokens = tokens()

    moved = memory.pack_parameters(model)

    assert list(model.parameters()) == params and all(isinstance(p, torch.nn.Parameter) for p in params)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied, moved once
    assert moved == sum((p.numel() * 4 + 63) // 64 * 64 for p in params)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    storages = {p.untyped_storage().data_ptr() for p in params}
    assert len(storages) == 1  # one block
    starts = [p.data_ptr() for p in params]
    assert starts == sorted(starts) and all(s % memory.ALIGN == 0 for s in starts)  # module order, cache lines
    assert tokens() == before_tokens


def test_packing_moves_nothing_off_the_cpu():
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(tiny_config())
    assert memory.pack_parameters(model) == 0
    assert all(p.device.type == "meta" for p in model.parameters())


def test_the_bench_loader_packs_cpu_weights_and_the_harness_loader_does_not():
    from omegaconf import OmegaConf

    from bench.config import BenchConfig
    from bench.models import REPO, load
    from evals.config.models import load_model

    def storages(model):
        return {p.untyped_storage().data_ptr() for p in model.parameters()}

    harness, _ = load_model(OmegaConf.load(REPO / "conf" / "model" / "tiny_llama.yaml"))
    assert len(storages(harness)) > 1  # loading a model does no CPU-specific packing
    cfg = BenchConfig(model="tiny_llama", contexts=(64,))
    model, _ = load(cfg, 64)
    assert len(storages(model)) == 1
    if LINUX and memory.huge_pages() != "never":
        assert "hg" in _vm_flags(next(model.parameters()).data_ptr())
    unpacked, _ = load(cfg.with_(cpu_kernels=False), 64)
    assert len(storages(unpacked)) > 1


def test_the_engines_row_buffers_are_one_block_with_the_bench_kernels(tiny_model):
    from snapstream_core.attention import attach

    attach(tiny_model)  # the wrapper that compresses the cache at the end of the prefill
    method = ss.SnapStream(prompt_budget=48, recent=8)
    cache = ss.make_cache(tiny_model, method)
    ids = torch.randint(1, 1000, (1, 100))
    with torch.no_grad():
        tiny_model(input_ids=ids, past_key_values=cache)
    slots = method.slots(100, 5)
    stock = RowCache.empty(2, slots, cache)
    assert len({k.untyped_storage().data_ptr() for k in (*stock.keys, *stock.values)}) == 2 * len(cache.layers)
    rows = RowCache.empty(2, slots, cache, KERNELS.zeros)
    buffers = [*rows.keys, *rows.values]
    assert len({t.untyped_storage().data_ptr() for t in buffers}) == 1
    assert all(t.is_contiguous() and t.data_ptr() % memory.ALIGN == 0 for t in buffers)
    n = rows.load(1, cache)[3]
    for i, layer in enumerate(cache.layers):  # the prefilled slots were copied into row 1; row 0 and the rest are zero
        assert torch.equal(rows.keys[i][1, :, :n], layer.keys[0, :, :n])
        assert torch.equal(rows.values[i][1, :, :n], layer.values[0, :, :n])
        assert int(rows.keys[i][1, :, n:].count_nonzero()) == 0 and int(rows.keys[i][0].count_nonzero()) == 0
