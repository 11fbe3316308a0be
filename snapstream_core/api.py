"""The one-call entry points: a method from a config mapping, and a cache for a model."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from snapstream_core.hints import did_you_mean
from snapstream_core.methods import METHODS, knob_names
from snapstream_core.methods.base import CompressionMethod

if TYPE_CHECKING:  # compression_from_config imports no torch (configs are checked before it loads)
    from snapstream_core.cache import CompressedCache

log = logging.getLogger(__name__)

# Keys a Hydra `compression` node may carry that are not knobs (naming of run directories).
NON_KNOBS = ("tag",)
_SAID: set[tuple[str, tuple[str, ...]]] = set()  # (method, ignored knobs) already logged


def compression_from_config(cfg: Mapping[str, Any]) -> CompressionMethod:
    """Build the method dataclass from ``{"method": ..., **knobs}``.

    ``None`` knobs take the method's default (every Hydra ``compression`` node carries every method's knob, null
    unless given, so a non-null key is one the user set). A knob the method does not read is refused with one line
    naming the method's own knob (:func:`not_read`), except by ``method=none``, which reads none and accepts any (the
    full cache, whatever the budget, so that sweeps can include it; its rows and tag carry no knob). Unknown methods,
    keys that are no method's knob (a misspelt name) and bad values raise ``ValueError`` naming the field.
    """
    cfg = {k: v for k, v in dict(cfg).items() if k not in NON_KNOBS and v is not None}
    name = cfg.pop("method", None)
    if name not in METHODS:
        hint = did_you_mean(name, METHODS)
        raise ValueError(f"compression.method: unknown method {name!r}; known: {', '.join(METHODS)}.{hint}")
    known = knob_names()
    unknown = sorted(k for k in cfg if k not in known)
    if unknown:
        hint = did_you_mean(unknown[0], known)
        raise ValueError(f"compression.{unknown[0]}: not a knob of any method; known: {', '.join(known)}.{hint}")
    cls = METHODS[name]
    allowed = cls.field_names()
    ignored = sorted(k for k in cfg if k not in allowed)
    if ignored and name != "none":
        raise ValueError(not_read(cls, ignored[0]))
    if ignored:
        said = (name, tuple(ignored))
        if said not in _SAID:  # once per process: a sweep's check builds the method for every combination
            _SAID.add(said)
            log.info("compression=%s keeps the full cache: %s not used", name,
                     ", ".join(f"{k}={cfg[k]!r}" for k in ignored))
    return cls(**{k: v for k, v in cfg.items() if k in allowed})


CAPS = {"prompt": "caps the prompt kept; decoded tokens are added beside it",
        "cache": "caps the whole cache, decoded tokens included"}


def not_read(cls: type[CompressionMethod], key: str) -> str:
    """The one line refusing ``compression.<key>`` for a method that does not read it: the method's own budget knob
    when ``key`` is another method's budget, else the methods that read ``key`` and the method's own knobs."""
    shared = [f.name for f in fields(CompressionMethod)]  # positions, kv_dtype, kv_scale: last
    own = [n for n in cls.field_names() if n not in shared] + shared
    budgets = {c.budget_knob for c in METHODS.values()}
    if (key in budgets or key == "ratio") and cls.budget_knob not in cls.field_names():  # kivi: no budget at all
        return (f"compression.{key}: {cls.method} does not read it; it has no budget (it keeps every token); "
                f"its knobs: {', '.join(own)}")
    if key in budgets or key == "ratio":
        return (f"compression.{key}: {cls.method} does not read it; its budget is compression.{cls.budget_knob} "
                f"({CAPS[cls.budget_cap]})")
    readers = [m for m, c in METHODS.items() if key in c.field_names()]
    return (f"compression.{key}: {cls.method} does not read it (a knob of {', '.join(readers)}); "
            f"its knobs: {', '.join(own)}")


def make_cache(model, method: CompressionMethod) -> CompressedCache:
    """A fresh :class:`CompressedCache` for one ``generate`` call on ``model``.

    Checks that the model is a decoder whose layers all use full attention, and that ``positions=in_cache`` and a
    method that reads RoPE (``CompressionMethod.reads_rope``) have a RoPE they can re-rotate.
    """
    from snapstream_core.cache import CompressedCache
    from snapstream_core.rope import rope_inv_freq

    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    if any(t != "full_attention" for t in layer_types):
        raise ValueError(f"snapstream_core supports full-attention decoders only; layer types: {set(layer_types)}")
    inv_freq = rope_inv_freq(model)
    if method.positions == "in_cache" and inv_freq is None:
        raise ValueError("compression.positions=in_cache needs a RoPE linear in position (default/linear/llama3)")
    if method.reads_rope and inv_freq is None:
        raise ValueError(f"compression={method.method}: its scores rotate queries, which needs a RoPE linear in "
                         "position (default/linear/llama3)")
    return CompressedCache(method, config.num_hidden_layers, inv_freq)
