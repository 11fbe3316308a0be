"""The memory-bandwidth floor of a decode step: the bytes that must be read per step ÷ the bandwidth measured in the
same run.

A decode step reads every weight once (the embedding table only for its one row, unless it is tied to the output
head, which reads it whole) and every KV entry held, for each sequence of the batch. The bandwidth is that of a large
reduction (``x.sum()`` over ``MiB`` MiB, best of ``reps``; on the CPU also over huge pages), which streams memory as
a decode step does.

Beside it, :func:`measure_matmul` times what ATen's kernels need for the weights alone: every linear layer's
product with a (batch, in_features) input, as eager decode runs them, best of ``reps``. On the 2-core CPU here the
BLAS runs a one-row product on one thread and reads the weights at about half the reduction's speed, so an eager
step cannot get near the floor; the compiled CPU step replaces those products with fused kernels of its own
(:mod:`bench.cpu_decode.gemv`) and runs below this reference.
"""

from __future__ import annotations

import time

import torch

from bench.cpu_decode import memory

MIB = 2**20


class BandwidthProbe:
    """Reads the memory's bandwidth in bytes/s, as often as asked, over buffers allocated once: the best of ``reps``
    sums over a ``mib`` MiB float32 tensor. On the CPU, the best over two such tensors, one of ordinary memory and one
    on the huge pages the model's weights and the compiled step's K/V are given (:mod:`bench.cpu_decode.memory`), so
    that the floor is that of the fastest memory here.

    The read must dwarf a kernel launch (a few microseconds): 256 MiB takes ~56 us on an H200, so the GPU check reads
    4 GiB. :meth:`copy` is a second method beside it: a device-to-device copy of the same buffer (read + write, so
    twice its bytes move), the figure copy kernels reach."""

    def __init__(self, device: str, mib: int = 256):
        n = mib * MIB // 4
        kind = torch.device(device).type
        self.nbytes = n * 4
        self.cuda = kind == "cuda"
        self.buffers = [torch.ones(n, dtype=torch.float32, device=device)]
        if kind == "cpu":
            self.buffers.append(memory.cpu_zeros([(n,)], torch.float32)[0].fill_(1.0))

    def __call__(self, reps: int = 5) -> float:
        best = min(_best_seconds(lambda x=x: x.sum().item(), self.cuda, reps) for x in self.buffers)
        return self.nbytes / best

    def copy(self, reps: int = 5) -> float:
        """Bytes/s moved by ``dst.copy_(src)`` over the first buffer (its bytes read and as many written)."""
        src = self.buffers[0]
        dst = torch.empty_like(src)
        best = _best_seconds(lambda: dst.copy_(src), self.cuda, reps)
        return 2 * self.nbytes / best


def _best_seconds(fn, cuda: bool, reps: int) -> float:
    """The fastest of ``reps + 1`` calls of ``fn`` (the first also pages memory in and pays first-call costs), the
    device synchronised around each."""
    best = float("inf")
    for _ in range(reps + 1):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def weight_bytes(model) -> int:
    """Bytes of weights one decode step reads: all parameters (tied ones once), the input embedding table only for
    one row when it is not the output head."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() yields tied ones once
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    if head is None or head.weight is not emb:
        total -= emb.numel() * emb.element_size() - emb.shape[1] * emb.element_size()
    return total


def kv_bytes_per_token(model) -> int:
    """K + V bytes of one token in all layers (per sequence)."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    elem = next(model.parameters()).element_size()
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * elem


def floor_bytes(model, kv_tokens: int, batch: int) -> int:
    """Bytes a decode step must read: the weights + ``kv_tokens`` entries per layer and KV head for each sequence."""
    return weight_bytes(model) + batch * kv_tokens * kv_bytes_per_token(model)


@torch.no_grad()
def measure_matmul(model, batch: int, reps: int = 5) -> float:
    """Seconds for the products of every ``nn.Linear`` weight of ``model`` (tied ones once) with a (batch, in)
    input of its dtype, in one pass as a decode step makes them; the best of ``reps`` passes (after a warm one)."""
    weights = list({id(m.weight): m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)}.values())
    inputs = {w.shape[1]: torch.randn(batch, w.shape[1], dtype=w.dtype, device=w.device) for w in weights}

    def products() -> None:
        for w in weights:
            torch.nn.functional.linear(inputs[w.shape[1]], w)

    return _best_seconds(products, weights[0].is_cuda, reps)
