"""One reader for every numeric option: the text of a command-line value and the number it must be.

``read_value`` parses ``key=value`` text with Hydra's override grammar, the grammar ``python -m evals.run`` reads its
command line with (``5e-1``, ``1e3``, ``[256,512]``, ``null``), so ``python -m evals.search``'s own ``search.*`` knobs
read numbers exactly as ``evals.run``'s do. ``number`` then takes a parsed value (an int, a float, or numeric text as
a YAML file may hold it) and returns the int or float it must be, or raises one ``ValueError`` naming the option:
booleans, NaN, infinities, a fractional value for an integer option and values outside the given bounds are refused.
"""

from __future__ import annotations

import math
from typing import Any


def read_value(key: str, text: str) -> Any:
    """The Python value of ``text`` as Hydra's override grammar reads it; ``ValueError`` naming ``key``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        return OverridesParser.create().parse_override(f"{key}={text}").value()
    except (OverrideParseException, ValueError):
        raise ValueError(f"{key}: cannot read {text!r}") from None


def number(value: Any, key: str, kind: type = float, low: float | None = None, high: float | None = None,
           above: bool = False) -> int | float:
    """``value`` as ``kind`` (int or float): finite, ``>= low`` (``> low`` with ``above``) and ``<= high`` where
    given; numeric text (``"5e-1"``) is read as a number. ``ValueError``: ``<key>: must be <what>, got <value>``."""
    what = "an integer" if kind is int else "a number"
    if low is not None:
        what += f" {'>' if above else '>='} {low:g}"
    if high is not None:
        what += f" and <= {high:g}"
    bad = ValueError(f"{key}: must be {what}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise bad
    if isinstance(value, str):
        try:
            value = int(value.strip()) if kind is int else float(value)
        except ValueError:
            raise bad from None
    if isinstance(value, float) and (kind is int or not math.isfinite(value)):
        raise bad  # an integer option takes an integer, as evals.run's config checks do (evals/config/strict.py)
    out = int(value) if kind is int else float(value)
    if low is not None and (out <= low if above else out < low):
        raise bad
    if high is not None and out > high:
        raise bad
    return out
