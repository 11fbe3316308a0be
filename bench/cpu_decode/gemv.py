"""The CPU backend of the compiled decode step: matrix-vector products as fused multiply-reduce kernels.

A decode step multiplies every weight matrix by one row per sequence. On CPU, ATen sends these products to the BLAS
(MKL), whose single-row kernel runs on one thread here: on the 2-core test machine the weights of SmolLM2 stream at
~15 GB/s through it, against ~33 GB/s for a two-thread reduction (``bench/README.md``). Inductor's default lowering
of ``mm`` calls the same kernel.

This backend rewrites, in the graph Dynamo captured, each ``linear(x, W, b)`` whose input has at most
:data:`MAX_ROWS` rows into ``(x.unsqueeze(-2) * W).sum(-1) + b``; inductor fuses the product and the sum into one
reduction loop over the input features, parallel over the output features and vectorised, that reads ``W`` once per
row at the memory's speed. Larger batches keep the BLAS kernel, which re-reads less. Weights stay graph inputs
(nothing is frozen into the compiled code), so one compiled step serves any model of the same shapes.

Inductor itself rewrites ``mm`` this way only off CPU (``torch/_inductor/decomposition.py::mm``, under
``coordinate_descent_tuning``); this module is that rewrite for the CPU, as a ``torch.compile`` backend (a graph
pass, not a patch of any model class).
"""

from __future__ import annotations

import logging
import math

import torch
from torch import fx

log = logging.getLogger(__name__)

# Most rows (the product of the input's leading dimensions) a product may have to be rewritten: up to 4 rows the
# fused kernel is faster than MKL on the 2-core CPU, at 8 rows slower (bench/README.md, "Compiled decode and the
# bandwidth floor").
MAX_ROWS = 4

# Inductor settings of this compile only: realise every computed product input (a normed or gated activation) once,
# instead of recomputing it inside each of the matrix's O output rows.
# And the C++ wrapper: the step's ~100 kernel and operator calls from generated C++ instead of Python (the first
# compile takes longer).
# And no size asserts: the generated step would check the sizes and strides of its ~340 inputs (weights, slot
# buffers) at every call, which Dynamo's guards (one TENSOR_MATCH per input) have already checked before it runs,
# and the output layout of the attention kernel, which tests/test_cpu_decode_attention.py checks against its shape rule
# with ``torch.library.opcheck``. What each setting saves per step: bench/README.md.
INDUCTOR_PATCHES = {"realize_opcount_threshold": 0, "cpp_wrapper": True, "size_asserts": False}

_LINEAR = (torch._C._nn.linear, torch.nn.functional.linear)


def _rows(node: fx.Node) -> int | None:
    """Rows of a linear's input from Dynamo's example value, or None when unknown or symbolic."""
    value = node.meta.get("example_value")
    if not isinstance(value, torch.Tensor) or value.ndim == 0:
        return None
    try:
        return int(math.prod(value.shape[:-1]))
    except (TypeError, ValueError):  # a symbolic size
        return None


def rewrite_linears(gm: fx.GraphModule, max_rows: int = MAX_ROWS) -> int:
    """Replace, in place, each ``linear`` whose input has <= ``max_rows`` rows (x: (..., I), W: (O, I), b: (O,) or
    None) with ``sum(x[..., None, :] * W, -1) (+ b)``, (..., O); returns how many were replaced."""
    graph, done = gm.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _LINEAR:
            continue
        x, w = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        rows = _rows(x)
        weight = w.meta.get("example_value") if isinstance(w, fx.Node) else None
        if rows is None or rows > max_rows or not isinstance(weight, torch.Tensor) or weight.ndim != 2:
            continue
        with graph.inserting_before(node):
            product = graph.call_function(torch.mul, (graph.call_function(torch.unsqueeze, (x, -2)), w))
            out = graph.call_function(torch.sum, (product, -1))
            if bias is not None:
                out = graph.call_function(torch.add, (out, bias))
        out.meta.update(node.meta)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        done += 1
    if done:
        graph.lint()
        gm.recompile()
    return done


def cpu_decode_backend(gm: fx.GraphModule, example_inputs: list) -> object:
    """``torch.compile`` backend: :func:`rewrite_linears`, then inductor with :data:`INDUCTOR_PATCHES`."""
    from torch._inductor.compile_fx import compile_fx

    log.debug("compiled decode: %d linear layers as fused matrix-vector kernels", rewrite_linears(gm))
    return compile_fx(gm, example_inputs, config_patches=INDUCTOR_PATCHES)
