"""A run's identity: everything that can change a row, hashed into the fingerprint that names and guards its directory.

Built from what will run, not from a hand-kept list of keys: the whole resolved ``model`` node plus the identity of
its weights (by content for the embedded and local models: weights, configs, tokenizer, chat template), the whole
``task`` node plus a hash of the items actually read and of the data files the task reads to build prompts
(``prompt_files``: needle's haystack, LongBench-v2's templates), the *effective* knobs of the constructed
compression method, the sampling settings, the whole ``backend`` node (replay: plus a hash of its file) and the
harness version. Only keys that cannot change a row are left out (:data:`NOT_RESULT_KEYS`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

from evals.config.registry import BACKENDS, backend_traits

# Keys that cannot change a row: labels derived from other keys, and the batching of prompts.
# gen.compile: compiled and eager decode give the same tokens (tests/test_compile.py); rows record which ran.
# gen.rows: a sample draws from its own noise, the same tokens at any row count (tests/test_engine.py).
# task.plan, model.shape: what the planner (evals/plan) estimates from; never read by a run
# backend.python: where vLLM's interpreter lies; what it runs (vllm, torch, the worker) is in the generation identity
NOT_RESULT_KEYS = {"gen": ("batch_size", "tag", "compile", "rows"), "task": ("tag", "plan"), "model": ("shape",),
                   "backend": ("python",)}
HARNESS = "snapstream-harness"


def file_sha256(path: str | Path, limit: int | None = None) -> str:
    """sha256 of a file (of its first ``limit`` bytes when given), read in 1 MiB blocks."""
    h = hashlib.sha256()
    left = limit
    with open(path, "rb") as fh:
        while left is None or left > 0:
            block = fh.read(1 << 20 if left is None else min(1 << 20, left))
            if not block:
                break
            h.update(block)
            left = None if left is None else left - len(block)
    return h.hexdigest()


def items_sha256(items: list[Any]) -> str:
    """sha256 of the items a run evaluates, in order (their dataclass fields as JSON)."""
    h = hashlib.sha256()
    for item in items:
        record = dataclasses.asdict(item) if dataclasses.is_dataclass(item) else repr(item)
        h.update(json.dumps(record, sort_keys=True, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()


def harness_version() -> str | None:
    try:
        return metadata.version(HARNESS)
    except metadata.PackageNotFoundError:
        return None


# How a sampled token is drawn, in the identity of every sampled run: a run directory written by an earlier scheme
# (one torch RNG seeded per batch) is never resumed with samples of another. The engine draws from counter-based
# noise keyed on (gen.seed, item, sample, step) (snapstream_core/engine/noise.py); positions=in_cache runs go through
# generate(), seeded per item from torch's RNG (evals/execute/backends/hf.py).
# backend=vllm seeds each sample's request from (gen.seed, item, sample) (evals/execute/backends/vllm_requests.py).
SAMPLERS = {"engine": "counter-gumbel-v1", "generate": "torch-rng-per-item-v1", "seed-per-sample": "seed-per-sample-v1"}


def sampler_of(gen: dict[str, Any], method_knobs: dict[str, Any]) -> str | None:
    """The sampling scheme of a run (None when greedy: no randomness is drawn)."""
    if not float(gen.get("temperature") or 0) > 0:
        return None
    return SAMPLERS["generate" if method_knobs.get("positions") == "in_cache" else "engine"]


def _sampler(container: dict[str, Any], method_knobs: dict[str, Any]) -> str | None:
    """:func:`sampler_of`, or for a backend with its own engine (vLLM) its scheme: one seed per sample."""
    sampler = sampler_of(container["gen"], method_knobs)
    name = container["backend"].get("name")
    traits = backend_traits(name) if name in BACKENDS else None
    if sampler is not None and traits is not None and traits.loads_weights and not traits.engine:
        return SAMPLERS["seed-per-sample"]
    return sampler


def run_identity(container: dict[str, Any], method_knobs: dict[str, Any], weights: str, items: list[Any],
                 prompt_files: dict[str, str] | None = None) -> dict:
    """The identity of a run from its resolved config (``OmegaConf.to_container(cfg, resolve=True)``);
    ``prompt_files``: ``{name: sha256}`` of the data files the task reads to build prompts
    (:func:`evals.execute.code_identity.prompt_data`), in the task part when there are any."""
    backend = {k: v for k, v in container["backend"].items() if k not in NOT_RESULT_KEYS["backend"]}
    if backend.get("name") in BACKENDS and backend_traits(backend["name"]).replays:  # check() refuses other names
        backend["file_sha256"] = file_sha256(backend["path"])
        backend.pop("path", None)  # the content is the identity, not where it lies
    compression = dict(method_knobs)
    if compression.get("calibration"):  # a file a method reads (triattention): its content is the identity
        compression["calibration"] = {"sha256": file_sha256(Path(compression["calibration"]).expanduser())}
    drop = {k: set(v) for k, v in NOT_RESULT_KEYS.items()}
    return {
        "model": {**{k: v for k, v in container["model"].items() if k not in drop["model"]}, "weights": weights},
        "task": {
            **{k: v for k, v in container["task"].items() if k not in drop["task"]},
            "data_sha256": items_sha256(items),
            "items_read": len(items),
            **({"prompt_files": dict(prompt_files)} if prompt_files else {}),
        },
        "compression": compression,
        "gen": {k: v for k, v in container["gen"].items() if k not in drop["gen"]}
        | ({"sampler": sampler} if (sampler := _sampler(container, method_knobs)) else {}),
        "backend": backend,
        "harness": harness_version(),
    }


def fingerprint(identity: dict[str, Any]) -> str:
    """Stable 16-hex-digit hash of an identity."""
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
