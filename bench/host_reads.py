"""Counting the reads from the device to the host while some code runs (a measurement, never on a run's path).

A read is a Python call that makes the host wait for a tensor's values: ``Tensor.item``, ``tolist``, ``numpy``, and
``bool``/``int``/``float``/``index`` of a tensor. They are wrapped while the counter is open (and restored after),
which leaves a compiled step compiled: a ``TorchDispatchMode`` would make Dynamo run the step eagerly, so it would
count another path than the one measured. Reads inside C++ ops (e.g. ``nonzero``) are not Python calls; on CUDA the
synchronisations the driver sees are counted beside them (``torch.cuda.set_sync_debug_mode("warn")``: one warning
per synchronising call), a separate figure since they count other things.

    with HostReads() as reads:
        engine_step()
    reads.count, reads.cuda_syncs
"""

from __future__ import annotations

import warnings

import torch

WRAPPED = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__")


class HostReads:
    """Counts host reads (``count``) and, on CUDA, synchronisations (``cuda_syncs``); reusable, counts add up."""

    def __init__(self, cuda: bool | None = None):
        self.count = 0
        self.cuda_syncs = 0
        self.cuda = torch.cuda.is_available() if cuda is None else cuda
        self._saved: dict[str, object] = {}

    def _wrap(self, name: str):
        original = getattr(torch.Tensor, name)

        def counted(tensor, *args, **kwargs):
            self.count += 1
            return original(tensor, *args, **kwargs)

        self._saved[name] = original
        return counted

    def __enter__(self) -> HostReads:
        for name in WRAPPED:
            setattr(torch.Tensor, name, self._wrap(name))
        if self.cuda:
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.simplefilter("always")
            self._mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()
        if self.cuda:
            torch.cuda.set_sync_debug_mode(self._mode)
            self.cuda_syncs += sum("synchroniz" in str(w.message) for w in self._caught)
            self._warnings.__exit__(*exc)
