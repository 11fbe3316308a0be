"""One run's work, as the engine's step API sees it: the items pulled so far, their samples waiting for a row (the
:class:`~snapstream_core.engine.scheduler.Scheduler`'s tickets), the prefixes kept until each item's samples have all
started, and the size the run's rows were planned for. Plain Python, no tensors: the rows' state lives in
:class:`~snapstream_core.engine.batch.RowBatch` and :class:`~snapstream_core.engine.rows.RowCache`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from snapstream_core.engine.items import EngineItem
from snapstream_core.engine.scheduler import Scheduler, Ticket
from snapstream_core.engine.step import EngineError


@dataclass
class RunQueue:
    """``source``: the items not pulled yet; ``slots``, ``width``: the rows' size planned for the run (slots per row,
    new tokens per sample); ``max_prompt_tokens``: the longest prompt the caller planned for (None: the items were
    read first). ``seen``: the items pulled, by number; ``prefixes``: item number -> (compressed prefix, last logits),
    freed once no pending ticket needs it; ``prefill_s`` and ``kv``: each item's prefill seconds and KV figures;
    ``sized``: whether the rows fit the run yet (allocated at its first prefix, or kept from an earlier run)."""

    source: Iterator[EngineItem]
    sched: Scheduler
    slots: int
    width: int
    max_prompt_tokens: int | None = None
    seen: list[EngineItem] = field(default_factory=list)
    prefixes: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    prefill_s: dict[int, float] = field(default_factory=dict)
    kv: dict[int, dict[str, int]] = field(default_factory=dict)
    sized: bool = False

    def pull(self, stop_of: Callable[[EngineItem], tuple[str, ...]], has_tokenizer: bool) -> bool:
        """Take the next item and queue a ticket per sample; False when the items are exhausted. ``stop_of(item)``:
        its stop strings (which need the engine's tokenizer). Refuses, in one line, an item that does not fit the
        planned rows."""
        item = next(self.source, None)
        if item is None:
            return False
        if self.max_prompt_tokens is not None and len(item.ids) > self.max_prompt_tokens:
            raise EngineError(f"engine: a prompt of {len(item.ids)} tokens is longer than the "
                              f"{self.max_prompt_tokens} the rows were planned for (max_prompt_tokens)")
        if item.max_new_tokens > self.width:
            raise EngineError(f"engine: max_new_tokens={item.max_new_tokens} is more than the {self.width} the "
                              "rows were planned for")
        if stop_of(item) and not has_tokenizer:
            raise EngineError("engine: a request with stop strings needs the engine's tokenizer")
        self.seen.append(item)
        self.sched.add(Ticket(len(self.seen) - 1, s, item.max_new_tokens) for s in item.sample_idx)
        return True

    def free_started(self) -> None:
        """Drop the prefixes no pending ticket needs (their rows hold copies; the batch-1 caches are freed)."""
        for item in [i for i in self.prefixes if not self.sched.item_pending(i)]:
            del self.prefixes[item]
