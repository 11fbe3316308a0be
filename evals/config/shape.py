"""A model's shape, read without weights and without the network: the ``shape:`` block of its YAML
(``conf/model/*.yaml``), or ``config.json`` of a local ``model.path``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from snapstream_core.memory import Arch

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelShape:
    """What the memory and time estimates need of a decoder-only transformer (Llama-style GQA)."""

    n_params: int
    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"model.shape.dtype: must be one of {tuple(DTYPE_BYTES)}, got {self.dtype!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "dtype" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"model.shape.{f.name}: must be an integer >= 1, got {value!r}")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> int:
        return self.n_params * self.dtype_bytes

    @property
    def arch(self) -> Arch:
        """The memory model's view of this shape (:mod:`snapstream_core.memory`)."""
        return Arch(n_layers=self.n_layers, hidden=self.hidden, intermediate=self.intermediate, n_heads=self.n_heads,
                    n_kv_heads=self.n_kv_heads, head_dim=self.head_dim, vocab=self.vocab,
                    dtype_bytes=self.dtype_bytes)

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values of one token in every layer (Llama-3.1-8B in bf16: 128 KiB)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes


def shape_from_model(model: Mapping[str, Any]) -> ModelShape:
    """The shape of a resolved ``model`` node: its ``shape`` block, whose ``dtype`` follows ``model.dtype``; a
    ``model.source=path`` folder's ``config.json`` wins over the block for the architecture (a local file; the hub
    is never asked)."""
    block = dict(model.get("shape") or {})
    if model.get("source") == "path" and model.get("path"):
        config = Path(model["path"]) / "config.json"
        if config.is_file():
            block = {**block, **_from_config_json(json.loads(config.read_text()))}
    if not block:
        raise ValueError(
            f"model.shape: {model.get('name')} has no shape block (n_params, n_layers, hidden, intermediate, n_heads, "
            "n_kv_heads, head_dim, vocab, max_positions, dtype) for the planner"
        )
    block["dtype"] = model.get("dtype") or block.get("dtype")
    names = {f.name for f in fields(ModelShape)}
    missing = sorted(names - set(block))
    if missing:
        raise ValueError(f"model.shape: {model.get('name')} lacks {', '.join(missing)}")
    return ModelShape(**{k: block[k] for k in names})


def _from_config_json(c: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture keys of a transformers ``config.json`` (n_params stays the YAML's: it needs the weights)."""
    out = {
        "n_layers": c.get("num_hidden_layers"),
        "hidden": c.get("hidden_size"),
        "intermediate": c.get("intermediate_size"),
        "n_heads": c.get("num_attention_heads"),
        "n_kv_heads": c.get("num_key_value_heads", c.get("num_attention_heads")),
        "vocab": c.get("vocab_size"),
        "max_positions": c.get("max_position_embeddings"),
    }
    if out["hidden"] and out["n_heads"]:
        out["head_dim"] = c.get("head_dim") or out["hidden"] // out["n_heads"]
    return {k: v for k, v in out.items() if v is not None}


def rope_of(model: Mapping[str, Any]) -> dict[str, Any]:
    """``rope_theta`` and ``rope_type`` of a resolved ``model`` node, as far as it states them without weights: its
    shape block, or a ``model.source=path`` folder's ``config.json`` (which wins); keys it does not state are left
    out (checked later, against the loaded model)."""
    out = {k: v for k, v in (model.get("shape") or {}).items() if k in ("rope_theta", "rope_type")}
    if model.get("source") == "path" and model.get("path"):
        config = Path(model["path"]) / "config.json"
        if config.is_file():
            c = json.loads(config.read_text())
            rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
            theta = c.get("rope_theta", rope.get("rope_theta"))
            out = {**out, **({"rope_theta": float(theta)} if theta is not None else {}),
                   "rope_type": rope.get("rope_type") or rope.get("type") or "default"}
    return out


def positions_of(model: Mapping[str, Any]) -> tuple[int, str] | None:
    """``(positions, where it is stated)`` of a resolved ``model`` node, read without weights and without the
    network: a ``model.source=path`` folder's ``config.json`` (``max_position_embeddings``), a ``model.source=random``
    model's ``arch`` (what it is built from), else its shape block's ``max_positions`` (as :func:`shape_from_model`);
    None when none states it."""
    value, where = (model.get("shape") or {}).get("max_positions"), "model.shape.max_positions"
    arch = model.get("arch") or {}
    if model.get("source") == "random" and "max_position_embeddings" in arch:
        value, where = arch["max_position_embeddings"], "model.arch.max_position_embeddings"
    if model.get("source") == "path" and model.get("path"):
        config = Path(model["path"]) / "config.json"
        if config.is_file():
            try:
                stated = json.loads(config.read_text())
            except (ValueError, RecursionError, OSError):
                raise ValueError(f"model.path: {config} is not a readable JSON config") from None
            if isinstance(stated, dict) and "max_position_embeddings" in stated:
                value, where = stated["max_position_embeddings"], f"max_position_embeddings of {config}"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: must be an integer >= 1, got {value!r}")
    return value, where
