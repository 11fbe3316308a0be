"""lm-eval's side of ``task=lm_eval``: its ``TaskManager`` (built once per process), the checks made before any model
loads, and the mapping of a task's ``generation_kwargs`` onto the runner's generation settings.

Only lm-evaluation-harness is imported here (no torch): its task index, ``Task`` objects, filters and metrics are used
as they are, so that a document is rendered, filtered and scored exactly as ``lm_eval`` does.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from snapstream_core.hints import did_you_mean

log = logging.getLogger(__name__)

GENERATE = "generate_until"
MAX_TOKEN_KEYS = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")  # lm-eval's priority
SAMPLING_KEYS = ("do_sample", "temperature", "top_p", "top_k")
SUPPORTED_GEN_KEYS = ("until", *MAX_TOKEN_KEYS, *SAMPLING_KEYS)


def _plain(value: Any) -> Any:
    """An OmegaConf node (or anything) as plain Python containers."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def include_paths(cfg) -> tuple[str, ...]:
    """``task.include_path`` (one folder or a list) as checked absolute paths."""
    raw = _plain(cfg.get("include_path"))
    paths = [] if raw in (None, "") else [raw] if isinstance(raw, str) else list(raw)
    out = []
    for p in paths:
        path = Path(str(p)).expanduser()
        if not path.is_dir():
            raise ValueError(f"task.include_path: no such directory: {p}")
        out.append(str(path.resolve()))
    return tuple(out)


def _metadata_key(cfg) -> str:
    meta = _plain(cfg.get("metadata")) or {}
    if not isinstance(meta, dict):
        raise ValueError(f"task.metadata: must be a mapping (lm-eval's --metadata), got {meta!r}")
    return json.dumps(meta, sort_keys=True)


@lru_cache(maxsize=4)
def task_manager(paths: tuple[str, ...], include_defaults: bool, metadata: str):
    """lm-eval's ``TaskManager`` over ``paths`` (+ its built-in tasks): indexing the ~15k built-in YAMLs takes
    seconds, so it is built once per process (a Hydra multirun shares it)."""
    from lm_eval.tasks import TaskManager

    log.info("indexing lm-eval tasks (include_path=%s, include_defaults=%s)", list(paths), include_defaults)
    return TaskManager(include_path=list(paths) or None, include_defaults=include_defaults,
                       metadata=json.loads(metadata))  # fmt: skip


def manager_for(cfg):
    return task_manager(include_paths(cfg), bool(cfg.get("include_defaults", True)), _metadata_key(cfg))


def check_name(cfg) -> None:
    """Refuse, in one line, an unknown name, a group or tag, and a task that is not ``generate_until``."""
    from lm_eval.tasks._index import Kind

    name = cfg.get("name")
    if not name or not isinstance(name, str):
        raise ValueError("task.name: required with task=lm_eval (an lm-eval task, e.g. task.name=gsm8k)")
    if name.endswith(".yaml") and Path(name).is_file():
        return  # a task YAML given by path, as lm-eval accepts: checked when built
    tm = manager_for(cfg)
    entry = tm.task_index.get(name)
    if entry is None:
        hint = did_you_mean(name, tm.all_tasks, n=3)
        scope = "" if cfg.get("include_defaults", True) else " (task.include_defaults=false: include_path only)"
        raise ValueError(f"task.name: unknown lm-eval task {name!r}{scope}.{hint}")
    if entry.kind in (Kind.GROUP, Kind.TAG):
        members = _members(tm, entry)
        shown = ",".join(members[:8]) + (",..." if len(members) > 8 else "")
        raise ValueError(
            f"task.name: {name!r} is an lm-eval {entry.kind.name.lower()} of {len(members)} tasks; "
            f"sweep its tasks instead: -m task=lm_eval task.name={shown}"
        )
    if entry.kind == Kind.TASK:
        check_output_type(name, (entry.cfg or {}).get("output_type", GENERATE))


def _members(tm, entry) -> list[str]:
    from lm_eval.tasks._index import Kind

    if entry.kind == Kind.TAG:
        return sorted(n for n, e in tm.task_index.items() if entry.name in e.tags)
    listed = (entry.cfg or {}).get("task") or []
    listed = listed if isinstance(listed, list) else [listed]
    return [t if isinstance(t, str) else str(t.get("task", t.get("group", "?"))) for t in listed]


def check_output_type(name: str, output_type: str) -> None:
    if output_type != GENERATE:
        raise ValueError(
            f"task.name: lm-eval task {name!r} is a log-likelihood task (output_type={output_type}); KV compression "
            f"acts on generation, so task=lm_eval runs {GENERATE} tasks only"
        )


def _gen_overrides(cfg) -> dict[str, Any]:
    overrides = _plain(cfg.get("gen_kwargs")) or {}
    if not isinstance(overrides, dict):
        raise ValueError(f"task.gen_kwargs: must be a mapping (lm-eval's --gen_kwargs), got {overrides!r}")
    return overrides


def build(cfg):
    """The lm-eval ``Task`` for ``cfg``, configured as ``simple_evaluate`` would (num_fewshot, fewshot seed,
    gen_kwargs overrides). Cached per configuration; re-seeded by the caller before rendering contexts."""
    check_name(cfg)
    key = json.dumps(
        {k: _plain(cfg.get(k)) for k in ("name", "include_path", "include_defaults", "metadata", "num_fewshot",
                                         "gen_kwargs")},  # fmt: skip
        sort_keys=True,
        default=str,
    )
    return _build(key, cfg)


_BUILT: dict[str, Any] = {}


def _build(key: str, cfg):
    if key in _BUILT:
        return _BUILT[key]
    name = cfg.name
    loaded = _load_task(manager_for(cfg), name)
    if len(loaded) != 1:
        raise ValueError(f"task.name: {name!r} expands to {len(loaded)} lm-eval tasks; name one: {sorted(loaded)}")
    (task,) = loaded.values()
    check_output_type(name, task.OUTPUT_TYPE)
    num_fewshot = cfg.get("num_fewshot")
    if num_fewshot is not None:
        if task.get_config("num_fewshot") == 0:  # lm-eval never overrides an explicit 0
            log.info("lm-eval task %s sets num_fewshot=0 in its config; task.num_fewshot is ignored", name)
        else:
            task.set_config(key="num_fewshot", value=int(num_fewshot))
    elif task.get_config("num_fewshot") is None:
        task.set_config(key="num_fewshot", value=0)
    overrides = _gen_overrides(cfg)
    if overrides:
        task.set_config(key="generation_kwargs", value=overrides, update=True)
    generation(task)  # refuse unsupported generation kwargs now, before any model loads
    _BUILT[key] = task
    return task


def _load_task(tm, name: str) -> dict[str, Any]:
    """lm-eval's task objects for ``name`` (their datasets read with ``datasets.load_dataset``), asking the hub as the
    other tasks do (:mod:`tasks.hub`): when it is not to be asked, from the local cache alone; a dataset found
    nowhere is one ``ValueError`` naming ``task.name``, not ``huggingface_hub``'s retry loop and a traceback."""
    from tasks.hub import datasets_cache_only, offline_reason

    reason = offline_reason()
    try:
        if reason is None:
            return tm.load([name])["tasks"]
        with datasets_cache_only():
            return tm.load([name])["tasks"]
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - not cached, a broken cache, auth, a missing split: one clear line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if reason is not None:
            raise ValueError(
                f"task.name: the dataset of lm-eval task {name!r} is unreachable ({reason}) and not in the local "
                "cache; run it once where the hub answers (the datasets cache is then read offline), or give "
                "task.include_path a task YAML whose dataset is a local file"
            ) from None
        raise ValueError(f"task.name: cannot load the dataset of lm-eval task {name!r}: {first}") from None


def generation(task) -> tuple[tuple[str, ...], dict[str, Any]]:
    """``(stop strings, settings)`` of a task's ``generation_kwargs``, read as lm-eval's HF model reads them.

    ``settings`` holds the ``SamplingConfig`` fields the task fixes: ``max_new_tokens`` (only if the task sets one:
    else the run's ``gen.max_new_tokens`` applies, as HFLM's ``max_gen_toks``), ``temperature`` (0 = greedy unless
    ``do_sample`` or a positive temperature asks for sampling, as ``normalize_gen_kwargs``), ``top_p``, ``top_k``.
    """
    kwargs = dict(task.config.generation_kwargs or {})
    name = task.config.task
    unknown = sorted(set(kwargs) - set(SUPPORTED_GEN_KEYS))
    if unknown:
        raise ValueError(
            f"task.gen_kwargs: lm-eval task {name!r} sets generation kwargs {unknown} that task=lm_eval cannot honour "
            f"(supported: {', '.join(SUPPORTED_GEN_KEYS)}); run it with lm_eval --model snapstream instead"
        )
    until = kwargs.get("until") or []
    stop = tuple(s for s in ([until] if isinstance(until, str) else until) if s)
    settings: dict[str, Any] = {}
    for key in MAX_TOKEN_KEYS:
        if kwargs.get(key) is not None:
            settings["max_new_tokens"] = int(kwargs[key])
            break
    do_sample, temperature = kwargs.get("do_sample"), kwargs.get("temperature")
    if do_sample is True:
        temperature = 1.0 if temperature is None else float(temperature)
        if temperature <= 0:
            raise ValueError(f"task.gen_kwargs: lm-eval task {name!r} sets do_sample=True with temperature 0")
    elif do_sample is False or temperature is None:
        temperature = 0.0
    settings["temperature"] = float(temperature)
    if settings["temperature"] > 0:
        if kwargs.get("top_p") is not None:
            settings["top_p"] = float(kwargs["top_p"])
        if kwargs.get("top_k") is not None:
            settings["top_k"] = int(kwargs["top_k"])
    return stop, settings
