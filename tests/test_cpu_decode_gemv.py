"""The benchmark's CPU backend of the compiled decode step (``bench.cpu_decode.gemv``): which products it rewrites,
that the rewritten graph computes the same values, that a whole decode with it gives the eager path's greedy tokens."""

from __future__ import annotations

import pytest
import torch

import snapstream_core as ss
from bench.cpu_decode.gemv import MAX_ROWS, cpu_decode_backend, rewrite_linears
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.sampling import SamplingConfig


class Block(torch.nn.Module):
    """RMSNorm-like scaling, a biased and an unbiased product, a gated one: the shapes of a decoder layer."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 24, bias=True)
        self.gate = torch.nn.Linear(16, 24, bias=False)
        self.down = torch.nn.Linear(24, 16, bias=False)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class Recorder:
    """A backend that applies :func:`rewrite_linears` and runs the rewritten graph as Python (no code generation)."""

    def __init__(self):
        self.rewritten: list[int] = []
        self.targets: list[set] = []

    def __call__(self, gm, example_inputs):
        self.rewritten.append(rewrite_linears(gm))
        self.targets.append({n.target for n in gm.graph.nodes if n.op == "call_function"})
        return gm.forward


@pytest.mark.parametrize("rows,expected", [(1, 3), (MAX_ROWS, 3), (MAX_ROWS + 1, 0)])
def test_products_with_few_rows_are_rewritten_and_keep_their_values(rows, expected):
    torch._dynamo.reset()
    torch.manual_seed(0)
    block, rec = Block().eval(), Recorder()
    x = torch.randn(rows, 1, 16)
    with torch.no_grad():
        out = torch.compile(block, backend=rec, fullgraph=True)(x)
        ref = block(x)
    assert rec.rewritten == [expected]
    assert (torch._C._nn.linear in rec.targets[0]) == (expected == 0)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


def test_the_backend_compiles_with_inductor_and_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(1)
    block = Block().eval()
    x = torch.randn(1, 1, 16)
    with torch.no_grad():
        out = torch.compile(block, backend=cpu_decode_backend, fullgraph=True)(x)
        torch.testing.assert_close(out, block(x), rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "method", [ss.NoCompression(), ss.SnapStream(prompt_budget=64, recent=8)], ids=["none", "snapstream"]
)
def test_a_decode_with_rewritten_products_gives_the_eager_tokens(tiny_model, method):
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(3)
    ps = [torch.randint(1, 1000, (n,), generator=gen).tolist() for n in (150, 60)]
    def tokens(**kw):
        eng = Engine(tiny_model, method, SamplingConfig(max_new_tokens=12), eos=[], rows=4, **kw)
        return {f.item.tag: f.tokens for ended in eng.run([EngineItem(p, i, (0,), 12, tag=i)
                                                         for i, p in enumerate(ps)]) for f in ended}

    eager = tokens()
    rec = Recorder()
    compiled = tokens(compile=True, compile_backend=rec)
    n_layers = tiny_model.config.num_hidden_layers
    assert rec.rewritten == [7 * n_layers + 1]  # q, k, v, o, gate, up, down per layer + the output head; 4 rows
    assert compiled == eager
    torch._dynamo.reset()
