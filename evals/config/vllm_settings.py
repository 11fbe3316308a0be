"""``backend=vllm``'s keys, checked before anything loads (one ``ValueError`` naming the field each).

vLLM runs the full cache only: any ``compression`` but ``none`` is refused here, as are the ``gen.*`` keys that only
our decode engine reads (``gen.rows``, ``gen.compile``; ``gen.batch_size``: vLLM batches with ``backend.chunk``).
``data_parallel_size`` is not a key: vLLM's ``LLM`` class refuses it in one process (vLLM 0.32)."""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
DTYPES = ("float32", "bfloat16", "float16")
SETUP_HINT = "run `make setup-vllm` or set backend.python=<a python that has vllm>"


@dataclass(frozen=True)
class VLLMSettings:
    """The checked ``backend.*`` of ``backend=vllm``; ``engine()`` is what ``vllm.LLM`` takes besides the model."""

    python: str  # the interpreter the worker runs in (absolute)
    dtype: str  # model.dtype unless backend.dtype is given
    max_model_len: int | None
    tensor_parallel_size: int
    gpu_memory_utilization: float
    enforce_eager: bool | None  # None: eager on a CPU build (compiling there costs minutes), vLLM's default elsewhere
    cpu_kv_cache_gib: float | None  # VLLM_CPU_KVCACHE_SPACE (a CPU build's KV pool); None: vLLM's default
    chunk: int  # requests sent to vLLM per call (rows are written after each)
    seed: int

    def engine(self) -> dict[str, Any]:
        """The keyword arguments of ``vllm.LLM(model, **engine)``."""
        out: dict[str, Any] = {"dtype": self.dtype, "tensor_parallel_size": self.tensor_parallel_size,
                               "gpu_memory_utilization": self.gpu_memory_utilization, "seed": self.seed}
        if self.enforce_eager is not None:
            out["enforce_eager"] = self.enforce_eager
        if self.max_model_len is not None:
            out["max_model_len"] = self.max_model_len
        return out

    def env(self) -> dict[str, str]:
        """Environment the worker sets before importing vllm."""
        return {} if self.cpu_kv_cache_gib is None else {"VLLM_CPU_KVCACHE_SPACE": f"{self.cpu_kv_cache_gib:g}"}


def resolve_python(value: Any) -> str:
    """``backend.python`` as an absolute path: null -> the repo's ``.venv-vllm/bin/python``; a bare name is looked up
    on ``PATH`` (``python3`` of a site stack); raises ``ValueError`` when it is not an executable file."""
    if value in (None, ""):
        path = DEFAULT_PYTHON
    elif os.sep not in str(value):
        found = shutil.which(str(value))
        if found is None:
            raise ValueError(f"backend.python: {value!r} is not on PATH; {SETUP_HINT}")
        path = Path(found)
    else:
        path = Path(str(value)).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ValueError(f"backend.python: no executable at {path}; {SETUP_HINT}")
    return str(path.absolute())  # not resolved: a venv's python is a link whose venv matters


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"backend.{key}: must be an integer >= 1, got {value!r}")
    return value


def vllm_settings(backend: dict[str, Any], model: dict[str, Any], compression: str, gen: dict[str, Any]
                  ) -> VLLMSettings:
    """Check ``backend=vllm``'s node against the run (the resolved ``backend``, ``model`` and ``gen`` nodes and the
    compression method's name); returns the settings."""
    if compression != "none":
        raise ValueError(f"compression: backend=vllm runs the full cache only (compression=none), got "
                         f"compression={compression}; use backend=hf for compression methods")
    if model.get("source") == "random":
        raise ValueError("model.source: backend=vllm loads weights from a folder or the hub; random weights "
                         "(model.source=random) exist only in our engine")
    if str(gen.get("rows", "auto")) != "auto":
        raise ValueError(f"gen.rows: backend=vllm schedules its own batch; leave gen.rows=auto, got {gen['rows']}")
    if str(gen.get("compile", "auto")) != "auto":
        raise ValueError(f"gen.compile: backend=vllm compiles as vLLM does (backend.enforce_eager=true: never); "
                         f"leave gen.compile=auto, got {gen['compile']}")
    if gen.get("batch_size", 1) != 1:
        raise ValueError(f"gen.batch_size: backend=vllm sends backend.chunk requests at a time; leave "
                         f"gen.batch_size=1, got {gen['batch_size']}")
    dtype = backend.get("dtype") or model.get("dtype")
    if dtype not in DTYPES:
        raise ValueError(f"backend.dtype: must be one of {', '.join(DTYPES)} (null: model.dtype), got {dtype!r}")
    max_len = backend.get("max_model_len")
    util = backend.get("gpu_memory_utilization", 0.9)
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
        raise ValueError(f"backend.gpu_memory_utilization: must be in (0, 1], got {util!r}")
    eager = backend.get("enforce_eager")
    if eager is not None and not isinstance(eager, bool):
        raise ValueError(f"backend.enforce_eager: must be true, false or null (eager on CPU), got {eager!r}")
    kv = backend.get("cpu_kv_cache_gib")
    if kv is not None and (isinstance(kv, bool) or not isinstance(kv, (int, float)) or not math.isfinite(kv)
                           or kv <= 0):
        raise ValueError(f"backend.cpu_kv_cache_gib: must be a number of GiB > 0 (null: vLLM's default), got {kv!r}")
    return VLLMSettings(
        python=resolve_python(backend.get("python")),
        dtype=str(dtype),
        max_model_len=None if max_len is None else _positive_int("max_model_len", max_len),
        tensor_parallel_size=_positive_int("tensor_parallel_size", backend.get("tensor_parallel_size", 1)),
        gpu_memory_utilization=float(util),
        enforce_eager=eager,
        cpu_kv_cache_gib=None if kv is None else float(kv),
        chunk=_positive_int("chunk", backend.get("chunk", 64)),
        seed=int(gen.get("seed", 0)),
    )
