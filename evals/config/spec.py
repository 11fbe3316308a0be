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
from evals.config.gpus import check_slots, parse_gpus, visible_devices
from evals.config.kv_storage import check_backend
from evals.config.models import check_model_config
from evals.config.planner_knobs import check_planner_knobs
from evals.config.registry import backend_traits
from evals.config.shape import positions_of, rope_of, shape_from_model
from evals.config.shard import Shard, parse_shard
from snapstream_core.api import compression_from_config
from snapstream_core.methods import METHODS
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
    gpus: tuple[int, ...] | None = None  # GPU slots a job claims one of (evals.config.gpus); None: no pinning
    shard: Shard | None = None  # shard=K/N: this process runs part K of the job's items (None: all of them)

    @property
    def sampling(self) -> SamplingConfig:
        return self.gen.sampling


def _defer_run_files(compression: dict[str, Any], notes: list[str]) -> list[str]:
    """The method's ``run_files`` knobs whose file is not there (unset, or no such file), each noted in ``notes``."""
    cls = METHODS.get(str(compression.get("method")))
    deferred = []
    for knob in getattr(cls, "run_files", ()):
        path = compression.get(knob)
        if path is not None and Path(str(path)).is_file():
            continue
        deferred.append(knob)
        what = "not set" if path is None else f"no such file yet: {path}"
        notes.append(f"compression.{knob}: {what}; planned without it, evals.run refuses the job until it is there"
                     f"{'; ' + cls.run_files_doc if cls.run_files_doc else ''}")
    return deferred


def resolve(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain data, every interpolation resolved; a missing value or a broken interpolation raises
    ``ValueError`` naming the key."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except Exception as exc:  # omegaconf's MissingMandatoryValue / InterpolationResolutionError
        key = getattr(exc, "full_key", None)
        first = str(exc).splitlines()[0]
        raise ValueError(f"{key}: {first}" if key else f"config: {first}") from None


def check(cfg: DictConfig, *, offline: bool = False, planning: bool = False,
          notes: list[str] | None = None) -> RunSpec:
    """Validate the whole config (raises ``ValueError`` naming the field) without reading data or loading a model;
    returns the run's :class:`RunSpec`. ``planning``: the caller is the planner (``python -m evals.plan``), which
    reads ``plan.gpus`` and ``plan.shards``; a run refuses them (one device per process: ``shard=K/N``). With
    ``notes`` (a plan, which needs no run-time data), a file the method reads at run time (``run_files``:
    TriAttention's calibration) that is not there yet is appended to ``notes`` as one line and the method is checked
    without it, instead of refused; ``evals.run`` passes none and refuses it."""
    container = resolve(cfg)
    strict.check(container)  # booleans, integers and appended keys, by type
    check_planner_knobs(container.get("plan") or {}, planning=planning)
    shard = parse_shard(container.get("shard"))
    if shard is not None and container.get("overwrite"):
        raise ValueError(f"shard: overwrite=true clears the run directory the other shards write into; run the "
                         f"plain command with overwrite=true first, then the shards (got shard={shard.label})")
    task = get_task(cfg.task.get("module") or cfg.task.name)  # `module`: a task module serving many names (lm_eval)
    _check_task_source(container["task"])
    validate = hook(task, "validate")
    if validate is not None:
        validate(cfg.task)
    compression = container["compression"]
    deferred = _defer_run_files(compression, notes) if notes is not None else []
    method = compression_from_config({k: None if k in deferred else v for k, v in compression.items()})
    gen = gen_settings(container["gen"])
    if gen.batch_size > 1 and method.knobs().get("ratio") is not None:
        raise ValueError(
            f"gen.batch_size: compression.ratio keeps a share of each prompt, which needs gen.batch_size=1 "
            f"(a left-padded batch shares one budget), got {gen.batch_size}"
        )
    stated = positions_of(container["model"])
    if stated is not None:  # a budget, ring or window past the model's positions: refused before weights load
        method.check_context(stated[0], f"{container['model'].get('name')} ({stated[1]})")
    traits = backend_traits(cfg.backend.name)
    settings = None
    if traits.settings is not None:
        settings = traits.settings(container["backend"], container["model"], method.method, container["gen"])
    check_backend(method, str(cfg.backend.name), traits.engine, traits.loads_weights)  # a quantized KV storage
    if traits.loads_weights:
        check_model_config(cfg.model, reach=not offline)
        _check_family(container)
        if method.needs_shape and not deferred:  # e.g. a calibration file made for this model (triattention)
            method.check_shape({**asdict(shape_from_model(container["model"])), **rope_of(container["model"])})
    gpus = parse_gpus(container.get("gpus"))
    if gpus is not None:
        if not traits.loads_weights:
            raise ValueError(f"gpus: backend={cfg.backend.name} generates nothing on a GPU; drop gpus")
        check_slots(gpus, visible_devices(), str(container["model"].get("device", "auto")))
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
        gpus=gpus,
        shard=shard,
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
