"""The method matrix the tests run on ``tiny_llama``, built from the registry (``snapstream_core.methods.METHODS``),
never from a hand-written list: a new method gets the geometry, engine, memory and exactness checks by being
registered.

Every registered class once at small knobs (:func:`small_knobs`: budgets that compress 40-300-token prompts, rings
that wrap within a few new tokens, compactions every 8 tokens), plus the variants that reach another storage policy
or budget rule: a ``ratio`` variant (the budget follows the prompt) and a ``recent`` ring variant, each kept once per
storage policy (the first registered class that reaches it). ``METHODS`` are those ``generate()`` runs too;
``ENGINE_ONLY`` those only the engine decodes (they compact while decoding); ``ALL`` both."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import fields
from functools import cache
from pathlib import Path

import torch

from snapstream_core.methods import METHODS as REGISTRY
from snapstream_core.methods.base import CompressionMethod

# Small values of the token-count knobs, by knob name (a knob a class lacks is not given).
SMALL = {"prompt_budget": 64, "budget": 24, "interval": 8, "group_size": 8, "residual": 16}
DECODE_WINDOW = 4  # the recent window a whole-cache method always keeps (its default, 8, is a third of the budget)
RING = 8  # ring slots of a ring variant (and of a class whose ring has a number by default)


@cache
def calibration_file() -> str:
    """A query-statistics file for ``tiny_llama`` (2 layers, 4 heads, head dim 16), for a ``calibration`` knob."""
    from snapstream_core.calibration import save_stats

    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 8, 2, generator=g)
    q_mean = torch.complex(q[..., 0], q[..., 1])
    folder = Path(tempfile.mkdtemp(prefix="snapstream-calib-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return str(save_stats(folder / "tiny.safetensors", q_mean, q_mean.abs() * 1.3, n_kv_heads=2,
                          rope_theta=10000.0, rope_type="default"))


# Knobs that name a file the method reads at run time (``CompressionMethod.run_files``), by knob name.
RUN_FILES = {"calibration": calibration_file}


def small_knobs(cls: type[CompressionMethod]) -> dict:
    """Small knobs of a registered class, from its field names only."""
    defaults = {f.name: f.default for f in fields(cls)}
    knobs = {k: v for k, v in SMALL.items() if k in defaults}
    if cls.budget_knob == "budget" and "window" in defaults and defaults["window"]:
        knobs["window"] = DECODE_WINDOW
    if isinstance(defaults.get("recent"), int):  # a ring by default: a small one
        knobs["recent"] = RING
    for name in cls.run_files:
        knobs[name] = RUN_FILES[name]()
    return knobs


def _label(method: CompressionMethod, variant: str) -> str:
    return method.method + (f"-{variant}" if variant else "")


def _matrix() -> list[tuple[str, CompressionMethod]]:
    out, seen = [], set()
    for cls in REGISTRY.values():
        knobs = small_knobs(cls)
        out.append(("", cls(**knobs)))
        names = {f.name for f in fields(cls)}
        variants = []
        if "ratio" in names and "prompt_budget" in names:
            variants.append(("ratio", {**{k: v for k, v in knobs.items() if k != "prompt_budget"}, "ratio": 0.5}))
        if "recent" in names and "recent" not in knobs and cls.policy != "ring":
            variants.append(("ring", {**knobs, "recent": RING}))
        for variant, extra in variants:
            method = cls(**extra)
            key = (variant, method.storage_kind)
            if key not in seen:
                seen.add(key)
                out.append((variant, method))
    return [(_label(m, v), m) for v, m in out]


def _runs_in_generate(method: CompressionMethod) -> bool:
    try:
        method.check_engine("generate()")
    except ValueError:
        return False
    return True


MATRIX = _matrix()
METHODS = [m for _, m in MATRIX if _runs_in_generate(m)]
IDS = [label for label, m in MATRIX if _runs_in_generate(m)]
ENGINE_ONLY = [m for _, m in MATRIX if not _runs_in_generate(m)]
ENGINE_ONLY_IDS = [label for label, m in MATRIX if not _runs_in_generate(m)]
ALL = METHODS + ENGINE_ONLY
ALL_IDS = IDS + ENGINE_ONLY_IDS


def roomy(method: CompressionMethod, room: int = 4096) -> CompressionMethod:
    """The same method with every budget and ring at ``room`` tokens: it drops nothing of a short generation."""
    from dataclasses import replace

    names = {f.name for f in fields(method)}
    knobs = {k: room for k in ("prompt_budget", "budget", "recent") if k in names and getattr(method, k) is not None}
    if "ratio" in names and method.ratio is not None:
        knobs.update(ratio=None, prompt_budget=room)
    if "recent" in knobs and method.budget_derived == ("recent",):  # recent follows prompt_budget (StreamingLLM)
        knobs["recent"] = None
    return replace(method, **knobs)


def prompts(lengths, seed=0) -> list[list[int]]:
    """Token id lists of the given lengths, ids in [1, 1000), reproducible from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 1000, (n,), generator=gen).tolist() for n in lengths]
