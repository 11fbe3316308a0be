"""Functional results across the channel (driver ``to_wire`` -> JSON -> ``values.rebuild``): the parent's ``==``
on the rebuilt value gives what ``==`` on the program's own value gives (lcb_runner compares in the program's
process), without running program code; forged wire values are refused; the parse is bounded."""

from __future__ import annotations

import json
from collections import Counter, OrderedDict, defaultdict, deque
from decimal import Decimal
from fractions import Fraction

import pytest

from sandbox import driver
from tasks.livecodebench.values import Opaque, WireError, budget, expected_value, official_equal, rebuild


def over_the_wire(value: object) -> object:
    data = json.dumps(driver.to_wire(value), ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")
    return rebuild(data, 1 << 30)


def in_process(value: object, expected: object) -> tuple[bool, bool]:
    """(passed, raised) as lcb_runner's ``tmp_result = prediction == gt_out; if not tmp_result`` decides."""
    try:
        return bool(value == expected), False
    except Exception:  # noqa: BLE001
        return False, True


CASES = [
    (Fraction(3, 2), 1.5), (Fraction(3, 2), 2), (Fraction(4, 2), 2), (Decimal("1.50"), 1.5), (Decimal("sNaN"), 1),
    (Decimal("NaN"), 1.5), (1.5 + 0j, 1.5), (1.5 + 1j, 1.5), (complex(2, 0), 2),
    ((1, 2), [1, 2]), ([(1, 2)], [[1, 2]]), ({1, 2}, [1, 2]), (frozenset({1}), [1]), ([{1}], [[1]]),
    ({1: 2}, {"1": 2}), ({"$lcb": "tuple", "items": []}, {"$lcb": "tuple", "items": []}),
    (Counter("aab"), {"a": 2, "b": 1}), (OrderedDict(a=1.0), {"a": 1}), (defaultdict(int, a=1), {"a": 1}),
    (deque([1]), [1]), (range(2), [0, 1]), (iter([1]), [1]), (None, None), (True, 1), (False, 0), (1, True),
    (2 ** 20000, 2 ** 20000), (2 ** 20000, 2 ** 20000 + 1), (-(2 ** 9000), -(2 ** 9000)),
    (Fraction(2 ** 9000, 3), 1.0), (float("nan"), float("nan")), (float("inf"), float("inf")),
    ("\ud800", "\ud800"), (["a", 1, 2.5, None], ["a", 1, 2.5, None]), ({"k": (1,)}, {"k": [1]}),
]


@pytest.mark.parametrize("value, expected", CASES, ids=[f"{type(v).__name__}-{k}" for k, (v, _) in enumerate(CASES)])
def test_the_rebuilt_value_compares_as_the_program_value(value, expected):
    assert (official_equal(over_the_wire(value), expected)[0], ) == (in_process(value, expected)[0], )


def test_numpy_values_compare_as_in_lcb_runner():
    np = pytest.importorskip("numpy")
    cases = [(np.array([3]), [3]), (np.array([[3]], dtype=np.uint8), [3]), (np.array([1, 2]), [1, 2]),
             (np.float32(1.5), 1.5), (np.float64(0.1), 0.1), (np.int64(7), 7), (np.bool_(True), True),
             (np.array(["ab"]), ["ab"]), (np.array([1.5 + 0j]), [1.5]), (np.array([]), []),
             ([np.int64(1), np.float16(0.5)], [1, 0.5]), ({"a": np.int32(2)}, {"a": 2}),
             (np.array([1, 2, 3]), [1, 2]), (np.array([None]), [None]), (np.datetime64("2024-01-01"), "2024-01-01")]
    for value, expected in cases:
        got = official_equal(over_the_wire(value), expected)
        passed, raised = in_process(value, expected)
        assert got[0] == passed and (got[1] is not None) == raised, (value, expected, got)


def test_a_program_class_is_opaque_and_equals_nothing():
    class Anything:
        def __eq__(self, other):
            return True

    class Half(float):
        def __eq__(self, other):
            return True

    for value in (Anything(), Half(1.5), [Anything()], {"a": Half(1.5)}, (Half(1.5),)):
        rebuilt = over_the_wire(value)
        for expected in (1.5, [1.5], {"a": 1.5}, (1.5,)):
            assert official_equal(rebuilt, expected) == (False, None), (value, expected)
    assert isinstance(over_the_wire(Anything()), Opaque) and isinstance(over_the_wire(Half(1.5)), Opaque)


class _Mixin:
    def describe(self):
        return "a method, no comparison"


class _Int(int):
    pass


class _List(_Mixin, list):
    def __iter__(self):  # list's == reads the storage, not __iter__
        return iter(["not", "these"])


class _Dict(dict):
    def keys(self):
        return ["zz"]


class _Str(str):
    pass


class _Set(set):
    pass


class _Tuple(tuple):
    pass


class _Float(float):
    pass


class _Complex(complex):
    pass


class _EqList(list):
    def __eq__(self, other):
        return True


class _EqInt(_Int):
    __eq__ = int.__ne__


def _subclass_cases():
    """(value, expected, opaque): ``opaque`` when a class of the value defines its own ``__eq__``."""
    import enum

    color = enum.IntEnum("Color", "RED GREEN")
    plain = [
        (_Int(3), 3), (_Int(3), 4), ([_Int(2), _Float(0.5)], [2, 0.5]), (_List([1, 2]), [1, 2]),
        (_List([1, 2]), ["not", "these"]), ({"a": _Int(1)}, {"a": 1}), (_Dict(a=1), {"a": 1}), (_Dict(a=1), {"zz": 1}),
        (_Str("ab"), "ab"), (_Set({1}), [1]), (_Tuple((1, 2)), [1, 2]), ([_Tuple((1,))], [[1]]), (_Float(1.5), 1.5),
        (_Complex(2), 2), (color.GREEN, 2), (color.RED, 2), (_List([_List([1])]), [[1]]),
    ]
    own = [(_EqList([1]), [2]), (_EqInt(3), 3), (_EqInt(3), 4), ([_EqInt(3)], [3])]
    return [(v, e, False) for v, e in plain] + [(v, e, True) for v, e in own]


@pytest.mark.parametrize("k", range(len(_subclass_cases())))
def test_a_builtin_subclass_compares_as_in_lcb_runner(k):
    """A subclass without ``__eq__`` compares by its builtin value (as ``==`` in the program's process); one with its
    own ``__eq__`` stays opaque: a wrong answer, whatever ``==`` would say there."""
    value, expected, opaque = _subclass_cases()[k]
    got = official_equal(over_the_wire(value), expected)
    assert got == ((False, None) if opaque else (in_process(value, expected)[0], None)), (value, expected)
    if not opaque:
        assert not any(isinstance(v, Opaque) for v in [over_the_wire(value)]), value


@pytest.mark.parametrize("payload", [
    '{"$lcb": "nope"}', '{"$lcb": "fraction", "n": 2, "d": 4}', '{"$lcb": "fraction", "n": 1, "d": 0}',
    '{"$lcb": "decimal", "s": "abc"}', '{"$lcb": "int", "hex": "zz"}', '{"$lcb": "set", "items": [[1]]}',
    '{"$lcb": "dict", "items": [[1]]}', '{"$lcb": "numpy", "dtype": "|O8", "shape": [1], "data": "AAAAAAAAAAA="}',
    '{"$lcb": "numpy", "dtype": "<i8", "shape": [2], "data": "AAAAAAAAAAA="}', '{"$lcb": "complex", "re": "1"}',
    '{"$lcb": "numpy", "dtype": "<i8", "shape": [], "data": "AAAAAAAAAAA=", "scalar": true, "x": 1}' + "]",
])
def test_forged_wire_values_are_refused(payload):
    with pytest.raises(WireError):  # a ValueError: grade() makes it the sample's protocol_error
        rebuild(payload.encode(), 1 << 20)


def test_an_int_over_50000_digits_is_opaque_not_parsed():
    value = rebuild(json.dumps({"$lcb": "int", "hex": "f" * 50000}).encode(), 1 << 20)
    assert isinstance(value, Opaque) and official_equal(value, 1) == (False, None)


def test_a_value_larger_than_the_expected_one_is_never_built():
    expected = "[1, 2, 3]"
    many = ("[" + ",".join(["{}"] * 100_000) + "]").encode()
    with pytest.raises(OverflowError):
        rebuild(many, budget(expected))
    assert rebuild(json.dumps(driver.to_wire((1, 2, 3))).encode(), budget(expected)) == (1, 2, 3)
    nested = json.dumps(driver.to_wire([[(i, Fraction(i, 7))] for i in range(500)])).encode()
    assert official_equal(rebuild(nested, budget(json.dumps([[[i, i / 7]] for i in range(500)]))),
                          [[(i, Fraction(i, 7))] for i in range(500)]) == (True, None)


def test_wire_ints_never_need_a_decimal_conversion():
    import sys

    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)
    try:
        assert over_the_wire(7 ** 20000) == 7 ** 20000  # 16,902 digits: hex both ways
    finally:
        sys.set_int_max_str_digits(before)


def test_a_forged_long_decimal_int_is_refused_but_long_digit_strings_are_values():
    with pytest.raises(WireError):  # the driver writes long ints as hex; Python's own digit limit stays in place
        rebuild(("[" + "9" * 40000 + "]").encode(), 1 << 20)
    digits = "7" * 40000
    assert official_equal(rebuild(json.dumps([digits, 12]).encode(), 1 << 20), [digits, 12]) == (True, None)


def test_expected_outputs_hold_50000_digit_integers_without_a_process_wide_limit():
    import sys

    before = sys.get_int_max_str_digits()
    value = expected_value("[" + "9" * 50000 + ", -" + "1" * 4301 + ", 3]")
    assert value == [10 ** 50000 - 1, -int("1" * 4000) * 10 ** 301 - int("1" * 301), 3]
    assert sys.get_int_max_str_digits() == before
    with pytest.raises(ValueError, match="50001 digits"):
        expected_value("9" * 50001)
