"""Strict reading of the config before anything loads: booleans are booleans, integers are integers, and a key
appended with ``+`` outside the documented extension points is refused (one ``ValueError`` naming the field).

Hydra reads ``overwrite=no`` as the string ``"no"`` (its grammar knows only ``true``/``false``), and Python would
take any non-empty string as true; ``gen.max_new_tokens=2.5`` would be truncated by ``int()``. Both are refused here.

Extension points where any key may be added: ``task.*`` and ``model.*`` (per-benchmark and per-family settings,
checked by the task and the model loader), ``compression.*`` (refused there by the method's own check), and the
top-level keys that an ``experiment`` config introduces. Everything else (the root, ``gen``, ``backend``) has the
keys of its YAML files only.
"""

from __future__ import annotations

import difflib
import functools
import math
from pathlib import Path
from typing import Any

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("model", "task", "compression", "backend", "gen")
MAX_SAMPLES = 10_000  # gen.n_samples: completions per item (R1's protocol uses 64)
BOOLEANS = ("overwrite", "sample_cache", "backend.partial", "model.thinking")
INTEGERS = {"gen.max_new_tokens": 1, "gen.top_k": 0, "gen.n_samples": 1, "gen.seed": None, "log_every": 0}
NUMBERS = ("gen.temperature", "gen.top_p")
POSITIVE = ("plan.memory_gib",)  # finite numbers > 0


@functools.lru_cache(maxsize=None)
def yaml_keys(*parts: str) -> frozenset[str]:
    """The top-level keys of every YAML file under ``conf/<parts>`` (a folder) or of ``conf/<parts>.yaml``."""
    from omegaconf import OmegaConf

    path = CONF.joinpath(*parts)
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path.with_suffix(".yaml")]
    keys: set[str] = set()
    for file in files:
        if file.is_file():
            keys |= {str(k) for k in OmegaConf.load(file).keys()}
    return frozenset(keys - {"defaults", "hydra"})


def _get(container: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = container
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _hint(key: str, known: frozenset[str] | set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def check_values(container: dict[str, Any]) -> None:
    """Booleans, integers and numbers of the resolved config, by type (no coercion)."""
    for name in BOOLEANS:
        found, value = _get(container, name)
        if found and value is not None and not isinstance(value, bool):
            raise ValueError(f"{name}: expected true or false, got {value!r}")
    for name, low in INTEGERS.items():
        found, value = _get(container, name)
        if not found or (value is None and name == "log_every"):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name}: expected an integer, got {value!r}")
        if low is not None and value < low:
            raise ValueError(f"{name}: must be >= {low}, got {value}")
    found, n = _get(container, "gen.n_samples")
    if found and n > MAX_SAMPLES:
        raise ValueError(f"gen.n_samples: at most {MAX_SAMPLES} completions per item, got {n}")
    for name in NUMBERS:
        found, value = _get(container, name)
        if found and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
            raise ValueError(f"{name}: expected a finite number, got {value!r}")
    for name in POSITIVE:
        found, value = _get(container, name)
        if found and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                      or value <= 0):
            raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")


def check_keys(container: dict[str, Any]) -> None:
    """No key outside the YAML files of the root, ``gen`` and the chosen backend (see the module docstring)."""
    root = yaml_keys("config") | yaml_keys("experiment") | set(GROUPS)
    for key in container:
        if key not in root:
            raise ValueError(f"{key}: no such key{_hint(key, root)} (`python -m evals.run --cfg job` prints every key)")
    gen_keys = yaml_keys("gen")
    for key in container.get("gen") or {}:
        if gen_keys and key not in gen_keys:
            raise ValueError(f"gen.{key}: no such key{_hint(key, gen_keys)}")
    backend = container.get("backend") or {}
    backend_keys = yaml_keys("backend", str(backend.get("name", "")))
    for key in backend:
        if backend_keys and key not in backend_keys:
            raise ValueError(f"backend.{key}: no such key{_hint(key, backend_keys)}")


def check(container: dict[str, Any]) -> None:
    """Every strict check of the resolved config (``evals.config.spec.check`` calls it before anything loads)."""
    check_keys(container)
    check_values(container)
