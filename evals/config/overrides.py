"""The command line of ``evals.run`` and the commands that share its overrides, read as Hydra reads it.

Every combination of a ``-m`` sweep is expanded with Hydra's own override grammar (``OverridesParser`` with the
config loader, as ``BasicSweeper.sweep`` / ``split_arguments`` do: lists, ``range()``, ``choice()``, ``glob()``,
quoted values); a bad override becomes one line (:class:`UserError`, :func:`one_line`), with the closest key or group
to a misspelt one.
"""

from __future__ import annotations

import difflib
import itertools
import re
from pathlib import Path

from hydra import compose
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from evals.config.conf_store import options as compression_options
from evals.config.strict import GROUPS as CONFIG_GROUPS
from evals.config.strict import yaml_keys

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("model", "task", "compression", "backend", "gen", "experiment", "hydra/launcher")
MAX_NESTING = 32  # brackets of one override's value: far above any real list or dict, far below Python's recursion


class UserError(Exception):
    """A mistake in what the user asked for (bad override, bad file): reported as one line."""


def options(group: str) -> list[str]:
    """The options of a config group: its YAML files (for ``compression``, every registered method too)."""
    if group == "compression":
        return compression_options()
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def one_line(exc: BaseException, overrides: list[str] | None = None) -> str:
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
        close = difflib.get_close_matches(missing[2], options(missing[1]), n=1)
        hint = f" (did you mean {missing[1]}={close[0]}?)" if close else ""
        return f"{missing[1]}={missing[2]}: unknown option{hint}; available: {', '.join(options(missing[1]))}"
    lexer = re.fullmatch(r"LexerNoViableAltException: (.*)", first)
    if lexer:
        return _unparsable(lexer[1])
    return first


def _unparsable(override: str) -> str:
    """The one line for an override Hydra's lexer cannot read: a value starting with ``~`` (the shell expands ``~``
    only at the start of a word, never after ``=``, and the grammar has no ``~`` in values) gets the ``$HOME`` form;
    anything else is told to quote its value."""
    key, _, value = override.partition("=")
    if value.startswith("~"):
        return (f"{override}: Hydra cannot read a value starting with ~ and the shell does not expand ~ after =; "
                f"write {key}=$HOME{value[1:]}")
    return f"{override}: Hydra cannot read this value; quote it: '{key}=\"{value}\"'"


def _key_hint(key: str, overrides: list[str]) -> str:
    """`` (did you mean X?)`` for a misspelt key: among the root keys and groups, or the keys of the node the key
    was meant for (composed without the override); ``""`` when nothing is close."""
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
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    given = [a for a in args if not a.startswith("-")]
    for arg in given:
        check_nesting(arg)
    try:
        overrides = parser.parse_overrides(given)
    except RecursionError:
        raise UserError(f"overrides: nested too deeply to parse (at most {MAX_NESTING} levels)") from None
    except Exception as exc:  # OverrideParseException
        raise UserError(one_line(exc)) from None
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
                raise UserError(f"{key}: cannot expand the sweep {value!r}: {one_line(exc)} (write a list of "
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


def sweeper_params(args: list[str]) -> list[str]:
    """``hydra.sweeper.params`` of the composed primary config (experiments put their grid there), as overrides."""
    try:
        plain = [o.input_line for o in OverridesParser.create().parse_overrides(args) if not o.is_sweep_override()]
        cfg = compose(config_name="config", overrides=plain, return_hydra_config=True)
    except Exception as exc:
        raise UserError(one_line(exc)) from None
    params = cfg.hydra.sweeper.get("params") or {}
    return [f"{k}={v}" for k, v in params.items()]
