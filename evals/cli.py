"""Checks of the command line before Hydra runs anything: one clear line and exit code 2 for a bad override.

Every combination of a ``-m`` sweep is expanded with Hydra's own override grammar (``OverridesParser`` with the
config loader, as ``BasicSweeper.sweep`` / ``split_arguments`` do: lists, ``range()``, ``choice()``, ``glob()``,
quoted values), composed and checked (:func:`evals.runner.check`: no data read, no weights loaded, no network, no
torch). Bad ones are listed, one line each, and nothing runs.
"""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("model", "task", "compression", "backend", "gen", "experiment", "hydra/launcher")
MAX_LISTED = 20  # bad combinations printed (then a count)
MAX_NESTING = 32  # brackets of one override's value: far above any real list or dict, far below Python's recursion
_PLANNED: list[int] = []  # jobs of the command line checked by precheck (read by evals.progress)
_CHECKED: list = []  # the configs of the last command line that passed every check (for the work estimate)


def checked_configs() -> list:
    """The configs of the jobs the last :func:`precheck` of this process accepted, in launch order."""
    return list(_CHECKED)


def planned_jobs() -> int | None:
    """How many jobs the last :func:`precheck` of this process checked (None before any)."""
    return _PLANNED[-1] if _PLANNED else None


class UserError(Exception):
    """A mistake in what the user asked for (bad override, bad file): reported as one line."""


def options(group: str) -> list[str]:
    """The options of a config group: its YAML files (for ``compression``, every registered method too)."""
    if group == "compression":
        from evals.config.conf_store import options as compression_options

        return compression_options()
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _one_line(exc: BaseException, overrides: list[str] | None = None) -> str:
    """The first line of a Hydra error, rewritten where it can say more: the closest key or group to a misspelt
    one (``overrides``: the job's command line, to list the keys of the node the key was meant for), the ``+`` that
    appends a group not in the defaults list."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    unknown = re.fullmatch(r"Could not override '(.+)'\.", first)
    if unknown:
        return (f"{unknown[1]}: no such key{_key_hint(unknown[1], overrides or [])} "
                "(`python -m evals.run --cfg job` prints every key and its value)")
    appended = re.match(r"Could not override '([^']+)'\. No match in the defaults list", first)
    if appended and appended[1] in GROUPS:
        given = next((o for o in overrides or [] if o.split("=", 1)[0] == appended[1]), f"{appended[1]}=NAME")
        return (f"{given}: {appended[1]} is not in the defaults list; add it with a plus: +{given} "
                f"(options: {', '.join(options(appended[1]))})")
    missing = re.match(r"In '[^']*': Could not find '([^/']+)/([^']+)'", first)
    if missing and missing[1] in GROUPS:
        return f"{missing[1]}={missing[2]}: unknown option; available: {', '.join(options(missing[1]))}"
    return first


def _key_hint(key: str, overrides: list[str]) -> str:
    """`` (did you mean X?)`` for a misspelt key: among the root keys and groups, or the keys of the node the key
    was meant for (composed without the override); ``""`` when nothing is close."""
    import difflib

    from evals.config.strict import GROUPS as CONFIG_GROUPS
    from evals.config.strict import yaml_keys

    parent, _, leaf = key.rpartition(".")
    if not parent:
        close = difflib.get_close_matches(key, sorted(set(CONFIG_GROUPS) | {"experiment"}), n=1)
        if close:
            value = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key and "=" in o), "NAME")
            return f" (did you mean {close[0]}={value}?)"
        known: set[str] = set(yaml_keys("config"))
    else:
        known = set()
        try:
            from hydra import compose
            from omegaconf import OmegaConf

            rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
            node = OmegaConf.select(compose(config_name="config", overrides=rest), parent)
            known = {str(k) for k in node.keys()} if node is not None and hasattr(node, "keys") else set()
        except Exception:  # noqa: BLE001 - no hint rather than a second error
            pass
    close = difflib.get_close_matches(leaf, sorted(known), n=1)
    return f" (did you mean {f'{parent}.' if parent else ''}{close[0]}?)" if close else ""


def expand(args: list[str], multirun: bool) -> list[list[str]]:
    """Every combination of the overrides (one list of ``key=value`` strings each), as Hydra's sweeper expands it.

    Must be called inside an initialised Hydra (for ``glob()`` over a group's options)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    given = [a for a in args if not a.startswith("-")]
    for arg in given:
        check_nesting(arg)
    try:
        overrides = parser.parse_overrides(given)
    except RecursionError:
        raise UserError(f"overrides: nested too deeply to parse (at most {MAX_NESTING} levels)") from None
    except Exception as exc:  # OverrideParseException
        raise UserError(_one_line(exc)) from None
    lists: dict[str, list[str]] = {}  # keyed as BasicSweeper.split_arguments: a later value of a key replaces it
    for ov in overrides:
        key = ov.get_key_element()
        if ov.is_sweep_override():
            if not multirun:
                raise UserError(f"{key}: a sweep value needs -m (multirun)")
            if not ov.is_discrete_sweep():
                raise UserError(f"{key}: interval sweeps need an optimising sweeper; use a list, range() or glob()")
            try:
                lists[key] = [f"{key}={v}" for v in ov.sweep_string_iterator()]
            except Exception as exc:  # omegaconf's ValidationError: a range() inside a list, say
                value = ov.input_line.split("=", 1)[-1]
                raise UserError(f"{key}: cannot expand the sweep {value!r}: {_one_line(exc)} (write a list of "
                                "values, or range() on its own)") from None
        else:
            lists[key] = [f"{key}={ov.get_value_element_as_str()}"]
    return [list(c) for c in itertools.product(*lists.values())]


def check_nesting(arg: str) -> None:
    """Refuse an override whose value nests brackets (``[``, ``{``, ``(`` outside quotes) deeper than
    :data:`MAX_NESTING` (one line naming the key), before Hydra's parser or OmegaConf recurse into it."""
    depth = deepest = 0
    quote = None
    for ch in arg:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]})":
            depth -= 1
    if deepest > MAX_NESTING:
        key = arg.split("=", 1)[0].lstrip("+~")
        raise UserError(f"{key}: value nested {deepest} levels deep; at most {MAX_NESTING}")


def check_combination(overrides: list[str]):
    """Compose one job's config and run every check that needs no data and no weights; returns the config."""
    from hydra import compose
    from omegaconf import open_dict

    from evals.rundir import check_writable
    from evals.runner import check

    try:
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except Exception as exc:  # hydra's ConfigCompositionException / MissingConfigException
        raise UserError(_one_line(exc, overrides)) from None
    if cfg.hydra.job.get("chdir"):
        raise UserError("hydra.job.chdir: true is not supported: the run reads and writes relative paths (task.path, "
                        "backend.path, out_root, run_dir) from the folder it is started in; drop the override")
    try:
        out_dir = str(cfg.hydra.run.dir)  # where Hydra itself will write first (its log, the run's folder)
    except Exception:  # an interpolation that resolves only inside a running job
        out_dir = None
    with open_dict(cfg):
        del cfg["hydra"]  # its runtime interpolations resolve only inside a running job
    try:
        check(cfg, offline=True)  # no network, no data: the job checks the hub once before it loads anything
        # out_root first: the default hydra.run.dir lies under it, and the user named out_root, not hydra.run.dir
        for field, path in (("out_root", cfg.get("out_root")), ("hydra.run.dir", out_dir)):
            if path:
                check_writable(Path(path), field)
    except ValueError as exc:
        raise UserError(_one_line(exc)) from None
    return cfg


def _sweeper_params(args: list[str]) -> list[str]:
    """``hydra.sweeper.params`` of the composed primary config (experiments put their grid there), as overrides."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        plain = [o.input_line for o in OverridesParser.create().parse_overrides(args) if not o.is_sweep_override()]
        cfg = compose(config_name="config", overrides=plain, return_hydra_config=True)
    except Exception as exc:
        raise UserError(_one_line(exc)) from None
    params = cfg.hydra.sweeper.get("params") or {}
    return [f"{k}={v}" for k, v in params.items()]


def validate(args: list[str]) -> list[str]:
    """One line per bad combination of the command line (empty: everything can run)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from evals.config.conf_store import register_methods

    multirun = any(a in ("-m", "--multirun") for a in args)
    register_methods()  # compression=<method> for every registered method, YAML file or not
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            given = [a for a in args if not a.startswith("-")]
            params = _sweeper_params(given) if multirun else []
            combos = expand(params + given, multirun)  # later overrides win, as in BasicSweeper
            _PLANNED.append(len(combos))
            bad, checked = [], []
            for combo in combos:
                try:
                    checked.append(check_combination(combo))
                except UserError as exc:
                    swept = [o for o in combo if o not in given] if len(combos) > 1 else []
                    bad.append(f"{' '.join(swept)}: {exc}" if swept else str(exc))
            _CHECKED[:] = [] if bad else checked
            return list(dict.fromkeys(bad))
    finally:
        GlobalHydra.instance().clear()


def precheck(args: list[str]) -> None:
    """Exit with one line on stderr per bad combination if any job of the command line cannot run."""
    if any(a in ("--help", "-h", "--hydra-help", "--info") or a.startswith("--cfg") for a in args):
        return
    try:
        bad = validate(args)
    except UserError as exc:
        bad = [str(exc)]
    if bad:
        for line in bad[:MAX_LISTED]:
            print(f"error: {line}", file=sys.stderr)
        if len(bad) > MAX_LISTED:
            print(f"error: ... and {len(bad) - MAX_LISTED} more bad combinations", file=sys.stderr)
        sys.exit(2)
    from evals.plan.workload import estimate

    line = estimate(_CHECKED)
    if line:
        print(line, file=sys.stderr)
