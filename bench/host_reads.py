"""Counting the reads from the device to the host while some code runs (a measurement, never on a run's path).

A read is anything that makes the host wait for a tensor's value: ``Tensor.item``, ``bool``/``int``/``float`` of a
tensor (all ATen's ``_local_scalar_dense``), a copy to the CPU from another device (``_to_copy``/``copy_``), and
``Tensor.tolist``, which reads the data without dispatching (wrapped while the counter is open). On CUDA the
synchronisations the driver sees are counted beside them (``torch.cuda.set_sync_debug_mode("warn")``: one warning
per synchronising call), a separate figure since they count other things (e.g. ``nonzero``).

    with HostReads() as reads:
        engine_step()
    reads.count, reads.cuda_syncs
"""

from __future__ import annotations

import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
_COPIES = (_aten._to_copy.default, _aten.copy_.default)


class HostReads(TorchDispatchMode):
    """A dispatch mode that counts host reads (``count``) and, on CUDA, synchronisations (``cuda_syncs``)."""

    def __init__(self, cuda: bool | None = None):
        super().__init__()
        self.count = 0
        self.cuda_syncs = 0
        self.cuda = torch.cuda.is_available() if cuda is None else cuda
        self._tolist = None
        self._warnings = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _aten._local_scalar_dense.default:
            self.count += 1
        elif func in _COPIES and _to_host(func, args, kwargs):
            self.count += 1
        return func(*args, **kwargs)

    def __enter__(self):
        original = torch.Tensor.tolist
        counter = self

        def tolist(tensor, *a, **k):
            counter.count += 1
            return original(tensor, *a, **k)

        self._tolist = original
        torch.Tensor.tolist = tolist
        if self.cuda:
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.simplefilter("always")
            self._mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return super().__enter__()

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        torch.Tensor.tolist = self._tolist
        if self.cuda:
            torch.cuda.set_sync_debug_mode(self._mode)
            self.cuda_syncs += sum("synchroniz" in str(w.message) for w in self._caught)
            self._warnings.__exit__(*exc)
        return out


def _to_host(func, args, kwargs) -> bool:
    """Whether a copy op moves a non-CPU tensor to the CPU."""
    if func is _aten.copy_.default:
        dst, src = args[0], args[1]
        return dst.device.type == "cpu" and src.device.type != "cpu"
    src, device = args[0], kwargs.get("device")
    return device is not None and torch.device(device).type == "cpu" and src.device.type != "cpu"
