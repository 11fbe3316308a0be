"""The compiled static-shape decode (``gen.compile``): same greedy tokens as the eager path for every method, with
left-padded batches and n samples from one prefill, and one graph for every decode step and prompt length.

Most tests trace with dynamo's ``eager`` backend (the same graph capture, no code generation: seconds); the inductor
test compiles for real (a minute on 2 cores) and is marked slow.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import snapstream_core as ss
from snapstream_core.attention import _packed_sdpa
from snapstream_core.generate import SamplingConfig, generate
from snapstream_core.static_decode import resolve_compile
from tests.method_matrix import IDS, METHODS, prompts


def run(model, ps, method, new, n=1, compile=False, backend="eager", **sampling):
    return generate(
        model,
        ps,
        method,
        SamplingConfig(max_new_tokens=new, n=n, **sampling),
        eos_token_ids=[],
        pad_token_id=0,
        compile=compile,
        compile_backend=backend,
    )


@pytest.mark.parametrize(
    "method,impl", [(m, "sdpa") for m in METHODS] + [(METHODS[-1], "eager")], ids=[*IDS, "snapstream-eager"]
)
def test_compiled_greedy_tokens_equal_eager_on_tiny_llama(tiny_model, method, impl):
    tiny_model.set_attn_implementation(impl)
    ps = prompts((300, 120, 40))  # left padding; the rings wrap (24 new tokens > recent 8; streaming_llm's is full)
    eager = run(tiny_model, ps, method, 24, n=2)
    compiled = run(tiny_model, ps, method, 24, n=2, compile=True)
    tiny_model.set_attn_implementation("sdpa")
    assert compiled.compiled and not eager.compiled
    assert compiled.tokens == eager.tokens
    assert compiled.stats["kv_tokens_peak"] == eager.stats["kv_tokens_peak"]


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_one_graph_for_every_decode_step_and_prompt_length(tiny_model, method):
    torch._dynamo.reset()
    counter = CompileCounter()
    for lengths in ((300, 120), (90, 200), (70, 30)):  # padded lengths 300, 200, 70 (shorter than the budget)
        run(tiny_model, prompts(lengths), method, 12, compile=True, backend=counter)
    assert counter.frame_count == 1  # 3 prompts x 11 decode steps, one capture
    torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compiled_greedy_tokens_equal_eager_on_smollm2(smollm2, backend):
    """2 prompts x n=2 samples = 4 rows, every method; ``inductor`` is the real code generation on CPU (stock
    inductor: the benchmark's kernels are not plugged in), ``eager`` the graph capture alone."""
    model, tok = smollm2
    texts = ["The lighthouse keeper found a bottle on the shore. " * 12, "Count: one, two, three, four,"]
    ps = [tok(t)["input_ids"] for t in texts]
    for method in (ss.NoCompression(), ss.SnapKV(prompt_budget=48), ss.StreamingLLM(sinks=4, recent=28),
                   ss.SnapStream(prompt_budget=48, recent=8)):
        eager = run(model, ps, method, 14, n=2)
        compiled = run(model, ps, method, 14, n=2, compile=True, backend=backend)
        assert compiled.tokens == eager.tokens, method


@pytest.mark.slow
def test_inductor_compiled_tokens_equal_eager(tiny_model):
    ps = prompts((200, 90))
    method = ss.SnapStream(prompt_budget=64, recent=8)
    eager = run(tiny_model, ps, method, 20, n=2)
    compiled = run(tiny_model, ps, method, 20, n=2, compile=True, backend="inductor")
    assert compiled.tokens == eager.tokens
    assert compiled.first_step_s > 0


def test_sampled_compiled_decode_respects_the_footprint(tiny_model):
    torch.manual_seed(0)
    out = run(tiny_model, prompts((150,)), ss.SnapStream(prompt_budget=64, recent=8), 12, n=4, compile=True,
              temperature=1.0, top_p=0.95)
    assert all(len(t) == 12 for t in out.tokens[0])
    assert len({tuple(t) for t in out.tokens[0]}) > 1
    assert out.stats["kv_tokens_peak"] == 64 + 8


def test_eos_ends_compiled_decode_with_the_eager_cut(tiny_model):
    ps = prompts((40,), seed=7)
    free = run(tiny_model, ps, ss.NoCompression(), 10)
    eos = free.tokens[0][0][3]
    kw = dict(eos_token_ids=[eos], pad_token_id=0)
    eager = generate(tiny_model, ps, ss.NoCompression(), SamplingConfig(max_new_tokens=10), compile=False, **kw)
    compiled = generate(tiny_model, ps, ss.NoCompression(), SamplingConfig(max_new_tokens=10), compile=True,
                        compile_backend="eager", **kw)
    assert compiled.tokens == eager.tokens and compiled.finish_reasons == eager.finish_reasons == [["stop"]]


def test_the_compile_knob_is_checked():
    assert resolve_compile("auto", torch.device("cpu")) is False
    assert resolve_compile("auto", torch.device("cuda")) is True
    assert resolve_compile(True, torch.device("cpu")) is True
    with pytest.raises(ValueError, match="gen.compile"):
        resolve_compile("yes", torch.device("cpu"))


def test_in_cache_positions_refuse_an_explicit_compile(tiny_model):
    with pytest.raises(ValueError, match="gen.compile"):
        run(tiny_model, prompts((50,)), ss.SnapStream(prompt_budget=40, recent=8, positions="in_cache"), 4,
            compile=True)


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
    out, _ = _packed_sdpa(q, k, v, visible, 0.25)
    assert out.shape == (B, 1, H, D)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_decode_kernels_plug_in_backend_attention_and_slot_memory(tiny_model):
    """The core's one hook for device kernels: with ``backend="inductor"`` the kernels' compile backend replaces
    inductor, ``prepare`` runs once before tracing, the attention sees every layer's packed query rows (None: SDPA,
    so the logits are the stock step's), and the slot buffers come from ``zeros``."""
    from snapstream_core.attention import attach
    from snapstream_core.static_decode import DecodeKernels, compiled_step, to_static

    calls = {"prepare": 0, "backend": 0, "attention": [], "zeros": 0}

    def backend(gm, example_inputs):
        calls["backend"] += 1
        return gm.forward

    def attention(query, key, value, visible, scale):
        calls["attention"].append(tuple(query.shape))
        return None

    def zeros(shapes, dtype):
        calls["zeros"] += 1
        return [torch.zeros(s, dtype=dtype) for s in shapes]

    def prepare():
        calls["prepare"] += 1

    kernels = DecodeKernels("test", compile_backend=backend, attention=attention, zeros=zeros, prepare=prepare)
    attach(tiny_model)
    ids = torch.randint(1, 1000, (1, 90), generator=torch.Generator().manual_seed(0))
    logits = []
    for k in (None, kernels):
        cache = ss.make_cache(tiny_model, ss.SnapStream(prompt_budget=48, recent=8))
        with torch.no_grad():
            tiny_model(input_ids=ids, past_key_values=cache)
            plan = to_static(cache, torch.ones_like(ids, dtype=torch.bool), steps=2, kernels=k)
            step = compiled_step("cpu", "eager" if k is None else "inductor", kernels=k)
            logits.append(step(tiny_model, plan.cache, ids[:, -1:], plan.positions[:, None], plan.slots[:1]))
    assert compiled_step("cpu", "inductor", kernels=kernels) is step  # made once per (device, backend, kernels)
    assert calls["prepare"] == calls["backend"] == calls["zeros"] == 1
    layers, heads, kv_heads = 2, 4, 2
    assert calls["attention"] == [(1, kv_heads, heads // kv_heads, 16)] * layers  # traced once per layer
    torch.testing.assert_close(logits[1], logits[0])
