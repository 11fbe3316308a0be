"""The CPU attention kernel of the compiled decode step: ``torch.ops.snapstream.decode_attention``.

A compiled decode step attends with a few query rows per KV head (the query heads that share it) over every slot of
a fixed-size cache. ATen's CPU flash attention spends most of its time there on small-GEMM calls and parallelises
over (batch, KV head) only, so with 3 KV heads on 2 threads one thread does two thirds of the work: SmolLM2's 30
layers took ~6 ms per step at 1,280 slots, against ~1.5 ms to read their K and V. The kernel in
``csrc/decode_attention.cpp`` splits the slots into blocks (split-KV) so every thread gets work, and runs the
score, softmax and value loops vectorised for the CPU's ISA (measured in ``bench/README.md``).

It is built on first use with ``torch.utils.cpp_extension.load`` (the C++ compiler the inductor CPU backend needs
anyway, and ninja), for the vector ISA ATen itself dispatches to on this machine, into torch's extension cache
(``TORCH_EXTENSIONS_DIR``), once per ISA and source. Where it cannot be built, or for shapes and dtypes it does not
take (another head dim than :data:`HEAD_DIMS`, not float32, not CPU), the step uses SDPA; a failed build is logged
once. The compiled step reaches it through :func:`packed_attention`, ``DecodeKernels.attention`` of
:data:`bench.cpu_decode.KERNELS`.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "csrc" / "decode_attention.cpp"
HEAD_DIMS = (16, 32, 64, 96, 128)  # the sizes csrc/decode_attention.cpp is instantiated for
MAX_GROUP = 64  # most query heads per KV head it takes (MAX_ROWS there)

# Compiler flags per ATen CPU capability (torch.backends.cpu.get_cpu_capability()): the ISA the build may use.
_ISA_FLAGS = {
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
    "AVX512": ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX512"],
}

_state: dict[str, object] = {"tried": False, "op": None}


def build() -> bool:
    """Build and load the kernel once per process (idempotent); True when ``torch.ops.snapstream.decode_attention``
    is available, False (with one warning naming the cause) when it could not be built."""
    if _state["tried"]:
        return _state["op"] is not None
    _state["tried"] = True
    from torch.utils import cpp_extension

    isa = torch.backends.cpu.get_cpu_capability()
    name = f"snapstream_decode_attention_{isa.lower()}"
    try:
        if shutil.which("ninja") is None:  # the pinned ninja wheel, when its venv is not on PATH (.venv/bin/python)
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        log.info("loading the CPU decode attention kernel for %s (built once, cached by torch as %s)", isa, name)
        cpp_extension.load(
            name=name,
            sources=[str(SOURCE)],
            extra_cflags=["-O3", "-fopenmp", *_ISA_FLAGS.get(isa, [])],
            is_python_module=False,
            verbose=False,
        )
    except Exception as exc:  # no compiler, no ninja, a failed build: SDPA still gives the same tokens, slower
        log.warning("compiled decode: the CPU attention kernel could not be built (%s); using SDPA", exc)
        return False
    torch.library.register_fake("snapstream::decode_attention")(_fake)  # the shape rule torch.compile traces with
    _state["op"] = torch.ops.snapstream.decode_attention
    return True


def _fake(query, key, value, visible, scale):
    """The output's shape and dtype: those of ``query`` (B, H_kv, G, D), contiguous."""
    return torch.empty_like(query, memory_format=torch.contiguous_format)


def usable(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Whether the built kernel takes these tensors, the packed query (B, H_kv, G, D) and key (B, H_kv, S, D): CPU,
    float32, head dim in :data:`HEAD_DIMS`, at most :data:`MAX_GROUP` query heads per KV head."""
    return (
        _state["op"] is not None
        and query.device.type == "cpu"
        and query.dtype == torch.float32
        and key.dtype == torch.float32
        and query.shape[-1] in HEAD_DIMS
        and query.ndim == 4
        and 0 < query.shape[2] <= MAX_GROUP
    )


def packed_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor | None:
    """``DecodeKernels.attention``: :func:`decode_attention` where :func:`usable`, else None (the step uses SDPA).
    Shapes as :func:`decode_attention`; the choice is made while tracing, from shapes and dtypes."""
    if not usable(query, key):
        return None
    return decode_attention(query, key, value, visible, scale)


def decode_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of query (B, H_kv, G, D) over key, value (B, H_kv, S, D) where ``visible`` (B, H_kv, S) bool
    -> (B, H_kv, G, D); ``scale`` multiplies the scores (softmax(q k^T * scale) v). Rows with no visible slot give
    zeros."""
    return _state["op"](query, key, value, visible, scale)
