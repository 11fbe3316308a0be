"""The data knobs every task shares, read once: ``task.source`` (``auto`` | ``hub`` | ``path`` | ``bundled``),
``task.path`` and ``task.limit``.

A task's ``load`` asks :func:`local_file` where to read (``None``: the hub, read the task's own way), then cuts its
items, in their stable order, with :func:`apply_limit`. Both raise ``ValueError("task.<field>: ...")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.base import bundled_path

SOURCES = ("hub", "path", "bundled")
SUFFIXES = (".jsonl", ".json", ".parquet")


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg.key`` for a DictConfig, a dict, an object or None; an absent or null key gives ``default``."""
    if cfg is None:
        return default
    value = cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    return default if value is None else value


def source_of(cfg: Any, default: str = "hub", sources: tuple[str, ...] = SOURCES) -> str:
    """``task.source``, checked against ``sources``. ``auto`` (the task configs' default) is ``path`` when a
    ``task.path`` is given, else ``task.default_source`` (the model's: ``hub`` or ``bundled``), so a path given alone
    is never ignored; an explicit other source beside a path is refused by the runner."""
    source = cfg_get(cfg, "source", default)
    if source == "auto":
        source = "path" if cfg_get(cfg, "path") else cfg_get(cfg, "default_source", default)
    if source not in sources:
        raise ValueError(f"task.source: expected one of {', '.join(sources)}, got {source!r}")
    return source


def local_file(cfg: Any, bundled: str, default: str = "hub", suffixes: tuple[str, ...] = SUFFIXES) -> Path | None:
    """The file to read: the bundled sample ``tasks/data/<bundled>`` for ``source=bundled``, ``task.path`` (which
    must exist and end in one of ``suffixes``) for ``source=path``; ``None`` for ``source=hub``."""
    source = source_of(cfg, default)
    if source == "bundled":
        return bundled_path(bundled)
    if source == "hub":
        return None
    path = cfg_get(cfg, "path")
    kinds = f"{', '.join(suffixes[:-1])} or {suffixes[-1]}" if len(suffixes) > 1 else suffixes[0]
    if not path:
        raise ValueError(f"task.path: required when task.source=path (a {kinds} file)")
    if Path(str(path)).suffix.lower() not in suffixes:
        raise ValueError(f"task.path: expected a {kinds} file, got {path!r}")
    if not Path(str(path)).is_file():
        raise ValueError(f"task.path: no such file: {path}")
    return Path(str(path))


def check_limit(cfg: Any) -> int | None:
    """``task.limit``: a positive integer (the first N items in the source's stable order) or None (all)."""
    limit = cfg_get(cfg, "limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"task.limit: must be a positive integer or null, got {limit!r}")
    return limit


def apply_limit(items: list, cfg: Any) -> list:
    """The first ``task.limit`` items (all of them when it is null)."""
    limit = check_limit(cfg)
    return items if limit is None else items[:limit]


def protocol_of(cfg: Any, protocols: tuple[str, ...]) -> str:
    """``task.protocol``, one of ``protocols`` (the first, the official scorer's, when unset), as rows and
    ``meta.json`` record it."""
    value = cfg_get(cfg, "protocol", protocols[0])
    if value not in protocols:
        raise ValueError(f"task.protocol: must be one of {', '.join(protocols)}, got {value!r}")
    return str(value)
