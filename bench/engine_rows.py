"""A compiled case's decode on the engine's own objects: its rows, their per-row state and its compiled step.

The batch-1 prefill's compressed cache is copied into one engine row per sequence by
:meth:`~snapstream_core.engine.rows.RowCache.load`, which returns each row's slot schedule;
:class:`~snapstream_core.engine.batch.RowBatch` keeps that schedule, the positions and the tokens, and draws the next
token (greedy), as in a run; :class:`~snapstream_core.engine.step.Step` is the engine's one compile wrapper. One call
runs what the engine's decode step runs for these rows: the slot each row writes, the step, the draw. Here every
row is decoded (a case's ``batch``, even below the engine's ``MIN_CPU_ROWS``), every slot is read by SDPA or the
plugged-in attention (where the engine's compiled step on CUDA bounds each row's reads with FlexAttention), and the
rows never compact. The sizes come from the method: a row's slots are ``method.slots(T, new_tokens)``, the entries
held after ``t`` steps ``method.tokens_held(T, t)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from snapstream_core.cache import CompressedCache
from snapstream_core.engine.batch import RowBatch
from snapstream_core.engine.rows import RowCache
from snapstream_core.engine.step import Step
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.sampling import SamplingConfig

NO_EOS = -1  # the engine's stand-in when no token ends a sample: every row decodes every step


@dataclass
class EngineRows:
    """``rows`` decode rows of one case: ``cache`` (the K/V slots), ``batch`` (the per-row arrays), ``step``."""

    cache: RowCache
    batch: RowBatch
    step: Step
    method: CompressionMethod
    prompt_tokens: int

    @classmethod
    def load(cls, prefix: CompressedCache, logits: torch.Tensor, prompt_tokens: int, rows: int, new_tokens: int,
             step: Step, zeros=None) -> EngineRows:
        """``rows`` rows that each hold ``prefix`` (a batch-1 prefilled, compressed cache of a ``prompt_tokens``
        prompt) and room for ``new_tokens`` tokens; each draws its first token from the prefill's last ``logits``
        (1, V). ``zeros``: the memory of the rows' K/V on the CPU (``DecodeKernels.zeros``)."""
        method = prefix.method
        cache = RowCache.empty(rows, method.slots(prompt_tokens, new_tokens), prefix, zeros)
        device = cache.visible.device
        greedy = SamplingConfig(max_new_tokens=new_tokens)
        batch = RowBatch(rows, cache.slots, new_tokens, torch.tensor([NO_EOS], device=device), greedy)
        for row in range(rows):
            batch.add(row, cache.load(row, prefix), prompt_tokens, 0, new_tokens, greedy, (), logits.float())
        return cls(cache, batch, step, method, prompt_tokens)

    @property
    def rows(self) -> int:
        return self.batch.rows

    @property
    def token(self) -> torch.Tensor:
        """(rows, 1) long: each row's next input."""
        return self.batch.tok[:, None]

    @property
    def steps(self) -> int:
        """Decode steps run (host count: no device read)."""
        return self.batch.host[0].steps

    def __call__(self, model) -> torch.Tensor:
        """One decode step of every row; -> (rows, 1) long, the tokens drawn (the next inputs)."""
        b = self.batch
        slots = b.slots_now(self.cache.slots)
        logits = self.step(model, self.cache, b.tok[:, None], b.positions(), slots)
        b.stepped(list(range(self.rows)))
        b.draw(logits, self.rows)
        return self.token

    def tokens_held(self) -> int:
        """KV entries per layer and KV head each row holds now, by the method's geometry."""
        return self.method.tokens_held(self.prompt_tokens, self.steps)

    def kv_bytes(self) -> tuple[int, int]:
        """``(kv_bytes, index_bytes)`` of all rows: the K/V slots and the visibility mask."""
        return self.cache.nbytes_per_row() * self.rows, self.cache.visible.nbytes
