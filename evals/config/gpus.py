"""``gpus=``: the GPUs the jobs started on one machine share, one job (or shard) per GPU (docs/gpus.md).

``gpus=8`` names slots 0..7, ``gpus=[0,2,5]`` those slots. Slot ``i`` is the ``i``-th device this process can see:
the ``i``-th entry of an inherited ``CUDA_VISIBLE_DEVICES`` (SLURM's, submitit's), else the machine's GPU ``i``. Each
job claims one free slot when it starts (:mod:`evals.execute.gpu_slot`) and sets ``CUDA_VISIBLE_DEVICES`` to its
device before torch initialises CUDA. Here: the value read and checked, and the devices counted, with no torch (the
NVIDIA driver's ``/proc/driver/nvidia/gpus`` lists one folder per GPU; counting through CUDA would fix the devices
of the checking process before it could pin one).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")  # one folder per GPU (named by PCI bus id) where the driver is loaded
MAX_GPUS = 1024
# Set by a process when it pins itself: the CUDA_VISIBLE_DEVICES it was given (UNSET: none), which its later jobs'
# slots still index (its own pin narrowed CUDA_VISIBLE_DEVICES to one device)
INHERITED_ENV = "SNAPSTREAM_GPUS_INHERITED"
UNSET = "<unset>"


@dataclass(frozen=True)
class Devices:
    """What this process can see: ``names`` (``CUDA_VISIBLE_DEVICES`` entries, or the machine's GPU indices as
    strings; None: no CUDA driver on this machine) and where the list came from, for messages."""

    names: tuple[str, ...] | None
    source: str

    @property
    def cuda(self) -> bool:
        return self.names is not None


def parse_gpus(value: Any) -> tuple[int, ...] | None:
    """The slots ``gpus`` names: None (no pinning), an integer N >= 1 (slots 0..N-1) or a list of distinct
    integers >= 0; anything else raises ``ValueError`` naming ``gpus``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"gpus: expected a number of GPUs or a list of GPU indices, got {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_GPUS:
            raise ValueError(f"gpus: a number of GPUs from 1 to {MAX_GPUS}, got {value}")
        return tuple(range(value))
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("gpus: an empty list names no GPU (gpus=null: no pinning)")
        bad = [v for v in value if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_GPUS]
        if bad:
            raise ValueError(f"gpus: GPU indices are integers from 0 to {MAX_GPUS - 1}, got {bad[0]!r}")
        if len(set(value)) != len(value):
            raise ValueError(f"gpus: an index appears twice in {list(value)}")
        return tuple(int(v) for v in value)
    raise ValueError(f"gpus: expected a number of GPUs (gpus=8) or a list of GPU indices (gpus=[0,1]), got {value!r}")


def visible_devices(environ: Mapping[str, str] = os.environ, driver: Path = DRIVER_GPUS) -> Devices:
    """The devices slot indices refer to: an inherited ``CUDA_VISIBLE_DEVICES`` (``""``: none; the one this
    process had before it pinned itself, :data:`INHERITED_ENV`) where the driver is present, else one per folder of
    ``driver``; ``Devices(None, ...)`` on a machine without the NVIDIA driver."""
    try:
        count = sum(1 for _ in driver.iterdir())
    except OSError:
        return Devices(None, f"no CUDA driver ({driver} is missing)")
    inherited = environ.get("CUDA_VISIBLE_DEVICES")
    if INHERITED_ENV in environ:  # this process pinned itself for an earlier job: what it was given
        inherited = None if environ[INHERITED_ENV] == UNSET else environ[INHERITED_ENV]
    if inherited is not None:
        return Devices(tuple(d.strip() for d in inherited.split(",") if d.strip()),
                       f"CUDA_VISIBLE_DEVICES={inherited!r}")
    return Devices(tuple(str(i) for i in range(count)), f"{count} GPU(s) in {driver}")


def check_slots(slots: tuple[int, ...] | None, devices: Devices, model_device: str) -> None:
    """Refuse (one ``ValueError`` naming ``gpus``) slots naming a device that does not exist where CUDA is present,
    and a ``model.device`` that pinning would contradict. On a machine without CUDA nothing is refused: the slots
    still hold one job each, and the model runs on the CPU."""
    if slots is None:
        return
    if model_device not in ("auto", "cuda", "cuda:0"):
        raise ValueError(f"gpus: each job sees only the GPU it claims (as cuda:0), so model.device={model_device} "
                         "cannot hold; use model.device=auto or cuda, or drop gpus")
    if not devices.cuda:
        return
    missing = [s for s in slots if s >= len(devices.names)]
    if missing:
        shown = f"0-{len(devices.names) - 1}" if devices.names else "none"
        raise ValueError(f"gpus: GPU {missing[0]} does not exist: this process sees {len(devices.names)} "
                         f"({devices.source}; indices {shown})")


def device_of(slot: int, devices: Devices) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that pins slot ``slot``: its visible device, or the index itself where
    there is no CUDA (nothing reads it then)."""
    if devices.names is not None and slot < len(devices.names):
        return devices.names[slot]
    return str(slot)


def physical_device(device: str, environ: Mapping[str, str] = os.environ) -> str:
    """A torch device as the machine names it, for rows: ``cuda:1`` under ``CUDA_VISIBLE_DEVICES=4,6`` is
    ``cuda:6``; ``cpu`` stays ``cpu``."""
    if not device.startswith("cuda"):
        return device
    index = int(device.partition(":")[2] or 0)
    names = [d.strip() for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if "CUDA_VISIBLE_DEVICES" in environ and index < len(names):
        return f"cuda:{names[index]}"
    return f"cuda:{index}"


def joblib_workers(launcher_target: str, n_jobs: Any, slots: tuple[int, ...] | None) -> int | None:
    """With ``gpus`` under Hydra's joblib launcher: the ``hydra.launcher.n_jobs`` to set (one worker per slot, in
    place of joblib's default -1, one per CPU), or None to keep the given one. A worker holds its GPU for its whole
    life (it may run several jobs, and CUDA cannot move once initialised), so more workers than slots would leave
    the extra ones waiting on slots that free only when joblib ends its idle workers: refused in one line."""
    if slots is None or not str(launcher_target).endswith("JoblibLauncher"):
        return None
    if n_jobs in (None, -1):
        return len(slots)
    if isinstance(n_jobs, int) and not isinstance(n_jobs, bool) and n_jobs > len(slots):
        raise ValueError(f"hydra.launcher.n_jobs: {n_jobs} joblib workers for {len(slots)} GPU slot(s) (gpus): "
                         f"each worker holds one GPU for its life; set hydra.launcher.n_jobs={len(slots)} or fewer, "
                         "or leave it out (one worker per slot)")
    return None
