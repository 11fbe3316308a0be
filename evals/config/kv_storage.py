"""Where a quantized KV storage can run (``compression.kv_dtype=fp8_e4m3``, a method whose ``kv_format`` is
quantized such as KIVI): one line naming the field, before any weights load.

- :func:`check_backend` (from ``evals.config.spec.check``, no torch): only our engine (``backend=hf``) stores K/V
  quantized. ``backend=vllm`` is refused rather than mapped to vLLM's ``kv_cache_dtype="fp8"``: with it vLLM also
  quantizes the queries to FP8 on the attention backends that take FP8 queries (FlashAttention 3, FlashInfer on
  Hopper: ``Attention.query_quant``), which our storage does not, so the two would be two methods under one name.
- :func:`check_device` (the runner before weights load, lm-eval's model before ``HFLM`` loads them): FP8 needs a
  torch with the ``float8_e4m3fn`` dtype (:func:`snapstream_core.quant.fp8.has_fp8`); the check is injectable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def check_backend(method: Any, backend: str, engine: bool, loads_weights: bool) -> None:
    """Refuse a quantized storage on a generating backend that does not run our engine (``backend=vllm``)."""
    fmt = method.kv_format
    if not fmt.quantized or engine or not loads_weights:
        return
    field = "compression.kv_dtype" if fmt.kind == "fp8_e4m3" else "compression"
    value = fmt.kind if fmt.kind == "fp8_e4m3" else method.method
    raise ValueError(f"{field}: backend={backend} keeps the KV cache in the model's dtype here (vLLM's "
                     f"kv_cache_dtype=fp8 also quantizes the queries where its attention takes FP8 queries, which "
                     f"this storage does not), got {value}; use backend=hf")


def check_device(method: Any, has_fp8: Callable[[], bool] | None = None) -> None:
    """Refuse FP8 storage when this torch has no float8 E4M3 dtype (``has_fp8``: default
    :func:`snapstream_core.quant.fp8.has_fp8`, imported here: torch loads only on the generating path)."""
    if method.kv_format.kind != "fp8_e4m3":
        return
    if has_fp8 is None:
        from snapstream_core.quant.fp8 import has_fp8
    if not has_fp8():
        import importlib.metadata as md

        try:
            version = md.version("torch")
        except md.PackageNotFoundError:
            version = "not installed"
        raise ValueError(f"compression.kv_dtype: fp8_e4m3 needs torch's float8_e4m3fn dtype (torch >= 2.1), "
                         f"this torch ({version}) has none; use compression.kv_dtype=auto")
