"""What the decode engine takes and gives: an item (a prompt and the samples wanted of it), a finished sample, and
the engine's statistics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from snapstream_core.engine.scheduler import StepCounts
from snapstream_core.sampling import SamplingConfig


@dataclass(frozen=True)
class EngineItem:
    """One prompt and the samples wanted of it. ``key``: the item's noise key (``noise.item_key(item_id)``);
    ``tag``: anything the caller wants back with each finished sample. The request's own settings: ``sampling``
    (temperature, top-k, top-p; None: the engine's), ``stop`` strings (None: the engine's) and ``seed`` (None: the
    engine's); ``max_new_tokens`` is its own."""

    ids: Sequence[int]
    key: int
    sample_idx: tuple[int, ...]
    max_new_tokens: int
    tag: Any = None
    sampling: SamplingConfig | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None


@dataclass
class Finished:
    """A sample that ended: its new tokens (cut after EOS or the stop string's last token), ``stop`` or ``length``,
    the KV figures of its cache and its timings."""

    item: EngineItem
    sample_idx: int
    tokens: list[int]
    finish_reason: str
    kv: dict[str, int]
    prefill_s: float
    decode_s: float


@dataclass
class EngineStats:
    """What ``meta.json`` records of the engine's decoding, over all its runs: step counts, whether the step ran
    compiled, its first call's wall time (the compile time; 0 when eager) and the graph recording's (the next two
    calls under CUDA graphs), the graphs compiled (``compiles``: 1 for a whole run when the shapes hold), prefills
    run, K/V row allocations made (one per engine while the rows fit), the share of the rows' slots the steps read
    (``slots_read / slots_held``; with FlexAttention's per-row bound, summed on the device from each row's read
    blocks and added at the host reads), and ``blocks``: (steps, seconds) of each run of decode steps between two
    host reads, the read included (the first ones hold the compile and the recording); ``compactions``: the
    decode-time methods' compaction calls, and ``compaction_s`` their device time (CUDA events read at the host
    reads, no extra wait; the wall clock on the CPU)."""

    counts: StepCounts = field(default_factory=StepCounts)
    compiled: bool = False
    first_step_s: float = 0.0
    record_s: float = 0.0
    compiles: int = 0
    prefills: int = 0
    kv_allocations: int = 0
    slots_read: int = 0
    slots_held: int = 0
    blocks: list[tuple[int, float]] = field(default_factory=list)
    prefilled: int = 0  # prompt tokens prefilled so far
    decoded: int = 0  # tokens decoded so far: the busy rows of every step (a sample's tokens after its end included)
    compactions: int = 0  # compaction calls (decode-time methods)
    compaction_s: float = 0.0  # their device time (CUDA events, read at host reads; wall clock on the CPU)

    @property
    def read_share(self) -> float:
        return self.slots_read / self.slots_held if self.slots_held else 0.0
