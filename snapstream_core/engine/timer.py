"""A timer of device work that does not wait for the device: CUDA events around each span on CUDA (read back at
a host read that has already synchronised), the wall clock on the CPU (where the work is done when the call
returns)."""

from __future__ import annotations

import time

import torch


class DeviceTimer:
    """Spans of device work: ``start()`` then ``stop(keep)``; :meth:`collect` returns the seconds of the kept spans
    that have completed since the last collect (on CUDA, the spans whose end event the device has passed)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.pending: list[tuple] = []
        self.mark: object = None

    def start(self) -> None:
        if self.cuda:
            self.mark = torch.cuda.Event(enable_timing=True)
            self.mark.record()
        else:
            self.mark = time.perf_counter()

    def stop(self, keep: bool) -> None:
        if not keep:
            return
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.pending.append((self.mark, end))
        else:
            self.pending.append((self.mark, time.perf_counter()))

    def collect(self) -> float:
        done = [p for p in self.pending if not self.cuda or p[1].query()]
        self.pending = [p for p in self.pending if p not in done]
        if self.cuda:
            return sum(a.elapsed_time(b) for a, b in done) / 1000
        return sum(b - a for a, b in done)
