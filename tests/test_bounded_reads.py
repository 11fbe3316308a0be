"""Reads bounded to each row's filled slots with FlexAttention: the block mask built from the rows' fill lengths
reads every visible slot and no block past a row's fill, the numbers equal SDPA with the slot mask, and the engine's
tokens do not change. The unfused (eager) FlexAttention ignores the block structure, so the blocks are checked on
their own, and the compiled CPU kernel (slow) shows that blocks past the fill are really skipped."""

from __future__ import annotations

import math

import pytest
import torch

import snapstream_core as ss
from evals.plan.device import H100
from snapstream_core.engine.attention import fill_block_mask, fill_blocks, flex_decode_attention
from snapstream_core.memory import READ_BLOCK
from snapstream_core.sampling import SamplingConfig
from tests.test_engine import NEW, engine_run, prompts

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

B, H_KV, G, S, D = 5, 2, 3, 300, 16  # S not a multiple of the block; GQA with 3 query heads per KV head
FILL = (0, 1, 127, 129, 300)  # an empty row, one slot, either side of a block edge, a full row


def tensors(seed=0):
    """Random q (B, H_kv, G, D), k/v (B, H_kv, S, D), fill (B,) and a visibility with holes below each fill."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*shape, generator=gen) for shape in ((B, H_KV, G, D), (B, H_KV, S, D), (B, H_KV, S, D)))
    fill = torch.tensor(FILL)
    below = torch.arange(S)[None, None, :] < fill.clamp(min=1)[:, None, None]  # a row always sees its own slot
    holes = torch.rand(B, H_KV, S, generator=gen) > 0.3
    holes[..., 0] = True
    visible = below & holes
    return q, k, v, visible, fill


def test_fill_blocks_are_each_rows_fill_rounded_up_to_the_block():
    fill = torch.tensor(FILL)
    want = [max(1, math.ceil(min(f, S) / READ_BLOCK)) for f in FILL]
    assert fill_blocks(fill, S).tolist() == want == [1, 1, 1, 2, 3]
    mask = fill_block_mask(fill, S)
    assert mask.kv_num_blocks.shape == (B, 1, 1) and mask.kv_num_blocks.flatten().tolist() == want
    assert mask.BLOCK_SIZE == (READ_BLOCK, READ_BLOCK) and mask.seq_lengths == (1, S)
    assert fill_blocks(torch.tensor([1000]), S).tolist() == [3]  # a bound past the slots reads them all


def test_the_block_mask_reads_every_visible_slot_and_no_block_past_the_fill():
    _, _, _, visible, fill = tensors()
    dense = fill_block_mask(fill, S).to_dense()[:, 0, 0]  # (B, blocks) 1 where read
    read = dense.repeat_interleave(READ_BLOCK, dim=-1)[:, :S].bool()  # (B, S) slots in read blocks
    assert (read[:, None, :] | ~visible).all()  # every visible slot is read
    for b, f in enumerate(FILL):
        assert int(read[b].sum()) == min(S, max(1, math.ceil(f / READ_BLOCK)) * READ_BLOCK)


def test_block_masked_flex_attention_equals_sdpa_with_the_slot_mask():
    q, k, v, visible, fill = tensors()
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible[:, :, None, :], scale=0.3)
    torch.testing.assert_close(flex_decode_attention(q, k, v, visible, 0.3, fill), ref)
    torch.testing.assert_close(flex_decode_attention(q, k, v, visible, 0.3), ref)  # no bound: all S slots


def test_the_planner_rounds_reads_to_the_engines_block():
    assert H100.read_block == READ_BLOCK


@pytest.mark.parametrize("method", [ss.NoCompression(), ss.SnapKV(prompt_budget=200)], ids=["none", "snapkv"])
def test_engine_with_bounded_flex_reads_gives_the_same_tokens(tiny_model, method):
    """Rows of different fills (prompts of 40 to 300 tokens, 2 rows): FlexAttention with each row's block mask gives
    the tokens of SDPA over every slot; it reads fewer slots than the rows hold; no visible slot lies past a fill."""
    greedy = SamplingConfig(max_new_tokens=NEW)
    ps = prompts((40, 90, 300))
    ref, every = engine_run(tiny_model, method, greedy, ps, [(0,)] * 3, rows=2, read_block=None)
    got, eng = engine_run(tiny_model, method, greedy, ps, [(0,)] * 3, rows=2, read_block=None, attention="flex")
    assert got == ref
    assert eng.bounded and not every.bounded
    assert every.stats.read_share == 1.0 and 0 < eng.stats.read_share < 1.0
    slots = torch.arange(eng.cache.slots)
    past = slots[None, None, :] >= eng.batch.fill[:, None, None]  # (R, 1, S)
    assert not (eng.cache.visible & past[None]).any()


def test_ring_rows_read_all_their_slots(tiny_model):
    method = ss.SnapStream(prompt_budget=64, recent=8)
    greedy = SamplingConfig(max_new_tokens=NEW)
    ps = prompts((40, 130))
    ref, _ = engine_run(tiny_model, method, greedy, ps, [(0,)] * 2, rows=2, read_block=None)
    got, eng = engine_run(tiny_model, method, greedy, ps, [(0,)] * 2, rows=2, read_block=None, attention="flex")
    assert got == ref and eng.stats.read_share == 1.0


def test_traced_step_passes_the_fill_to_flex(tiny_model):
    """The compiled step (traced whole by Dynamo, run by the eager backend) builds the block mask in the graph."""
    method = ss.NoCompression()
    greedy = SamplingConfig(max_new_tokens=NEW)
    ps = prompts((40, 300))
    ref, _ = engine_run(tiny_model, method, greedy, ps, [(0,)] * 2, rows=2, read_block=None)
    got, eng = engine_run(tiny_model, method, greedy, ps, [(0,)] * 2, rows=2, attention="flex", compile=True,
                          compile_backend="eager", check_every=4)
    assert got == ref and eng.stats.compiled and eng.bounded and eng.stats.read_share < 1.0


@pytest.mark.slow
def test_compiled_flex_skips_the_blocks_past_the_fill():
    """Inductor's fused CPU FlexAttention: equal to SDPA with the bound, and a bound below the visible slots changes
    the output (the kernel really skips the blocks past a row's fill)."""
    q, k, v, visible, fill = tensors()
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible[:, :, None, :], scale=0.3)
    fn = torch.compile(flex_decode_attention, backend="inductor", fullgraph=True)
    torch.testing.assert_close(fn(q, k, v, visible, 0.3, fill), ref)
    short = fn(q, k, v, visible, 0.3, torch.ones_like(fill))
    assert (short - ref).abs().amax(dim=(1, 2, 3))[3:].min() > 1e-3  # rows with visible slots past block 0
