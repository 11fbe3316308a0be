"""The shared memory model of one job on one device (docs/plan.md), in bytes. Pure arithmetic.

Prefill of one prompt of ``T`` tokens (layer-major, in chunks of ``chunk`` tokens; the method keeps ``kept``)::

    prefill = weights + T*kv/L (one full layer) + (L-1)*kept*kv/L (the compressed layers)
              + 2*T*hidden*b (the residual stream into and out of a layer) + chunk activations
              + SnapKV scoring (n_heads * window * T float32, twice) + last-position logits

Decode of ``rows`` rows of ``slots`` KV slots each, while the next item is prefilled beside them::

    job peak = weights + rows * (slots*kv + logits + step activations) + (prefill - weights)

with ``kv`` the keys and values of one token in every layer, ``L`` layers, ``b`` bytes per element. The chunk's
activations: ``chunk * (C_HIDDEN*hidden + C_INTER*intermediate) * b``, plus its attention scores
``n_heads * chunk * T`` float32 where the attention kernel materialises them (the CPU math path; CUDA's flash and
memory-efficient kernels do not).
"""

from __future__ import annotations

from dataclasses import dataclass

from evals.plan.shape import ModelShape

# Hidden-sized and intermediate-sized buffers alive at once in a Llama layer's forward (no autograd): the residual,
# the normed input, q / attention output / o-projection (hidden each); gate, up and act(gate)*up (intermediate).
C_HIDDEN = 6
C_INTER = 3
FLOAT32 = 4


@dataclass(frozen=True)
class MemoryModel:
    """Knobs of the estimate that depend on the code path rather than on the model."""

    chunk: int = 4096  # prefill chunk (tokens per forward of a layer-major pass)
    window: int = 32  # SnapKV observation window (its scoring keeps window x T scores per head)
    scores: bool = False  # True: the attention kernel materialises (heads, chunk, T) scores (CPU math SDPA)

    def prefill_terms(self, s: ModelShape, T: int, kept: int, selects: bool = True) -> dict[str, int]:
        """The terms of the prefill peak of a ``T``-token prompt whose compressed layers keep ``kept`` tokens."""
        b, kv_layer = s.dtype_bytes, s.kv_bytes_per_token // s.n_layers
        c = min(self.chunk, T)
        return {
            "weights": s.weight_bytes,
            "full_layer": T * kv_layer,
            "compressed_layers": (s.n_layers - 1) * kept * kv_layer,
            "residual": 2 * T * s.hidden * b,
            "activations": c * (C_HIDDEN * s.hidden + C_INTER * s.intermediate) * b
            + (s.n_heads * c * T * FLOAT32 if self.scores else 0),
            "scoring": 2 * s.n_heads * min(self.window, T) * T * FLOAT32 if selects else 0,
            "logits": s.vocab * (FLOAT32 + b),
        }

    def prefill_bytes(self, s: ModelShape, T: int, kept: int, selects: bool = True) -> int:
        return sum(self.prefill_terms(s, T, kept, selects).values())

    def row_bytes(self, s: ModelShape, slots: int) -> int:
        """One decode row: its KV slots, its logits (model dtype, a float32 copy, float32 sampling noise), one
        step's activations and attention scores (float32, twice: scores and softmax)."""
        b = s.dtype_bytes
        return (
            slots * s.kv_bytes_per_token
            + s.vocab * (b + 2 * FLOAT32)
            + (C_HIDDEN * s.hidden + C_INTER * s.intermediate) * b
            + 2 * s.n_heads * slots * FLOAT32
        )

    def job_bytes(self, s: ModelShape, rows: int, slots: int, T: int, kept: int, selects: bool = True) -> int:
        """Peak of a job holding ``rows`` decode rows while it prefills its next ``T``-token prompt."""
        return self.prefill_bytes(s, T, kept, selects) + rows * self.row_bytes(s, slots)

    def max_rows(self, s: ModelShape, budget_bytes: float, slots: int, T: int, kept: int, selects: bool = True) -> int:
        """The most rows whose job peak fits ``budget_bytes`` (0: not even one)."""
        free = budget_bytes - self.prefill_bytes(s, T, kept, selects)
        return max(0, int(free // self.row_bytes(s, slots)))


CUDA = MemoryModel()
EAGER = MemoryModel(scores=True)  # attn_implementation=eager: the (heads, chunk, T) scores exist
