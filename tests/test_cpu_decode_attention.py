"""The benchmark's CPU decode attention kernel (bench.cpu_decode.cpu_attention, csrc/decode_attention.cpp) against
SDPA, and plugged into the compiled step through ``DecodeKernels.attention``."""

import functools
import logging

import pytest
import torch
import torch.nn.functional as F

from bench.cpu_decode import KERNELS, cpu_attention
from snapstream_core import attention


@pytest.fixture(scope="module", autouse=True)
def built():
    assert cpu_attention.build(), "the kernel must build here (g++ and ninja are in the test environment)"


def _inputs(B, H, G, S, D, seed=0, p_visible=0.6):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, G, D, generator=g)
    # keys as a view into a wider slot buffer (strided in S and H), as the static cache may hand them over
    k = torch.randn(B, H, S + 5, D, generator=g)[:, :, 3 : 3 + S]
    v = torch.randn(B, H, S, D, generator=g)
    visible = torch.rand(B, H, S, generator=g) < p_visible
    visible[..., -1] = True  # the slot just written is always visible in a decode step
    return q, k, v, visible


def _sdpa(q, k, v, visible, scale):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=visible[:, :, None, :], scale=scale)


@pytest.mark.parametrize("D", [16, 64, 128])
@pytest.mark.parametrize("G", [1, 3, 4, 7])  # rows go four at a time: 7 = 4 + 3
@pytest.mark.parametrize("S", [1, 255, 256, 257, 1300])
def test_the_kernel_equals_sdpa_over_the_visible_slots(D, G, S):
    q, k, v, visible = _inputs(2, 3, G, S, D, seed=D * 1000 + G * 10 + S)
    out = cpu_attention.decode_attention(q, k, v, visible, 0.17)
    assert out.shape == (2, 3, G, D)
    torch.testing.assert_close(out, _sdpa(q, k, v, visible, 0.17), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("D", [32, 96])
@pytest.mark.parametrize("G", [2, 5, 8])
def test_the_other_head_dims_and_row_groups(D, G):
    q, k, v, visible = _inputs(1, 2, G, 700, D, seed=D + G)
    out = cpu_attention.decode_attention(q, k, v, visible, 0.2)
    torch.testing.assert_close(out, _sdpa(q, k, v, visible, 0.2), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("transpose_query", [False, True])
@pytest.mark.parametrize(("B", "H", "G", "S", "D"), [(1, 3, 3, 1280, 64), (2, 2, 5, 300, 32), (1, 1, 1, 0, 16)])
def test_the_output_layout_is_the_one_its_shape_rule_gives(B, H, G, S, D, transpose_query):
    """The compiled step does not re-check the kernel's output sizes and strides at run time (no ``size_asserts``,
    bench.cpu_decode.gemv): what inductor planned from the shape rule (``_fake``) must be what the kernel returns."""
    q, k, v, visible = _inputs(B, H, G, S, D, seed=S + G) if S else _inputs(B, H, G, 1, D)
    if not S:
        k, v, visible = k[:, :, :0], v[:, :, :0], visible[..., :0]
    if transpose_query:  # a query that is a strided view, as a reshape of the projection can hand it over
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    op = torch.ops.snapstream.decode_attention.default
    torch.library.opcheck(op, (q, k, v, visible, 0.125), test_utils=("test_schema", "test_faketensor"))
    out = cpu_attention.decode_attention(q, k, v, visible, 0.125)
    assert out.shape == (B, H, G, D) and out.is_contiguous()


def test_whole_blocks_of_masked_slots_and_a_single_visible_slot():
    q, k, v, visible = _inputs(1, 2, 3, 1000, 64, seed=1)
    visible[:, 0, :] = False
    visible[:, 0, 700] = True  # one visible slot, in the third block: the output is that slot's value
    visible[:, 1, :512] = False  # the first two blocks of the other head are masked whole
    out = cpu_attention.decode_attention(q, k, v, visible, 0.125)
    torch.testing.assert_close(out[0, 0], v[0, 0, 700].expand(3, 64), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out, _sdpa(q, k, v, visible, 0.125), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("S", [40, 300, 1280, 1301])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_runs_of_masked_sub_blocks_are_skipped_and_change_nothing(S, seed):
    """The kernel reads only the 32-slot sub-blocks with a visible slot (a ring not full yet, slots of tokens not
    decoded yet): random runs of wholly masked sub-blocks, runs that end in a block's last, partial sub-block."""
    q, k, v, visible = _inputs(1, 3, 3, S, 64, seed=seed)
    g = torch.Generator().manual_seed(seed)
    for h in range(3):
        for start in torch.randint(0, S, (4,), generator=g).tolist():
            visible[0, h, start : start + int(torch.randint(1, 200, (1,), generator=g))] = False
    visible[0, 1, : S - 1] = False  # one head sees only its last slot
    visible[0, :, S - 1] = True
    out = cpu_attention.decode_attention(q, k, v, visible, 0.125)
    torch.testing.assert_close(out, _sdpa(q, k, v, visible, 0.125), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(out[0, 1], v[0, 1, S - 1].expand(3, 64), atol=1e-6, rtol=1e-6)


def test_a_ring_that_is_not_full_reads_no_masked_sub_block():
    """The layout of snapstream's slots early in decoding (1,024 kept, a ring of 256 with 20 filled): NaN in the
    unfilled sub-blocks' keys and values does not reach the output, which is SDPA's over the filled slots."""
    q, k, v, visible = _inputs(1, 3, 3, 1280, 64, seed=5, p_visible=1.0)
    visible[..., 1044:] = False
    k[..., 1056:, :] = float("nan")  # sub-blocks 33.. of the ring hold no visible slot
    v[..., 1056:, :] = float("nan")
    out = cpu_attention.decode_attention(q, k, v, visible, 0.125)
    assert not out.isnan().any()
    expected = _sdpa(q, k[..., :1044, :], v[..., :1044, :], visible[..., :1044], 0.125)
    torch.testing.assert_close(out, expected, atol=2e-6, rtol=1e-5)


def test_a_row_with_no_visible_slot_gives_zeros_and_nan_stays_nan():
    q, k, v, visible = _inputs(1, 2, 3, 300, 64, seed=2)
    visible[0, 1] = False
    q[0, 0, 2, 5] = float("nan")
    out = cpu_attention.decode_attention(q, k, v, visible, 0.125)
    assert torch.equal(out[0, 1], torch.zeros(3, 64))
    assert out[0, 0, 2].isnan().all()  # a NaN query is not turned into a finite output
    assert not out[0, 0, :2].isnan().any()


def test_no_slots_at_all_gives_zeros_as_sdpa_does():
    q, k, v, visible = _inputs(1, 2, 3, 1, 64)
    k, v, visible = k[:, :, :0], v[:, :, :0], visible[:, :, :0]
    out = cpu_attention.decode_attention(q, k, v, visible, 0.125)
    assert torch.equal(out, torch.zeros(1, 2, 3, 64))
    assert torch.equal(out, _sdpa(q, k, v, visible, 0.125))


def test_the_kernel_refuses_what_it_does_not_take():
    q, k, v, visible = _inputs(1, 2, 3, 10, 64)
    with pytest.raises(RuntimeError, match="head dim"):
        cpu_attention.decode_attention(q[..., :8], k[..., :8], v[..., :8], visible, 0.1)
    with pytest.raises(RuntimeError, match="float32"):
        cpu_attention.decode_attention(q.double(), k.double(), v.double(), visible, 0.1)
    with pytest.raises(RuntimeError, match=r"visible shape"):
        cpu_attention.decode_attention(q, k, v, visible[:, :, :5], 0.1)
    too_many = torch.randn(1, 2, cpu_attention.MAX_GROUP + 1, 64)
    with pytest.raises(RuntimeError, match="query rows per KV head"):
        cpu_attention.decode_attention(too_many, k, v, visible, 0.1)
    assert not cpu_attention.usable(too_many, k)
    assert cpu_attention.usable(q, k)
    assert not cpu_attention.usable(q[..., :8], k[..., :8])
    assert not cpu_attention.usable(q[:, :, :0], k)  # no query rows
    assert not cpu_attention.usable(q.bfloat16(), k.bfloat16())
    assert cpu_attention.packed_attention(q[..., :8], k[..., :8], v[..., :8], visible, 0.1) is None  # SDPA's


def _packed_graph(query, key, value, visible, scaling, kernel=KERNELS.attention):
    """packed_sdpa with ``kernel`` plugged in, under torch.compile (fullgraph): its output and the graph's call
    targets."""
    targets = []

    def record(gm, example_inputs):
        targets.extend(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm

    torch._dynamo.reset()
    step = torch.compile(functools.partial(attention.packed_sdpa, kernel=kernel), backend=record, fullgraph=True)
    return step(query, key, value, visible, scaling)[0], targets


def test_the_compiled_static_step_calls_the_kernel_for_packed_gqa():
    """(B, H, 1, D) queries with H = 3 * H_kv: the graph calls the kernel, with the SDPA of repeated heads' output."""
    q, k, v, visible = _inputs(2, 2, 3, 600, 64, seed=3)
    query = q.reshape(2, 6, 1, 64)
    out, targets = _packed_graph(query, k, v, visible, 0.125)
    assert any("snapstream.decode_attention" in t for t in targets), targets
    assert not any("scaled_dot_product" in t for t in targets), targets
    mask = visible[:, :, None, :].repeat_interleave(3, dim=1)
    ref = F.scaled_dot_product_attention(
        query, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=mask, scale=0.125
    )
    torch.testing.assert_close(out, ref.transpose(1, 2), atol=2e-6, rtol=1e-5)


def test_the_bench_kernels_plug_into_the_compiled_decode_step(tiny_model):
    """``Step(kernels=KERNELS)``, the engine's compiled step: the traced step of a whole model calls the kernel in
    every layer, and its logits are those of the core's step without it (SDPA)."""
    import snapstream_core as ss
    from snapstream_core.attention import attach
    from snapstream_core.engine.rows import RowCache
    from snapstream_core.engine.step import Step

    attach(tiny_model)
    ids = torch.randint(1, 1000, (1, 120), generator=torch.Generator().manual_seed(0))
    logits, calls = [], []

    def record(gm, example_inputs):
        calls.append(sum("snapstream.decode_attention" in str(n.target) for n in gm.graph.nodes))
        return gm.forward

    method = ss.SnapStream(prompt_budget=48, recent=8)
    for kernels in (None, KERNELS):
        cache = ss.make_cache(tiny_model, method)
        with torch.no_grad():
            tiny_model(input_ids=ids, past_key_values=cache)
            rows = RowCache.empty(4, method.slots(120, 2), cache, None if kernels is None else kernels.zeros)
            base = [rows.load(r, cache)[0] for r in range(4)]
            torch._dynamo.reset()
            step = Step(True, "cpu", record, kernels=kernels)
            tokens = ids[:, -1:].expand(4, 1).contiguous()
            positions = torch.full((4, 1), 120, dtype=torch.long)
            logits.append(step(tiny_model, rows, tokens, positions, torch.tensor(base, dtype=torch.long)))
    torch._dynamo.reset()
    assert calls == [0, tiny_model.config.num_hidden_layers]
    torch.testing.assert_close(logits[1], logits[0], atol=1e-5, rtol=1e-5)


def test_without_the_kernel_the_core_step_calls_sdpa():
    q, k, v, visible = _inputs(2, 2, 3, 60, 64, seed=3)
    out, targets = _packed_graph(q.reshape(2, 6, 1, 64), k, v, visible, 0.125, kernel=None)
    assert not any("snapstream.decode_attention" in t for t in targets), targets
    assert any("scaled_dot_product" in t for t in targets), targets
    torch.testing.assert_close(out, _sdpa(q, k, v, visible, 0.125).reshape(2, 6, 1, 64).transpose(1, 2))


def test_shapes_the_kernel_does_not_take_go_to_sdpa():
    q, k, v, visible = _inputs(1, 2, 2, 50, 8, seed=4)
    out, targets = _packed_graph(q.reshape(1, 4, 1, 8), k, v, visible, 0.3)
    assert not any("snapstream.decode_attention" in t for t in targets), targets
    torch.testing.assert_close(out, _sdpa(q, k, v, visible, 0.3).reshape(1, 4, 1, 8).transpose(1, 2))


def test_a_failed_build_is_logged_once_and_leaves_sdpa(monkeypatch, caplog):
    from torch.utils import cpp_extension

    def no_compiler(**kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    monkeypatch.setattr(cpu_attention, "_state", {"tried": False, "op": None})
    with caplog.at_level(logging.WARNING, logger="bench.cpu_decode.cpu_attention"):
        assert cpu_attention.build() is False
        assert cpu_attention.build() is False
    assert [r.getMessage() for r in caplog.records].count(
        "compiled decode: the CPU attention kernel could not be built (no C++ compiler); using SDPA"
    ) == 1
    q, k, v, visible = _inputs(1, 2, 3, 40, 64)
    assert not cpu_attention.usable(q, k)
    assert cpu_attention.packed_attention(q, k, v, visible, 0.1) is None


def test_no_ninja_anywhere_is_a_failed_build_not_an_exception(monkeypatch, caplog):
    import shutil
    import sys

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "ninja", None)  # import ninja raises ImportError
    monkeypatch.setattr(cpu_attention, "_state", {"tried": False, "op": None})
    with caplog.at_level(logging.WARNING, logger="bench.cpu_decode.cpu_attention"):
        assert cpu_attention.build() is False
    assert any("could not be built" in r.getMessage() for r in caplog.records)
