"""SnapStream compression core: SnapKV prefill selection + StreamingLLM ring buffer in a fixed-size KV cache.

Depends on torch and transformers only. Typical use with plain ``generate``::

    import snapstream_core as ss
    method = ss.SnapStream(prompt_budget=1024, recent=256)
    ss.attach(model)                       # registers and selects the snapstream_<sdpa|eager|...> attention
    cache = ss.make_cache(model, method)   # one cache per generate call
    out = model.generate(**inputs, past_key_values=cache, max_new_tokens=256)
    cache.stats.as_row()                   # kv_tokens_peak, kv_bytes_peak, ...

Batches and n samples from one prefill: ``snapstream_core.generate.generate(model, prompts, method,
ss.SamplingConfig(...), ...)`` (the submodule ``snapstream_core.generate`` is not shadowed by a function).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> submodule; imported on first use (PEP 562), so ``import snapstream_core.methods`` (the method dataclasses,
# checked before any run starts) loads neither torch nor transformers.
_LAZY = {
    "compression_from_config": "api",
    "make_cache": "api",
    "attach": "attention",
    "register": "attention",
    "CompressedCache": "cache",
    "GenerationOutput": "generate",
    "SamplingConfig": "sampling",
    "METHODS": "methods",
    "CompressionMethod": "methods",
    "NoCompression": "methods",
    "SnapKV": "methods",
    "SnapStream": "methods",
    "StreamingLLM": "methods",
    "RKV": "methods",
    "SnapKVDecode": "methods",
    "DecodeMethod": "methods",
    "knob_names": "methods",
    "keep_indices": "selection",
    "snapkv_scores": "selection",
}

if TYPE_CHECKING:
    from snapstream_core.api import compression_from_config, make_cache
    from snapstream_core.attention import attach, register
    from snapstream_core.cache import CompressedCache
    from snapstream_core.generate import GenerationOutput
    from snapstream_core.methods import (
        METHODS,
        RKV,
        CompressionMethod,
        DecodeMethod,
        NoCompression,
        SnapKV,
        SnapKVDecode,
        SnapStream,
        StreamingLLM,
        knob_names,
    )
    from snapstream_core.sampling import SamplingConfig
    from snapstream_core.selection import keep_indices, snapkv_scores


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"snapstream_core.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'snapstream_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "METHODS",
    "CompressedCache",
    "CompressionMethod",
    "GenerationOutput",
    "NoCompression",
    "SamplingConfig",
    "SnapKV",
    "SnapStream",
    "StreamingLLM",
    "RKV",
    "SnapKVDecode",
    "DecodeMethod",
    "attach",
    "compression_from_config",
    "keep_indices",
    "knob_names",
    "make_cache",
    "register",
    "snapkv_scores",
]
