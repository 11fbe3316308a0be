"""What a run will cost, said before it generates: samples x new tokens at most ÷ this device's decode speed.

The speed is measured once the weights are loaded, on the loaded model itself: a few decode-shaped forwards (one new
token per row, ``rows`` rows as the engine holds them) after one warm-up, timed on the wall clock, so a busy machine
reads as the busy machine it is. The estimate is an upper bound of the decode time (every sample runs to
``gen.max_new_tokens``; prefill not counted) and is printed, as one line, only when it exceeds :data:`SHOWN_S`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)

SHOWN_S = 60.0  # a run whose decode may take longer than this says so before it starts
TIMED_STEPS = 3
CPU_MIN_ROWS = 4  # the engine's CPU forward holds at least this many rows (docs/engine.md)


def decode_tokens_per_s(model: Any, rows: int, steps: int = TIMED_STEPS) -> float:
    """Tokens per second of ``rows`` rows decoding one token each per forward, from ``steps`` timed forwards of
    ``input_ids: (rows, 1)`` after one warm-up (no cache: a lower bound of the step's cost at long contexts)."""
    import torch

    device = next(model.parameters()).device
    ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            model(input_ids=ids, use_cache=False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return rows * steps / max(time.perf_counter() - start, 1e-9)


def duration(seconds: float) -> str:
    """``7 min 37 s``, ``2 h 05 min``, ``45 s``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def cost_line(samples: int, max_new_tokens: int, tokens_per_s: float, rows: int, device: str) -> str | None:
    """The line printed before a run generates, or None when its decode takes at most :data:`SHOWN_S`."""
    if samples <= 0 or tokens_per_s <= 0:
        return None
    seconds = samples * max_new_tokens / tokens_per_s
    if seconds <= SHOWN_S:
        return None
    return (f"expected: {samples} sample(s) x up to {max_new_tokens} new tokens (gen.max_new_tokens) ÷ "
            f"{tokens_per_s:.3g} tokens/s measured now on {device} ({rows} row(s)) = up to {duration(seconds)} "
            f"of decoding (task.limit or gen.max_new_tokens shorten it)")


def announce(backend: Any, samples: int, max_new_tokens: int, rows: Any) -> str | None:
    """Measure the loaded model's decode speed and log :func:`cost_line`, when the backend holds a model and the
    run may exceed :data:`SHOWN_S` even at a fast machine's speed. Returns the line."""
    model = getattr(backend, "model", None)
    if model is None or samples * max_new_tokens < SHOWN_S * 10:  # < 600 tokens: under a minute at 10 tokens/s
        return None
    device = next(model.parameters()).device
    held = rows if isinstance(rows, int) and rows > 0 else 1
    if device.type == "cpu":
        held = max(held, CPU_MIN_ROWS)
    useful = min(held, samples)  # rows beyond the samples decode nothing useful
    speed = decode_tokens_per_s(model, held) * useful / held
    line = cost_line(samples, max_new_tokens, speed, useful, str(device))
    if line:
        log.info(line)
    return line
