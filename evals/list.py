"""``python -m evals.list``: what a run can be made of, one line each: tasks, compression methods with their knobs,
the KV storage every method takes (the shared knobs ``compression.kv_dtype`` and ``kv_scale``, and the methods that
store K/V in a format of their own), models, experiments and backends.

Read from the registries and the config folder (``tasks.registry.TASKS``, ``snapstream_core.methods.METHODS``,
``conf/<group>/*.yaml``), never from a list kept here: a task, method or model added the documented way shows up.
A line's description is the first sentence of its YAML file's header comment.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "conf"


def describe(path: Path) -> str:
    """The first sentence of a YAML file's header comment (``@package`` lines skipped), without file references."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("@package"):
            continue
        lines.append(text)
    text = " ".join(lines)
    text = re.sub(r"\s+(?:under |in |at )?\$\{[^}]*\}", "", text)  # interpolations: the resolved config says
    text = re.sub(r"\s*\((?:see )?(?:tasks|evals|snapstream_core|conf)/[\w/.]*\)", "", text)
    return re.split(r"(?<=[\w)`'}])\. |; ", text, maxsplit=1)[0].rstrip(".")


def method_description(cls: type) -> str:
    """The first sentence of a method's module docstring (its paper's one-line summary), without backquotes."""
    doc = inspect.getdoc(sys.modules.get(cls.__module__)) or inspect.getdoc(cls) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    paragraph = re.sub(r"\s*\((?:see )?(?:tasks|evals|snapstream_core|conf)/[\w/.]*\)", "", paragraph.replace("``", ""))
    return re.split(r"(?<=[\w)`'}])\. |; ", paragraph, maxsplit=1)[0].rstrip(".")


# What each value of the shared storage knobs means (snapstream_core/policies/kv_format.py states the bytes)
STORAGE_VALUES = {
    "kv_dtype": {"auto": "the model's dtype (bf16 on the 8B models; the default)",
                 "fp8_e4m3": "FP8 E4M3 codes, one byte an element, with fp32 scales; quantized on write, dequantized "
                             "when attention reads; stackable with any method (backend=hf)"},
    "kv_scale": {"tensor": "one scale per row, layer and K or V: the prompt's absolute maximum / 448 (the default)",
                 "head": "one scale per KV head, likewise",
                 "one": "fixed 1.0 (vLLM's value for a checkpoint without KV scales)"},
}


def storage_lines(width: int) -> list[str]:
    """The shared storage knobs with their values and meaning, then the methods whose default instance stores K/V
    in a quantized format of their own (KIVI; their own line says it too), from the registry."""
    from snapstream_core.methods import METHODS
    from snapstream_core.policies.kv_format import KV_DTYPES, KV_SCALES

    out = ["KV storage (shared knobs of every method, compression.KNOB=VALUE; a run's tag ends with "
           "-kv<dtype>-ks<scale> when not auto):"]
    for knob, values in (("kv_dtype", KV_DTYPES), ("kv_scale", KV_SCALES)):
        where = " (with kv_dtype=fp8_e4m3 only)" if knob == "kv_scale" else ""
        for value in values:
            out.append(f"  {f'compression.{knob}={value}'.ljust(width)}{STORAGE_VALUES[knob].get(value, '')}{where}")
    own = [n for n, cls in METHODS.items() if cls().kv_format.quantized]
    if own:
        out.append(f"  {'quantized methods'.ljust(width)}{', '.join(own)}: a format of their own (their knobs "
                   "above), compression.kv_dtype refused with them")
    return out


def _options(group: str) -> dict[str, str]:
    return {p.stem: describe(p) for p in sorted((CONF / group).glob("*.yaml"))}


def lines() -> list[str]:
    """Every line ``python -m evals.list`` prints."""
    from evals.config.conf_store import own_defaults
    from snapstream_core.methods import METHODS
    from tasks.registry import TASKS

    out = []
    tasks = _options("task")
    width = max(len(n) for n in [*TASKS, *METHODS, *_options("model"), *_options("experiment")]) + 14
    out.append("tasks (task=NAME):")
    for name in TASKS:
        out.append(f"  {f'task={name}'.ljust(width)}{tasks.get(name, '')}")
    out.append("compression methods (compression=NAME; what its budget caps: the prompt, or the whole cache while "
               "decoding; what it keeps; its knobs at their effective defaults: compression.KNOB=VALUE):")
    for name, cls in METHODS.items():
        effective = cls().knobs()  # a default instance: knobs derived in __post_init__ (prompt_budget, recent) filled
        knobs = " ".join(f"{k}={effective[k]}" for k in own_defaults(cls)) or "none"
        fmt = cls().kv_format
        stores = f"; stores K/V as {fmt.label}" if fmt.quantized else ""
        out.append(f"  {f'compression={name}'.ljust(width)}{f'[caps {cls.budget_cap}]'.ljust(15)}"
                   f"{method_description(cls)}{stores}; knobs: {knobs}")
    out += storage_lines(width)
    out.append("models (model=NAME):")
    for name, text in _options("model").items():
        out.append(f"  {f'model={name}'.ljust(width)}{text}")
    out.append("experiments (-m +experiment=NAME):")
    for name, text in _options("experiment").items():
        out.append(f"  {f'+experiment={name}'.ljust(width)}{text}")
    out.append("backends (backend=NAME):")
    for name, text in _options("backend").items():
        out.append(f"  {f'backend={name}'.ljust(width)}{text}")
    out.append("every key of a run and its resolved value: python -m evals.run --cfg job --resolve [overrides]")
    return out


def main() -> int:
    print("\n".join(lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
