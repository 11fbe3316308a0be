"""TriAttention's query statistics: our calibration file, checked whole at check time (no torch), loaded at run time.

TriAttention (WeianMao/triattention c3744ee6) scores a key against per-head statistics of the model's pre-RoPE
queries, computed once from plain text (``scripts/calibrate.py``, ``calibrate``). Its own ``.pt`` files are pickles;
ours is a safetensors file (no code runs on load), documented in docs/triattention.md, "Calibration file":

- tensors, float32, ``F = head_dim // 2`` frequency pairs (RoPE's half-split convention, pair ``f`` = dimensions
  ``f`` and ``f + F``): ``q_mean_real``, ``q_mean_imag`` (L, H, F): the mean over calibration tokens of the query as
  complex pairs; ``q_abs_mean`` (L, H, F): the mean of their moduli;
- ``__metadata__`` (strings): ``format`` (:data:`FORMAT`), ``n_layers``, ``n_heads``, ``n_kv_heads``, ``head_dim``,
  ``rope_theta``, ``rope_type``, and free provenance (``model``, ``tokens``, ``text_sha256`` or ``converted_from``).

The file is checked whole without torch (8-byte little-endian length, the JSON header, the tensors' offsets and
lengths, finite values; :func:`read_header`), so ``evals.config.spec.check`` refuses a missing, unreadable, cut,
corrupt or mismatched file in one line before weights load.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Mapping
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


class _Bad(Exception):
    """Why a file is not a whole calibration file (the reason in the one-line refusal)."""


def read_header(path: str | Path) -> CalibrationHeader:
    """The header of a calibration file, checked whole before anything loads: ``ValueError`` (one line naming
    :data:`FIELD` and the reason) when the file is missing, not a safetensors file, not ours, lacks a tensor or a
    field, nests its header deeper than :data:`MAX_DEPTH`, has a tensor whose ``data_offsets`` lie outside the file
    or whose length is not ``4 x`` its shape's size (F32), tensors that do not tile the data exactly (what
    safetensors requires on load), or values that are not finite (``q_abs_mean``: negative). Reads the file once,
    without torch (the data through numpy)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"{FIELD}: no such file: {path} (write one: python -m evals.calibrate model=NAME text=FILE)")
    try:
        with path.open("rb") as fh:
            header, meta, fields, data = _read_whole(fh, path.stat().st_size)
        _check_values(header, data)
    except _Bad as exc:
        raise ValueError(f"{FIELD}: {path} is not a TriAttention calibration file ({FORMAT}, docs/triattention.md): "
                         f"{exc}") from None
    except OSError as exc:
        raise ValueError(f"{FIELD}: {path} cannot be read ({exc.strerror or type(exc).__name__})") from None
    keys = {"format", "n_layers", "n_heads", "n_kv_heads", "head_dim", "rope_theta", "rope_type"}
    return CalibrationHeader(**fields, extra={k: v for k, v in meta.items() if k not in keys})


MAX_DEPTH = 3  # a safetensors header: {name: {"shape": [...]}}


def _depth(value: Any) -> int:
    """How deep lists and dicts nest in a parsed JSON value (iterative: never recurses)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                break
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _read_whole(fh: Any, file_size: int) -> tuple[dict, dict, dict, bytes]:
    """``(tensor entries, metadata, shape fields, data bytes)`` of an open file of ``file_size`` bytes; raises
    :class:`_Bad` with the reason."""
    head = fh.read(8)
    if len(head) < 8:
        raise _Bad(f"{len(head)} bytes, shorter than the 8-byte header length")
    (size,) = struct.unpack("<Q", head)
    if not 2 <= size <= min(MAX_HEADER, file_size - 8):
        raise _Bad(f"header length {size} outside [2, {min(MAX_HEADER, max(file_size - 8, 0))}]")
    try:
        header = json.loads(fh.read(size))
    except RecursionError:
        raise _Bad(f"header nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError):
        raise _Bad("header is not JSON") from None
    if not isinstance(header, dict) or _depth(header) > MAX_DEPTH:
        raise _Bad(f"header is not an object nested at most {MAX_DEPTH} levels")
    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _Bad(f"__metadata__.format is not {FORMAT}")
    try:
        fields = dict(n_layers=int(meta["n_layers"]), n_heads=int(meta["n_heads"]),
                      n_kv_heads=int(meta["n_kv_heads"]), head_dim=int(meta["head_dim"]),
                      rope_theta=float(meta["rope_theta"]), rope_type=str(meta["rope_type"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise _Bad(f"__metadata__ lacks a field or has a bad one ({type(exc).__name__}: {exc})") from None
    if any(fields[k] < 1 for k in ("n_layers", "n_heads", "n_kv_heads", "head_dim")) or fields["head_dim"] % 2:
        raise _Bad("__metadata__ n_layers, n_heads, n_kv_heads must be >= 1 and head_dim even")
    if sorted(header) != sorted(TENSORS):
        raise _Bad(f"holds tensors {sorted(header)}, expected {list(TENSORS)}")
    want = [fields["n_layers"], fields["n_heads"], fields["head_dim"] // 2]
    length = 4 * want[0] * want[1] * want[2]  # bytes of one (L, H, F) float32 tensor
    data_size = file_size - 8 - size
    spans = []
    for name in TENSORS:
        entry = header[name]
        if not isinstance(entry, dict) or entry.get("dtype") != "F32" or entry.get("shape") != want:
            raise _Bad(f"tensor {name} is not F32 of shape {want}")
        offsets = entry.get("data_offsets")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise _Bad(f"tensor {name}: data_offsets {offsets!r} is not two integers")
        begin, end = offsets
        if not 0 <= begin <= end <= data_size:
            raise _Bad(f"tensor {name}: data_offsets [{begin}, {end}] outside the file's {data_size} data bytes")
        if end - begin != length:
            raise _Bad(f"tensor {name}: {end - begin} data bytes, F32 of shape {want} needs {length}")
        spans.append((begin, end))
    spans.sort()
    if spans[0][0] != 0 or any(a[1] != b[0] for a, b in zip(spans, spans[1:])) or spans[-1][1] != data_size:
        raise _Bad(f"the tensors' data_offsets do not cover the file's {data_size} data bytes exactly")
    data = fh.read(data_size)
    if len(data) != data_size:
        raise _Bad(f"cut: {len(data)} of {data_size} data bytes")
    return header, meta, fields, data


def _check_values(header: Mapping[str, Any], data: bytes) -> None:
    """Every value finite, ``q_abs_mean`` (a mean of moduli) never negative."""
    import numpy as np

    for name in TENSORS:
        begin, end = header[name]["data_offsets"]
        values = np.frombuffer(data, dtype="<f4", count=(end - begin) // 4, offset=begin)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise _Bad(f"tensor {name} holds {bad.size} values that are not finite (the first at flat index "
                       f"{int(bad[0])}: {values[bad[0]]})")
        if name == "q_abs_mean" and (values < 0).any():
            raise _Bad(f"tensor {name} holds negative values (a mean of moduli is >= 0)")


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
    for name, value in (("q_mean", q_mean), ("q_abs_mean", q_abs_mean)):
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name}: {int((~torch.isfinite(value)).sum())} values are not finite (NaN or inf): "
                             "the statistics of a model that overflowed; nothing written")
    meta = {**{k: str(v) for k, v in (extra or {}).items()}, "format": FORMAT, "n_layers": str(L),
            "n_heads": str(H), "n_kv_heads": str(n_kv_heads), "head_dim": str(2 * F),
            "rope_theta": repr(float(rope_theta)), "rope_type": str(rope_type)}
    tensors = {"q_mean_real": q_mean.real, "q_mean_imag": q_mean.imag, "q_abs_mean": q_abs_mean}
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().to("cpu", torch.float32).contiguous() for k, v in tensors.items()}, str(path), meta)
    read_header(path)  # what the config check will read: the file as written, whole
    return path


def query_statistics(model: Any, input_ids: torch.Tensor, on_layer: Callable[[int, int], None] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q_mean, q_abs_mean)``, each (L, H, F), of a Llama-style model's pre-RoPE queries over ``input_ids`` (1, T)
    in one forward pass (``scripts/calibrate.py``, ``calibrate``: it re-applies and inverts RoPE on ``q_proj``'s
    output, which is that output). Read with forward hooks on each layer's ``self_attn.q_proj``, removed after;
    ``on_layer(done, L)`` is called as each layer's queries are read (a progress bar for a long forward pass)."""
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
            if on_layer is not None:
                on_layer(len(sums), len(layers))
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
