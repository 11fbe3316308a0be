"""The progress of one run: a bar of samples that also counts the tokens prefilled and decoded so far (it moves
while a batch decodes, before any of its samples ends) and, every ``log_every`` items, a log line (for cluster
logs)."""

from __future__ import annotations

import logging
import time

from tqdm.auto import tqdm

from evals.execute.backends.base import Request, Sample
from evals.execute.expected import Work
from evals.execute.prepare import RunPlan
from evals.record.throughput import rate_text

log = logging.getLogger("evals.execute.loop")


REFRESH_S = 0.5  # the token counts redraw the bar at most this often


class Progress:
    """The progress bar (samples, and the tokens so far: :meth:`on_tokens`) and the ``log_every`` log line (items whose
    last missing sample was written). ``expected``: the run's prompt tokens and new tokens at most, the counts'
    denominators."""

    def __init__(self, p: RunPlan, total: int, expected: Work | None = None):
        self.bar = tqdm(total=total, desc=f"{p.spec.task.name}/{p.spec.compression_tag}", unit="sample",
                        dynamic_ncols=True)
        self.every = p.spec.log_every
        self.run_id, self.tokens, self.items, self.start = p.run_id, 0, 0, time.perf_counter()
        self.left: dict[int, int] = {}
        self.expected, self.drawn, self.counts = expected, 0.0, ""

    def on_tokens(self, prefilled: int, decoded: int) -> None:
        """The backend's counts so far (:meth:`~evals.execute.backends.base.Backend.watch`), shown beside the bar:
        ``prefill 4,200/12,600 tok, decode 37/960 tok``."""
        now = time.perf_counter()
        if now - self.drawn < REFRESH_S:
            return
        self.drawn = now
        self.counts = token_counts(prefilled, decoded, self.expected)
        self.bar.set_postfix_str(self.counts, refresh=True)

    def update(self, ended: list[tuple[Request, Sample]]) -> None:
        for req, s in ended:
            self.tokens += s.gen_tokens or 0
            left = self.left.setdefault(id(req), len(req.sample_idx)) - 1
            self.left[id(req)] = left
            if left == 0:
                del self.left[id(req)]
                self.items += 1
                if self.every and self.items % self.every == 0:
                    log.info("%s: %d items done, %s gen tok/s", self.run_id, self.items, rate_text(self.rate()))
        self.bar.update(len(ended))
        self.bar.set_postfix_str(", ".join(filter(None, [self.counts, f"{self.rate():.1f} gen tok/s"])))

    def rate(self) -> float:
        return self.tokens / max(time.perf_counter() - self.start, 1e-9)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()


def token_counts(prefilled: int, decoded: int, expected: Work | None) -> str:
    """``prefill 4,200/12,600 tok, decode 37/960 tok`` (without the denominators when nothing is expected)."""
    if expected is None:
        return f"prefill {prefilled:,} tok, decode {decoded:,} tok"
    return (f"prefill {prefilled:,}/{expected.prompt_tokens:,} tok, "
            f"decode {decoded:,}/{expected.samples * expected.max_new_tokens:,} tok")
