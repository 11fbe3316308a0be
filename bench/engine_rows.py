"""A case decoded by the engine itself: its rows, its decode step (eager or compiled) and its compaction.

The case's prompt is one :class:`~snapstream_core.engine.EngineItem` whose ``batch`` greedy samples take the rows of
an :class:`~snapstream_core.engine.Engine` built with ``row_blocks=False`` (each step is one forward over exactly
those rows, even below the engine's ``MIN_CPU_ROWS``). :meth:`EngineRows.start` runs the engine's own prefill and
loads the rows (``Engine.fill``); each call is one ``Engine.step``: the slot each row writes, the step, the
compaction of the rows it makes due (the decode-time methods), the draw -- what a run runs, nothing restated here.
The entries held are read from the rows themselves (``Engine.held_entries``), so a method's cache is measured as it
is, not as its geometry says it should be.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from snapstream_core.engine import Engine, EngineItem
from snapstream_core.engine.step import DecodeKernels, Step
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.sampling import SamplingConfig


@dataclass
class EngineRows:
    """``engine``: the case's engine, its run started and its rows loaded; ``prompt_tokens``: T."""

    engine: Engine
    prompt_tokens: int

    @classmethod
    @torch.no_grad()
    def start(cls, model, method: CompressionMethod, ids: list[int], rows: int, new_tokens: int, *,
              compile: bool = False, step: Step | None = None, kernels: DecodeKernels | None = None,
              compile_backend: str = "inductor") -> EngineRows:
        """``rows`` greedy samples of the prompt ``ids``, with room for ``new_tokens`` tokens each (no EOS: every
        row decodes every step), prefilled and loaded into the engine's rows. ``step``: a compiled step shared
        with the other cases (its graphs compiled once); ``kernels``: the CPU kernels plugged into it (and the
        rows' memory)."""
        greedy = SamplingConfig(max_new_tokens=new_tokens)
        engine = Engine(model, method, greedy, eos=[], rows=rows, compile=compile, compile_backend=compile_backend,
                        kernels=kernels, row_blocks=False, step=step)
        engine.start([EngineItem(list(ids), 0, tuple(range(rows)), new_tokens)])
        engine.fill()
        return cls(engine, len(ids))

    @property
    def rows(self) -> int:
        return self.engine.rows

    @property
    def token(self) -> torch.Tensor:
        """(rows, 1) long: each row's next input (the token drawn last)."""
        return self.engine.batch.tok[: self.rows, None]

    @torch.no_grad()
    def __call__(self, model=None) -> torch.Tensor:
        """One engine step of every row; -> (rows, 1) long, the tokens drawn (the next inputs)."""
        self.engine.step()
        return self.token

    def held(self) -> list[int]:
        """Entries each row holds now, per layer and KV head (its visible slots; the largest over layers and heads)."""
        held = self.engine.held_entries()[:, : self.rows]  # (L, rows, H_kv)
        return held.amax(dim=(0, 2)).tolist()

    def tokens_held(self) -> int:
        """KV entries per layer and KV head the rows hold now (the largest over rows, layers and heads)."""
        return max(self.held())

    def kv_bytes(self) -> tuple[int, int]:
        """``(kv_bytes, index_bytes)`` of all rows: the K/V slots, and the visibility mask with the slot positions
        a compacting method keeps."""
        cache, batch = self.engine.cache, self.engine.batch
        index = cache.visible[:, : self.rows].nbytes + (0 if batch.pos is None else batch.pos[:, : self.rows].nbytes)
        return cache.nbytes_per_row() * self.rows, index
