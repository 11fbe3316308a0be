"""The Hydra group ``compression`` from the method dataclasses: every method in ``snapstream_core.methods.METHODS``
is a ``compression=<name>`` option, with its knobs, defaults and run tag generated from its fields.

``conf/compression/<name>.yaml`` is optional (documentation of a method's knobs; ``tests/test_conf_defaults.py``
checks it equals what is generated here). Each file pulls in :data:`KNOBS_NODE` (every knob of every method, null),
so one sweep can set a knob for every method that reads it (a non-null key a method lacks was set by the user and
is refused, ``snapstream_core.api.compression_from_config``; the full cache accepts any) and a new method's knob
needs no edit in the files of the others.
Methods without a file are stored in Hydra's ``ConfigStore`` (as the structured configs of
``hydra/core/config_store.py`` and lightning-hydra-template's ``configs/``): call :func:`register_methods` before
composing (``evals/run.py``, ``evals/cli.py``). Nothing happens at import.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from evals.record.rows import check_knob_names
from snapstream_core.methods import METHODS, knob_names
from snapstream_core.methods.base import tag_prefix

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUP = "compression"
KNOBS_NODE = "compression_knobs"  # a root config that conf/compression/*.yaml lists first in their defaults
PROVIDER = "snapstream_core.methods"  # marks the nodes stored here (so that stale ones can be dropped)


CAP_MARK = "cache"  # the run-tag segment of a method whose budget caps the whole cache (budget_cap "cache")
KV_RESOLVER = "kv_tag"  # the OmegaConf resolver of the storage's part of a run tag (registered by register_methods)
KV_TAG = f"${{{KV_RESOLVER}:${{.kv_dtype}},${{.kv_scale}}}}"  # every tag ends with it: empty in the model's dtype


def kv_suffix(kv_dtype: str | None, kv_scale: str | None) -> str:
    """The storage's part of a run tag: empty in the model's dtype (``auto`` or unset: the names of existing run
    directories unchanged), else ``-kv<kv_dtype>-ks<kv_scale>`` with the scale the method resolves (``tensor`` when
    unset), so that a run in FP8 never has the directory, tag or label of the same run in the model's dtype. A bad
    value is shown as given (the method's check refuses it, one line)."""
    if kv_dtype is None or str(kv_dtype) == "auto":
        return ""
    scale = "tensor" if kv_scale is None and str(kv_dtype) == "fp8_e4m3" else kv_scale
    return f"-kv{kv_dtype}" + (f"-ks{scale}" if scale is not None else "")


def run_tag(cls) -> str:
    """The run tag of a method class, an interpolation over its knobs: ``<method>``, then :data:`CAP_MARK` when its
    budget caps the whole cache (``CompressionMethod.budget_cap``), then ``<prefix>${.<knob>}`` for each knob of
    :meth:`CompressionMethod.tag_fields`, joined by ``-`` (``keep_first-fk${.first_k}``,
    ``rkv-cache-b${.budget}-...``), then :data:`KV_TAG` (the storage, :func:`kv_suffix`: nothing in the model's
    dtype, ``-kvfp8_e4m3-ksone`` in FP8). Prompt-capped methods keep the names their directories always had."""
    cap = [CAP_MARK] if cls.budget_cap == "cache" else []
    return "-".join([cls.method, *cap, *(f"{tag_prefix(f)}${{.{f.name}}}" for f in cls.tag_fields())]) + KV_TAG


def own_defaults(cls) -> dict[str, Any]:
    """The knobs the method has (``knobs()`` of its default instance) and their dataclass defaults."""
    applies = set(cls().knobs())
    return {f.name: f.default for f in fields(cls) if f.name in applies}


def knobs_node() -> dict[str, Any]:
    """Every knob of every registered method, null: the keys every ``compression`` option carries."""
    return {"method": "???", **dict.fromkeys(knob_names()), "tag": "???"}


def method_node(cls) -> dict[str, Any]:
    """The ``compression=<name>`` node of a method: ``method``, every knob (its own at their defaults, the others
    null) and ``tag`` (:func:`run_tag`)."""
    return {**knobs_node(), "method": cls.method, **own_defaults(cls), "tag": run_tag(cls)}


def has_yaml(name: str) -> bool:
    return (CONF / GROUP / f"{name}.yaml").is_file()


def options() -> list[str]:
    """Every ``compression=`` option: the registered methods and any YAML file (a file without a method is
    refused when built, by ``compression_from_config``)."""
    return sorted({*METHODS, *(p.stem for p in (CONF / GROUP).glob("*.yaml"))})


def register_methods() -> list[str]:
    """Store :data:`KNOBS_NODE` and a node for every method of ``METHODS`` without a YAML file in Hydra's
    ``ConfigStore`` (again on each call: the registry may have grown; nodes of methods no longer registered are
    dropped), and the :data:`KV_RESOLVER` resolver the tags end with (once). Returns the names stored as nodes;
    raises ``ValueError`` (one line) for a knob named like a row column (:func:`evals.record.rows.check_knob_names`)."""
    check_knob_names()  # a knob named like a row column is refused here, with one line
    if not OmegaConf.has_resolver(KV_RESOLVER):  # the tags' storage part (Hydra hands it to launcher processes)
        OmegaConf.register_new_resolver(KV_RESOLVER, kv_suffix)
    store = ConfigStore.instance()
    store.store(name=KNOBS_NODE, node=knobs_node(), provider=PROVIDER)
    group = store.repo.get(GROUP, {})
    for key in [k for k, node in group.items() if node.provider == PROVIDER]:
        if key.removesuffix(".yaml") not in METHODS or has_yaml(key.removesuffix(".yaml")):
            del group[key]
    stored = [name for name in METHODS if not has_yaml(name)]
    for name in stored:
        store.store(group=GROUP, name=name, node=method_node(METHODS[name]), provider=PROVIDER)
    return stored
