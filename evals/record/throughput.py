"""Throughput as a system: generated tokens ÷ the wall time spent generating them, with the rows held at once.

The sum of per-sample latencies is not a throughput: with ``gen.rows`` samples decoding together each sample's
latency spans the whole batch, so the sum grows with the rows held and tokens / Σ latency falls as the system gets
faster. :class:`GenClock` times the generation itself (the time spent inside the backend producing finished
samples, scoring excluded) and counts the tokens of the samples produced in that time; ``meta.json`` gets it under
``generation``. A per-sample latency (the mean of ``latency_s``) stays a latency, reported as such beside it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class GenClock:
    """Wall time and generated tokens of the samples a run produced in this session.

    ``rows``: the rows held at once (``gen.rows``, as planned); ``measured``: False for a backend that replays
    outputs made elsewhere (its wall time is reading a file, not generating)."""

    rows: Any = None
    measured: bool = True
    wall_s: float = 0.0
    gen_tokens: int = 0
    samples: int = 0

    def timed(self, batches: Iterable[list]) -> Iterator[list]:
        """Yield ``batches`` (lists of ``(request, sample)``), adding the time spent producing each and its tokens."""
        it = iter(batches)
        while True:
            start = time.perf_counter()
            try:
                ended = next(it)
            except StopIteration:
                self.wall_s += time.perf_counter() - start
                return
            self.wall_s += time.perf_counter() - start
            self.samples += len(ended)
            self.gen_tokens += sum(int(s.gen_tokens or 0) for _, s in ended)
            yield ended

    def meta(self, backend_meta: dict[str, Any] | None = None) -> dict[str, Any]:
        """``{"generation": {...}}`` for ``meta.json``; ``tokens_per_s`` None when nothing was generated here or
        the backend does not generate. ``rows``: the rows the backend says it held (``decode_rows.rows``), else the
        configured ``gen.rows``."""
        used = (backend_meta or {}).get("decode_rows", {}).get("rows") if isinstance(
            (backend_meta or {}).get("decode_rows"), dict) else None
        if used is not None:
            self.rows = used
        rate = self.gen_tokens / self.wall_s if self.measured and self.samples and self.wall_s > 0 else None
        return {"generation": {"wall_s": round(self.wall_s, 6), "gen_tokens": self.gen_tokens, "samples": self.samples,
                               "rows": self.rows, "measured": self.measured, "tokens_per_s": rate}}


def throughput(meta: dict[str, Any]) -> dict[str, Any]:
    """``{"tokens_per_s", "wall_s", "gen_tokens", "rows"}`` from ``meta.json``'s ``generation`` (Nones without)."""
    gen = meta.get("generation") if isinstance(meta.get("generation"), dict) else {}
    return {"tokens_per_s": gen.get("tokens_per_s"), "wall_s": gen.get("wall_s"), "gen_tokens": gen.get("gen_tokens"),
            "rows": gen.get("rows")}


def rate_text(tokens_per_s: float) -> str:
    """A throughput with three significant digits (``0.0412``, ``2.15``, ``65.9``; ``1,234`` from 100 up): a slow
    run never reads 0.0."""
    if tokens_per_s >= 100:
        return f"{tokens_per_s:,.0f}"
    return f"{tokens_per_s:.3g}"
