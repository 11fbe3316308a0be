"""Every job of an ``evals.run`` command line, composed as Hydra composes it, without running anything.

The sweep is expanded by :mod:`evals.config.overrides` (``expand``, the experiment's ``hydra.sweeper.params``);
each distinct set of config-group choices (``model=…``, ``+experiment=…``) is composed once with Hydra's
``compose`` and the plain ``key=value`` overrides of each job are then set on a copy, as Hydra applies them after
the defaults list. No data is read, no weights load, the network is never reached.
"""

from __future__ import annotations

from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from evals.config.conf_store import register_methods
from evals.config.overrides import CONF, UserError, expand, one_line, sweeper_params


def _is_value_override(ov, groups: set[str]) -> bool:
    """A plain ``key=value`` (not a group choice, an addition ``+``, a deletion ``~`` or a package ``@``)."""
    key = ov.key_or_group
    return not (ov.is_add() or ov.is_delete() or ov.is_force_add() or ov.package or key in groups or "/" in key)


def compose_jobs(args: list[str]) -> list[tuple[list[str], dict[str, Any]]]:
    """``(overrides, resolved container)`` of every job of the command line ``args`` (``-m`` expands sweeps).

    Raises :class:`evals.config.overrides.UserError` (one line) for a bad override."""

    multirun = any(a in ("-m", "--multirun") for a in args)
    register_methods()
    groups = {p.name for p in CONF.iterdir() if p.is_dir()} | {"compression"}
    GlobalHydra.instance().clear()
    out = []
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            given = [a for a in args if not a.startswith("-")]
            params = sweeper_params(given) if multirun else []
            parser = OverridesParser.create()
            bases: dict[tuple[str, ...], Any] = {}
            for combo in expand(params + given, multirun):
                parsed = parser.parse_overrides(combo)
                values = [ov for ov in parsed if _is_value_override(ov, groups)]
                structural = tuple(ov.input_line for ov in parsed if ov not in values)
                if structural not in bases:
                    try:
                        base = compose(config_name="config", overrides=list(structural))
                    except Exception as exc:  # hydra's composition / missing-config errors
                        raise UserError(one_line(exc)) from None
                    bases[structural] = base
                cfg = OmegaConf.create(OmegaConf.to_container(bases[structural]))
                OmegaConf.set_struct(cfg, True)
                for ov in values:
                    try:
                        OmegaConf.update(cfg, ov.key_or_group, ov.value(), merge=True)
                    except Exception:  # omegaconf's ConfigKeyError / ConfigAttributeError in struct mode
                        raise UserError(f"{ov.key_or_group}: no such key (`python -m evals.run --cfg job` prints "
                                        "every key and its value)") from None
                with open_dict(cfg):
                    cfg.pop("hydra", None)
                try:
                    container = OmegaConf.to_container(cfg, resolve=True)
                except Exception as exc:  # an interpolation that cannot resolve
                    raise UserError(one_line(exc)) from None
                out.append((combo, container))
    finally:
        GlobalHydra.instance().clear()
    return out
