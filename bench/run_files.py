"""The files a bench case's method reads at run time (``CompressionMethod.run_files``), made for the bench's model.

TriAttention scores with the model's query statistics (its ``calibration`` file, which a run names and
``python -m evals.calibrate`` writes). The bench has no such file for its random-weight or embedded model, so it
computes one with the core's :func:`snapstream_core.calibration.query_statistics` over the case's own prompt, once
per model and prompt length in a process, into a temporary folder that lives as long as the process.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import torch

from snapstream_core.calibration import query_statistics, save_stats
from snapstream_core.methods.base import CompressionMethod

_MADE: dict[tuple[int, int], str] = {}
_FOLDER: list[Path] = []


def calibration_for(model, ids: torch.Tensor) -> str:
    """A calibration file of ``model`` from the prompt ``ids`` (1, T): the path, made once per (model, T)."""
    key = (id(model), ids.shape[-1])
    if key not in _MADE:
        if not _FOLDER:
            _FOLDER.append(Path(tempfile.mkdtemp(prefix="bench_calibration_")))
        q_mean, q_abs_mean = query_statistics(model, ids.to(next(model.parameters()).device))
        rope = model.config.rope_parameters
        path = save_stats(_FOLDER[0] / f"calibration_{len(_MADE)}.safetensors", q_mean, q_abs_mean,
                          n_kv_heads=model.config.num_key_value_heads, rope_theta=float(rope["rope_theta"]),
                          rope_type=str(rope.get("rope_type", "default")))
        _MADE[key] = str(path)
    return _MADE[key]


def with_run_files(method: CompressionMethod, model, ids: torch.Tensor) -> CompressionMethod:
    """``method`` with every run file it reads and lacks made for ``model``; a run file the bench cannot make is
    refused in one line naming the knob."""
    changes = {}
    for name in method.run_files:
        if getattr(method, name) is not None:
            continue
        if name != "calibration":
            raise ValueError(f"bench.methods: {method.method} reads a {name} file, which the bench cannot make")
        changes[name] = calibration_for(model, ids)
    return dataclasses.replace(method, **changes) if changes else method
