"""Functional results in the trusted parent: rebuild a return value from the driver's wire form and compare it with
the expected output as lcb_runner's ``grade_call_based`` does (``prediction == json.loads(output)``).

The wire form (``driver.to_wire``) carries standard-library and numpy values as typed data: ``int`` (hex past 8192
bits), ``tuple``, ``set``, ``frozenset``, ``dict`` with non-string keys, ``Fraction`` (two ints), ``Decimal`` (its
string), ``complex`` (two floats), numpy arrays and scalars (dtype, shape, raw bytes; an object array element by
element). They are rebuilt here as
values of those same types, by constructors that run no program code, so Python's ``==`` gives lcb_runner's answer:
``Fraction(3, 2) == 1.5``, ``np.array([3]) == [3]`` pass; a nested tuple never equals a list; a two-element array
raises on ``not`` (ambiguous truth value), a runtime error there and here.

An instance of a builtin type's subclass that defines no ``__eq__`` of its own (``class Big(int): pass``, an
``IntEnum`` member, a ``list`` subclass that only adds methods) travels as its builtin value, copied by the builtin's
own method (``driver.builtin_value``): lcb_runner's ``==`` runs the builtin's comparison on it, and so does the
parent. A value of the program's own class, or of a subclass that defines ``__eq__`` (or of any other type), arrives
as ``opaque`` and equals nothing: lcb_runner calls the program's ``__eq__`` (an always-equal object passes there);
here it is a wrong answer, by design.

Bounded: the value's bytes are at most the output limit; before parsing, the JSON containers and separators are
counted (one C pass) and a value with more than :func:`budget` of them, which cannot equal the expected value, is a
wrong answer without being built. Expected outputs are parsed with lcb_runner's 50000-digit integers
(:func:`loads_big`, without changing the process's own limit); the driver writes any integer over 8192 bits as hex,
so a long decimal integer in a result is forged and refused.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

INT_MAX_STR_DIGITS = 50000  # lcb_runner/evaluation/compute_code_generation_metrics.py
MAX_INT_HEX = 42000  # hex digits of the largest int rebuilt (> 50000 decimal digits: nothing larger can be expected)
_DTYPE = re.compile(r"[<>|=]?[biufcU]\d{1,6}")
MAX_DIMS = 32


LIMIT_MESSAGE = "integer string conversion"  # in the ValueError of an int over sys.get_int_max_str_digits()
_CHUNK = 4000  # decimal digits converted at once: under Python's default limit (4300)


def _long_int(digits: str) -> int:
    """A decimal integer of any length, converted in chunks under the process's digit limit (divide and conquer:
    faster than ``int()`` itself at 50000 digits, and no process-wide ``sys.set_int_max_str_digits``)."""
    if len(digits) <= _CHUNK:
        return int(digits)
    low = len(digits) // 2
    return _long_int(digits[:-low]) * 10 ** low + _long_int(digits[-low:])


def _json_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > INT_MAX_STR_DIGITS:
        raise ValueError(f"an integer of {len(digits)} digits, over lcb_runner's {INT_MAX_STR_DIGITS}")
    value = _long_int(digits)
    return -value if text.startswith("-") else value


def loads_big(text: str | bytes) -> Any:
    """``json.loads`` with lcb_runner's 50000-digit integers (its ``sys.set_int_max_str_digits(50000)``), whatever
    this process's own limit: the plain parse first; only a text holding a longer integer is parsed again with
    integers converted by :func:`_json_int`. Raises ``ValueError`` (an integer over 50000 digits included)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        if LIMIT_MESSAGE not in str(exc):
            raise
    return json.loads(text, parse_int=_json_int)


def expected_value(output: str) -> Any:
    """``json.loads`` of a functional test's expected output, as lcb_runner parses it (50000-digit integers)."""
    return loads_big(output)


class Opaque:
    """A value the parent does not rebuild (a program's class, an iterator, ...): equal to nothing."""

    __slots__ = ("type", "text")

    def __init__(self, type_name: str, text: str) -> None:
        self.type, self.text = type_name, text

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<{self.type}: {self.text}>" if self.text else f"<{self.type}>"


def structure_count(data: bytes | bytearray) -> int:
    """JSON containers and separators in ``data`` (``{``, ``[``, ``,``; counted in strings too): an upper bound on
    the number of values a parse builds, up to a constant."""
    return data.count(b"{") + data.count(b"[") + data.count(b",")


def budget(expected_output: str) -> int:
    """The most containers and separators a wire value equal to this expected output can hold: each JSON value of
    the expected output becomes at most a few (a tuple marker, a Fraction's two ints, a dict's key-value pairs)."""
    data = expected_output.encode("utf-8", "surrogatepass")
    return 16 * structure_count(data) + 1024


class WireError(ValueError):
    """A wire value the driver never writes (the channel was tampered with)."""


def _need(obj: dict, key: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise WireError(f"wire value {obj.get('$lcb')!r}: field {key!r}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError("wire value: expected an integer")
    return value


def _hex_int(obj: dict) -> Any:
    text = _need(obj, "hex", str)
    if len(text) > MAX_INT_HEX:
        return Opaque("int", "over 50000 digits")  # lcb_runner cannot parse an expected value this large
    try:
        return int(text, 16)
    except ValueError:
        raise WireError("wire int: not hex") from None


def _fraction(obj: dict) -> Any:
    n, d = obj.get("n"), obj.get("d")
    if isinstance(n, Opaque) or isinstance(d, Opaque):
        return Opaque("Fraction", "a part over 50000 digits")
    n, d = _int(n), _int(d)
    if d <= 0 or math.gcd(n, d) != 1:
        raise WireError("wire Fraction: not in lowest terms")
    return Fraction(n, d)


def _decimal(obj: dict) -> Decimal:
    try:
        return Decimal(_need(obj, "s", str))
    except InvalidOperation:
        raise WireError("wire Decimal: not a number") from None


def _complex(obj: dict) -> complex:
    return complex(_need(obj, "re", (int, float)), _need(obj, "im", (int, float)))


def _numpy(obj: dict) -> Any:
    dtype, shape = _need(obj, "dtype", str), _need(obj, "shape", list)
    if not (_DTYPE.fullmatch(dtype) or dtype == "|O") or len(shape) > MAX_DIMS or \
            not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n for n in shape):
        raise WireError("wire numpy value: bad dtype or shape")
    try:
        import numpy as np
    except ImportError:
        return Opaque("numpy value", "numpy is not installed in the harness")
    if dtype == "|O":  # an object array: its elements, already rebuilt
        items = _need(obj, "items", list)
        if math.prod(shape) != len(items):
            raise WireError("wire numpy value: size mismatch")
        array = np.empty(len(items), dtype=object)
        for k, item in enumerate(items):
            array[k] = item
        return array.reshape(shape)
    data = _need(obj, "data", str)
    try:
        raw = base64.b64decode(data, validate=True)
        kind = np.dtype(dtype)
        if kind.itemsize == 0 or math.prod(shape) * kind.itemsize != len(raw):
            raise WireError("wire numpy value: size mismatch")
        array = np.frombuffer(raw, dtype=kind).reshape(shape)
    except (binascii.Error, TypeError, ValueError) as exc:
        raise WireError(f"wire numpy value: {type(exc).__name__}") from None
    if obj.get("scalar") is True:
        if shape:
            raise WireError("wire numpy scalar with a shape")
        return array[()]
    return array


def _items(obj: dict) -> list:
    return _need(obj, "items", list)


def _dict(obj: dict) -> dict:
    pairs = _items(obj)
    if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise WireError("wire dict: items are not pairs")
    return dict(pairs)


_REBUILD = {
    "int": _hex_int,
    "tuple": lambda obj: tuple(_items(obj)),
    "set": lambda obj: set(_items(obj)),
    "frozenset": lambda obj: frozenset(_items(obj)),
    "dict": _dict,
    "fraction": _fraction,
    "decimal": _decimal,
    "complex": _complex,
    "numpy": _numpy,
    "opaque": lambda obj: Opaque(str(obj.get("type", "value"))[:100], str(obj.get("repr", ""))[:200]),
}


def _hook(obj: dict) -> Any:
    tag = obj.get("$lcb")
    if tag is None:
        return obj
    rebuild = _REBUILD.get(tag) if isinstance(tag, str) else None
    if rebuild is None:
        raise WireError("wire value: unknown tag")
    return rebuild(obj)


def rebuild(data: bytes | bytearray, limit: int) -> Any:
    """The value of a wire JSON payload. Raises :class:`OverflowError` when it holds more than ``limit``
    containers and separators (it cannot equal the expected value; nothing is built), :class:`WireError` (a
    ``ValueError``) when it is no wire value."""
    if structure_count(data) > limit:
        raise OverflowError("the return value is larger than the expected value")
    try:
        text = bytes(data).decode("utf-8", "surrogatepass")
        return json.loads(text, object_hook=_hook)  # a decimal int over this process's digit limit: ValueError
    except WireError:
        raise
    except (TypeError, ValueError) as exc:  # not JSON, not UTF-8, an unhashable set member or dict key
        raise WireError(f"wire value: {type(exc).__name__}") from None
    except RecursionError:
        raise WireError("wire value: nested too deep") from None


def official_equal(value: Any, expected: Any) -> tuple[bool, str | None]:
    """``(passed, error)`` as ``grade_call_based`` decides: ``value == expected``, then ``not`` of the result; an
    exception in either (a numpy array of several elements, a signalling NaN) is that test's runtime error."""
    try:
        return bool(value == expected), None  # the truth test lcb_runner's `if not tmp_result` applies
    except Exception as exc:  # noqa: BLE001 - the comparison of rebuilt standard values only
        return False, f"comparing the result raised {type(exc).__name__}: {exc}"[:400]
