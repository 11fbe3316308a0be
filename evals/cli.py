"""Checks of the command line before Hydra runs anything: one clear line and exit code 2 for a bad override."""

from __future__ import annotations

import re
import sys
from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("model", "task", "compression", "backend", "gen", "experiment", "hydra/launcher")


class UserError(Exception):
    """A mistake in what the user asked for (bad override, bad file): reported as one line."""


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _check_group_options(args: list[str]) -> None:
    for arg in args:
        if "=" not in arg or arg.startswith("-"):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key not in GROUPS or key.startswith("hydra/"):
            continue  # hydra/* options also come from plugins: the compose check below covers them
        values = [v.strip() for v in value.split(",")] if not value.startswith(("glob(", "range(")) else []
        known = options(key)
        for v in values:
            if v and v not in known:
                raise UserError(f"{key}={v}: unknown option; available: {', '.join(known)}")


def _compose_first(args: list[str]) -> None:
    """Compose the config with the first value of every sweep list, so bad keys fail here, in one line."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = []
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if "," in value and not value.startswith(("[", "{", "'", '"')):
            value = value.split(",")[0]
        overrides.append(f"{key}={value}")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except Exception as exc:  # hydra's ConfigCompositionException / OverrideParseException
        first = str(exc).strip().splitlines()[0]
        unknown = re.fullmatch(r"Could not override '(.+)'\.", first)
        if unknown:
            first = f"{unknown[1]}: no such key (`python -m evals.run --cfg job` prints every key and its value)"
        raise UserError(first) from None
    finally:
        GlobalHydra.instance().clear()


def precheck(args: list[str]) -> None:
    """Exit with one line on stderr if the overrides cannot compose."""
    if any(a in ("--help", "-h", "--hydra-help", "--info") or a.startswith("--cfg") for a in args):
        return
    try:
        _check_group_options(args)
        _compose_first(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
