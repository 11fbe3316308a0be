"""``check(cfg)``: the only reader of the composed Hydra config. It validates every field that needs no data and no
weights (one ``ValueError`` naming the field) and returns the frozen :class:`RunSpec` that planning, execution and
recording read.

Cheap enough to run for every combination of a sweep before its first job starts (:mod:`evals.cli`, with
``offline``: the model hub is not asked, each job asks once before it loads anything). Imports no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from omegaconf import DictConfig, OmegaConf

from evals.config import strict
from evals.config.defaults import DEFAULT_MEMORY_GIB
from evals.config.gen import GenSettings, gen_settings
from evals.config.models import check_model_config
from evals.config.registry import backend_traits
from evals.config.shape import rope_of, shape_from_model
from snapstream_core.api import compression_from_config
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.sampling import SamplingConfig
from tasks import get_task
from tasks.protocol import hook


@dataclass(frozen=True)
class BackendSpec:
    """``backend.*``: which backend, what a config check knows of it, and a replaying backend's input."""

    name: str
    loads_weights: bool
    replays: bool
    path: str | None = None
    partial: bool = False
    engine: bool = True  # runs our decode engine (evals.config.registry.Traits.engine)
    settings: Any = None  # the backend's own checked keys (Traits.settings: backend=vllm's VLLMSettings)


@dataclass(frozen=True)
class RunSpec:
    """One checked run: everything planning, execution and recording read, the method built once.

    ``model`` and ``task`` are the config's nodes as the task hooks and the backend take them; ``resolved`` is the
    whole config resolved to plain data (the run's identity is drawn from it); ``config`` is the composed config as
    given, kept only to be written to the run's record (``.hydra/``, ``resolved_config.yaml``, ``meta.json``)."""

    config: DictConfig
    resolved: dict[str, Any]
    model: DictConfig
    task: DictConfig
    task_module: ModuleType
    method: CompressionMethod
    compression_tag: str
    gen: GenSettings
    backend: BackendSpec
    out_root: str
    run_dir: str
    overwrite: bool
    sample_cache: bool
    log_every: int
    memory_gib: float

    @property
    def sampling(self) -> SamplingConfig:
        return self.gen.sampling


def resolve(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain data, every interpolation resolved; a missing value or a broken interpolation raises
    ``ValueError`` naming the key."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except Exception as exc:  # omegaconf's MissingMandatoryValue / InterpolationResolutionError
        key = getattr(exc, "full_key", None)
        first = str(exc).splitlines()[0]
        raise ValueError(f"{key}: {first}" if key else f"config: {first}") from None


def check(cfg: DictConfig, *, offline: bool = False) -> RunSpec:
    """Validate the whole config (raises ``ValueError`` naming the field) without reading data or loading a model;
    returns the run's :class:`RunSpec`."""
    container = resolve(cfg)
    strict.check(container)  # booleans, integers and appended keys, by type
    task = get_task(cfg.task.get("module") or cfg.task.name)  # `module`: a task module serving many names (lm_eval)
    _check_task_source(container["task"])
    validate = hook(task, "validate")
    if validate is not None:
        validate(cfg.task)
    method = compression_from_config(container["compression"])
    gen = gen_settings(container["gen"])
    if gen.batch_size > 1 and method.knobs().get("ratio") is not None:
        raise ValueError(
            f"gen.batch_size: compression.ratio keeps a share of each prompt, which needs gen.batch_size=1 "
            f"(a left-padded batch shares one budget), got {gen.batch_size}"
        )
    traits = backend_traits(cfg.backend.name)
    settings = None
    if traits.settings is not None:
        settings = traits.settings(container["backend"], container["model"], method.method, container["gen"])
    if traits.loads_weights:
        check_model_config(cfg.model, reach=not offline)
        _check_family(container)
        if method.needs_shape:  # e.g. a calibration file made for this model (triattention)
            method.check_shape({**asdict(shape_from_model(container["model"])), **rope_of(container["model"])})
    if traits.replays and not Path(cfg.backend.path).is_file():
        raise ValueError(f"backend.path: no such file: {cfg.backend.path}")
    backend = container["backend"]
    return RunSpec(
        config=cfg,
        resolved=container,
        model=cfg.model,
        task=cfg.task,
        task_module=task,
        method=method,
        compression_tag=str(container["compression"].get("tag", method.method)),
        gen=gen,
        backend=BackendSpec(name=str(backend["name"]), loads_weights=traits.loads_weights, replays=traits.replays,
                            path=backend.get("path"), partial=bool(backend.get("partial", False)),
                            engine=traits.engine, settings=settings),
        out_root=str(container.get("out_root", "")),
        run_dir=str(container.get("run_dir", "")),
        overwrite=bool(container.get("overwrite", False)),
        sample_cache=bool(container.get("sample_cache", True)),
        log_every=int(container.get("log_every") or 0),
        memory_gib=float((container.get("plan") or {}).get("memory_gib", DEFAULT_MEMORY_GIB)),
    )


def _check_task_source(task: dict[str, Any]) -> None:
    """A given ``task.path`` is read with ``task.source=auto`` (the default) or ``path``: any other source would
    silently ignore it."""
    if task.get("path") not in (None, "") and "source" in task and task["source"] not in ("path", "auto"):
        raise ValueError(
            f"task.path: given ({task['path']}) but task.source={task['source']} would ignore it; "
            "pass task.source=path to read it, or drop task.path"
        )


def _check_family(container: dict[str, Any]) -> None:
    """A task with per-family prompt templates must have one for ``model.family``."""
    templates = container["task"].get("templates")
    family = container["model"].get("family")
    if isinstance(templates, dict) and family not in templates:
        raise ValueError(
            f"model.family: {family!r} has no prompt template in task {container['task']['name']} "
            f"(task.templates has: {', '.join(templates)})"
        )
