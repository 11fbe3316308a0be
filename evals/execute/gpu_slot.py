"""One GPU per process: a job (or a shard) claims a free slot of ``gpus=`` and pins ``CUDA_VISIBLE_DEVICES`` to it.

Each slot is a lock file, ``<lock folder>/gpu-<device>.lock``, held with ``fcntl.flock`` for the life of the
process: a process that ends, however it ends (``kill -9`` included), lets go of its lock with its last open file,
so a crashed holder's GPU is free for the next process at once. A process keeps its slot across the jobs it runs
(a joblib worker runs several): once CUDA has initialised, the process cannot move to another device. When every
slot is held, a process waits for one to free (one INFO line), polling each second.

The lock folder is node-local and per user: ``$SNAPSTREAM_GPU_LOCKS`` when set, else
``<tmp>/snapstream-gpus-<uid>-<host>`` (``-<SLURM_JOB_ID>`` added inside a SLURM job, whose devices are its own: SLURM
may number every job's GPUs from 0). It must be a folder owned by this user and writable by nobody else.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.config.gpus import INHERITED_ENV, UNSET, Devices, device_of
from evals.config.private_files import private_folder

log = logging.getLogger(__name__)

ENV = "SNAPSTREAM_GPU_LOCKS"
POLL_S = 1.0


@dataclass(frozen=True)
class Slot:
    """A claimed slot: its index in ``gpus``, the device it pins (``CUDA_VISIBLE_DEVICES``), its lock file and the
    open descriptor holding the lock (closed when the process ends)."""

    index: int
    device: str
    lock: Path
    fd: int
    cuda: bool  # a CUDA driver is present (else nothing reads CUDA_VISIBLE_DEVICES: the job runs on the CPU)
    torch_loaded: bool  # torch was imported in this process when the device was pinned
    waited_s: float

    def record(self) -> dict[str, Any]:
        """What ``meta.json`` says of it (``gpu``)."""
        return {"slot": self.index, "CUDA_VISIBLE_DEVICES": self.device, "cuda": self.cuda, "lock": str(self.lock),
                "torch_loaded_at_pin": self.torch_loaded, "waited_s": round(self.waited_s, 1)}


_held: Slot | None = None  # this process's slot, kept until it exits


def lock_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The folder of the slot locks (module docstring)."""
    if environ.get(ENV):
        return Path(environ[ENV])
    name = f"snapstream-gpus-{os.geteuid()}-{_safe(socket.gethostname())}"
    if environ.get("SLURM_JOB_ID"):
        name += f"-{_safe(environ['SLURM_JOB_ID'])}"
    return Path(tempfile.gettempdir()) / name


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:100] or "_"


def _open_folder(folder: Path) -> None:
    why = private_folder(folder)
    if why:
        raise ValueError(f"gpus: the lock folder {folder} {why}; set ${ENV} to a folder of your own")


def _try(path: Path) -> int | None:
    """An open descriptor holding ``path``'s lock, or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def claim(slots: tuple[int, ...], devices: Devices, folder: Path, *, poll_s: float = POLL_S,
          sleep: Callable[[float], None] = time.sleep) -> tuple[int, str, Path, int, float]:
    """Take the first free slot of ``slots`` (waiting while all are held); returns (slot, device, lock file,
    descriptor, seconds waited)."""
    _open_folder(folder)
    start = time.monotonic()
    told = False
    while True:
        for slot in slots:
            device = device_of(slot, devices)
            path = folder / f"gpu-{_safe(device)}.lock"
            fd = _try(path)
            if fd is not None:
                return slot, device, path, fd, time.monotonic() - start
        if not told:
            log.info("gpus: all %d GPU slot(s) %s are held by other processes on this machine; waiting for one "
                     "to free (locks in %s)", len(slots), list(slots), folder)
            told = True
        sleep(poll_s)


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def pin(slots: tuple[int, ...], devices: Devices, *, environ: MutableMapping[str, str] = os.environ,
        folder: Path | None = None, cuda_initialized: Callable[[], bool] = _cuda_initialized,
        poll_s: float = POLL_S) -> Slot:
    """This process's slot among ``slots``: the one it already holds, else a free one claimed now (waiting while
    none is free), with ``CUDA_VISIBLE_DEVICES`` set to its device before CUDA initialises. Raises ``ValueError``
    when CUDA was initialised here first (the pin could not take effect) or the held slot is not in ``slots``."""
    global _held
    if _held is not None:
        if _held.index not in slots:
            raise ValueError(f"gpus: this process already holds GPU slot {_held.index}, not in {list(slots)}")
        return _held
    if cuda_initialized():
        raise ValueError("gpus: CUDA was initialised in this process before a GPU was claimed, so "
                         "CUDA_VISIBLE_DEVICES can no longer pin it; claim the GPU first")
    index, device, path, fd, waited = claim(slots, devices, folder or lock_dir(environ), poll_s=poll_s)
    environ.setdefault(INHERITED_ENV, environ.get("CUDA_VISIBLE_DEVICES", UNSET))  # what later jobs' slots index
    environ["CUDA_VISIBLE_DEVICES"] = device
    _held = Slot(index, device, path, fd, devices.cuda, "torch" in sys.modules, waited)
    where = f"GPU {device}" if devices.cuda else f"{devices.source}: the job runs on the CPU"
    log.info("gpus: slot %d claimed, CUDA_VISIBLE_DEVICES=%s; %s", index, device, where)
    return _held


def held() -> Slot | None:
    """The slot this process holds, if any."""
    return _held
