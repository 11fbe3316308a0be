"""TriAttention's query statistics: our calibration file, read at check time (header only) and at load (tensors).

TriAttention (WeianMao/triattention c3744ee6) scores a key against per-head statistics of the model's pre-RoPE
queries, computed once from plain text (``scripts/calibrate.py``, ``calibrate``). Its own ``.pt`` files are pickles;
ours is a safetensors file (no code runs on load), documented in docs/triattention.md, "Calibration file":

- tensors, float32, ``F = head_dim // 2`` frequency pairs (RoPE's half-split convention, pair ``f`` = dimensions
  ``f`` and ``f + F``): ``q_mean_real``, ``q_mean_imag`` (L, H, F): the mean over calibration tokens of the query as
  complex pairs; ``q_abs_mean`` (L, H, F): the mean of their moduli;
- ``__metadata__`` (strings): ``format`` (:data:`FORMAT`), ``n_layers``, ``n_heads``, ``n_kv_heads``, ``head_dim``,
  ``rope_theta``, ``rope_type``, and free provenance (``model``, ``tokens``, ``text_sha256`` or ``converted_from``).

The header is read without torch (8-byte little-endian length, then JSON), so ``evals.config.spec.check`` can refuse a
missing, unreadable or mismatched file before weights load.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

FORMAT = "snapstream-triattention-calibration/1"
TENSORS = ("q_mean_real", "q_mean_imag", "q_abs_mean")
MAX_HEADER = 1 << 20  # bytes: a header larger than this is not ours
FIELD = "compression.calibration"


@dataclass(frozen=True)
class CalibrationHeader:
    """The shape a calibration file was made for, and its provenance (``extra``)."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float
    rope_type: str
    extra: Mapping[str, str]

    def mismatch(self, n_layers: int, n_heads: int, n_kv_heads: int, head_dim: int,
                 rope_theta: float | None = None, rope_type: str | None = None) -> str | None:
        """The first difference with a model's shape, as ``"name file vs model"``; ``None`` when it fits (a rope
        value the model's config does not state is not compared)."""
        pairs = [("layers", self.n_layers, n_layers), ("heads", self.n_heads, n_heads),
                 ("KV heads", self.n_kv_heads, n_kv_heads), ("head dim", self.head_dim, head_dim)]
        for name, ours, theirs in pairs:
            if ours != theirs:
                return f"{name} {ours} vs {theirs}"
        if rope_theta is not None and not math.isclose(self.rope_theta, float(rope_theta), rel_tol=1e-6):
            return f"rope_theta {self.rope_theta:g} vs {float(rope_theta):g}"
        if rope_type is not None and self.rope_type != rope_type:
            return f"rope_type {self.rope_type} vs {rope_type}"
        return None


def read_header(path: str | Path) -> CalibrationHeader:
    """The header of a calibration file; ``ValueError`` (one line naming :data:`FIELD`) when it is missing, not a
    safetensors file, not ours, or lacks a tensor or a field."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"{FIELD}: no such file: {path} (write one: python -m evals.calibrate model=NAME text=FILE)")
    try:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if not 2 <= size <= MAX_HEADER:
                raise ValueError
            header = json.loads(fh.read(size))
        meta = header.pop("__metadata__")
        if meta.get("format") != FORMAT:
            raise ValueError
        fields = dict(n_layers=int(meta["n_layers"]), n_heads=int(meta["n_heads"]),
                      n_kv_heads=int(meta["n_kv_heads"]), head_dim=int(meta["head_dim"]),
                      rope_theta=float(meta["rope_theta"]), rope_type=str(meta["rope_type"]))
        want = [fields["n_layers"], fields["n_heads"], fields["head_dim"] // 2]
        if any(header[name]["shape"] != want or header[name]["dtype"] != "F32" for name in TENSORS):
            raise ValueError
    except (OSError, struct.error, ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"{FIELD}: {path} is not a TriAttention calibration file ({FORMAT}, docs/triattention.md)"
                         ) from None
    keys = {"format", "n_layers", "n_heads", "n_kv_heads", "head_dim", "rope_theta", "rope_type"}
    return CalibrationHeader(**fields, extra={k: v for k, v in meta.items() if k not in keys})


def check_for_model(path: str | Path, shape: Mapping[str, Any]) -> CalibrationHeader:
    """Refuse (one line) a calibration file that is not for a model of ``shape`` (``n_layers, n_heads, n_kv_heads,
    head_dim`` and, when given, ``rope_theta``, ``rope_type``)."""
    header = read_header(path)
    diff = header.mismatch(shape["n_layers"], shape["n_heads"], shape["n_kv_heads"], shape["head_dim"],
                           shape.get("rope_theta"), shape.get("rope_type"))
    if diff is not None:
        raise ValueError(f"{FIELD}: {path} was made for another model shape ({diff}); write one for this model: "
                         "python -m evals.calibrate")
    return header


@dataclass(frozen=True)
class QueryStats:
    """Tensors of a calibration file. ``q_mean`` (L, H, F) complex64: mean query per frequency pair; ``q_abs_mean``
    (L, H, F) float32: mean modulus."""

    header: CalibrationHeader
    q_mean: torch.Tensor
    q_abs_mean: torch.Tensor


def load_stats(path: str | Path, device: Any = "cpu") -> QueryStats:
    """The statistics of a (checked) calibration file, on ``device``."""
    import torch
    from safetensors import safe_open

    header = read_header(path)
    with safe_open(str(Path(path).expanduser()), "pt", device=str(device)) as f:  # only our three tensors
        tensors = {name: f.get_tensor(name) for name in TENSORS}
    q_mean = torch.complex(tensors["q_mean_real"], tensors["q_mean_imag"])
    return QueryStats(header, q_mean, tensors["q_abs_mean"])


def save_stats(path: str | Path, q_mean: torch.Tensor, q_abs_mean: torch.Tensor, *, n_kv_heads: int,
               rope_theta: float, rope_type: str, extra: Mapping[str, str] | None = None) -> Path:
    """Write a calibration file from ``q_mean`` (L, H, F) complex and ``q_abs_mean`` (L, H, F) real."""
    import torch
    from safetensors.torch import save_file

    L, H, F = q_abs_mean.shape
    if q_mean.shape != (L, H, F):
        raise ValueError(f"q_mean: shape {tuple(q_mean.shape)}, expected {(L, H, F)}")
    meta = {**{k: str(v) for k, v in (extra or {}).items()}, "format": FORMAT, "n_layers": str(L),
            "n_heads": str(H), "n_kv_heads": str(n_kv_heads), "head_dim": str(2 * F),
            "rope_theta": repr(float(rope_theta)), "rope_type": str(rope_type)}
    tensors = {"q_mean_real": q_mean.real, "q_mean_imag": q_mean.imag, "q_abs_mean": q_abs_mean}
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().to("cpu", torch.float32).contiguous() for k, v in tensors.items()}, str(path), meta)
    return path


def query_statistics(model: Any, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q_mean, q_abs_mean)``, each (L, H, F), of a Llama-style model's pre-RoPE queries over ``input_ids`` (1, T)
    in one forward pass (``scripts/calibrate.py``, ``calibrate``: it re-applies and inverts RoPE on ``q_proj``'s
    output, which is that output). Read with forward hooks on each layer's ``self_attn.q_proj``, removed after."""
    import torch

    layers = model.model.layers
    n_heads = model.config.num_attention_heads
    sums: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook(index: int):
        def read(module, args, output):  # output (1, T, H * D)
            q = output[0].to(torch.float32).view(output.shape[1], n_heads, -1)  # (T, H, D)
            F = q.shape[-1] // 2
            pairs = torch.complex(q[..., :F], q[..., F:])
            sums[index] = (pairs.mean(0), pairs.abs().mean(0))
        return read

    handles = [layer.self_attn.q_proj.register_forward_hook(hook(i)) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            model(input_ids=input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return (torch.stack([sums[i][0] for i in range(len(layers))]),
            torch.stack([sums[i][1] for i in range(len(layers))]))
