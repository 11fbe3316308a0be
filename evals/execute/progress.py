"""The progress of one run: a bar of samples and, every ``log_every`` items, a log line (for cluster logs)."""

from __future__ import annotations

import logging
import time

from tqdm.auto import tqdm

from evals.execute.backends.base import Request, Sample
from evals.execute.prepare import RunPlan
from evals.record.throughput import rate_text

log = logging.getLogger("evals.execute.loop")


class Progress:
    """The progress bar (samples) and the ``log_every`` log line (items whose last missing sample was written)."""

    def __init__(self, p: RunPlan, total: int):
        self.bar = tqdm(total=total, desc=f"{p.spec.task.name}/{p.spec.compression_tag}", unit="sample",
                        dynamic_ncols=True)
        self.every = p.spec.log_every
        self.run_id, self.tokens, self.items, self.start = p.run_id, 0, 0, time.perf_counter()
        self.left: dict[int, int] = {}

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
        self.bar.set_postfix(tok_s=f"{self.rate():.1f}")

    def rate(self) -> float:
        return self.tokens / max(time.perf_counter() - self.start, 1e-9)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
