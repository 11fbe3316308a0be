"""The engine's compiled decode step (``gen.compile``): the same greedy tokens as the eager engine for every method
(ratio variants included), one graph for every decode step and prompt length of a run, and the one hook for
device kernels (``DecodeKernels``).

The tests trace with dynamo's ``eager`` backend (the same graph capture, no code generation: seconds); the inductor
test compiles for real (a minute on 2 cores) and is marked slow.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import snapstream_core as ss
from snapstream_core.attention import packed_sdpa
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.engine.step import DecodeKernels, resolve_compile
from snapstream_core.sampling import SamplingConfig
from tests.method_matrix import IDS, METHODS, prompts


def run(model, ps, method, new, compile=False, backend="eager", rows=2, **kw):
    """{item: tokens} of one greedy sample per prompt, and the engine."""
    eng = Engine(model, method, SamplingConfig(max_new_tokens=new), eos=[], rows=rows, compile=compile,
                 compile_backend=backend, **kw)
    got = {}
    for ended in eng.run([EngineItem(p, i, (0,), new, tag=i) for i, p in enumerate(ps)]):
        got.update({f.item.tag: f.tokens for f in ended})
    return got, eng


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_compiled_greedy_tokens_equal_eager_and_one_graph_serves_the_run(tiny_model, method):
    torch._dynamo.reset()
    counter = CompileCounter()
    ps = prompts((300, 120, 40))  # rings wrap (16 new tokens > recent 8)
    eager, _ = run(tiny_model, ps, method, 16, rows=4)
    compiled, eng = run(tiny_model, ps, method, 16, compile=True, backend=counter, rows=4)
    assert eng.stats.compiled and compiled == eager
    assert counter.frame_count == 1  # 3 prompts x 15 decode steps, one capture
    torch._dynamo.reset()


@pytest.mark.slow
def test_inductor_compiled_tokens_equal_eager(tiny_model):
    ps = prompts((200, 90))
    method = ss.SnapStream(prompt_budget=64, recent=8)
    eager, _ = run(tiny_model, ps, method, 20, rows=4)
    compiled, eng = run(tiny_model, ps, method, 20, compile=True, backend="inductor", rows=4)
    assert compiled == eager and eng.stats.first_step_s > 0


def test_the_compile_knob_is_checked():
    assert resolve_compile("auto", torch.device("cpu")) is False
    assert resolve_compile("auto", torch.device("cuda")) is True
    assert resolve_compile(True, torch.device("cpu")) is True
    with pytest.raises(ValueError, match="gen.compile"):
        resolve_compile("yes", torch.device("cpu"))


@pytest.mark.parametrize("B,H,H_kv", [(1, 9, 3), (2, 4, 2), (3, 4, 4)])
def test_packed_gqa_attention_equals_the_stock_sdpa_over_repeated_heads(B, H, H_kv):
    torch.manual_seed(0)
    S, D = 37, 16
    q, k, v = torch.randn(B, H, 1, D), torch.randn(B, H_kv, S, D), torch.randn(B, H_kv, S, D)
    visible = torch.rand(B, H_kv, S) > 0.3
    visible[..., 0] = True
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = H // H_kv, True
    mask = visible[:, :, None, :].repeat_interleave(H // H_kv, dim=1)
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
    out, _ = packed_sdpa(q, k, v, visible, 0.25)
    assert out.shape == (B, 1, H, D)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_decode_kernels_plug_in_backend_attention_and_row_memory(tiny_model):
    """The core's one hook for device kernels: with ``backend="inductor"`` the kernels' compile backend replaces
    inductor, ``prepare`` runs once before tracing, the attention sees every layer's packed query rows (None: SDPA,
    so the tokens are the stock step's), and the rows' K/V come from ``zeros``."""
    calls = {"prepare": 0, "backend": 0, "attention": None, "zeros": 0}

    def backend(gm, example_inputs):
        calls["backend"] += 1
        return gm.forward

    def attention(query, key, value, visible, scale):
        calls["attention"] = tuple(query.shape)  # a write, not a read: replayed every call, no guard on it
        return None

    def zeros(shapes, dtype):
        calls["zeros"] += 1
        return [torch.zeros(s, dtype=dtype) for s in shapes]

    def prepare():
        calls["prepare"] += 1

    torch._dynamo.reset()
    kernels = DecodeKernels("test", compile_backend=backend, attention=attention, zeros=zeros, prepare=prepare)
    method = ss.SnapStream(prompt_budget=48, recent=8)
    ps = prompts((90,))
    ref, _ = run(tiny_model, ps, method, 6, rows=4)
    got, _ = run(tiny_model, ps, method, 6, compile=True, backend="inductor", rows=4, kernels=kernels)
    assert got == ref
    assert calls["prepare"] == calls["backend"] == calls["zeros"] == 1
    heads, kv_heads = 4, 2
    assert calls["attention"] == (4, kv_heads, heads // kv_heads, 16)  # the packed query rows of the 4 rows
    torch._dynamo.reset()
