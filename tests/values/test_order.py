"""compare / values_equal / type_rank: MongoDB's order of BSON values."""

from __future__ import annotations

import datetime
import math
import re
import uuid
from fractions import Fraction

import pytest
from bson.binary import Binary
from bson.code import Code
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp
from hypothesis import given, settings
from hypothesis import strategies as st

from . import values_strategies as vs
from hoarddb.errors import BadValueError
from hoarddb.values import codec
from hoarddb.values.order import (
    ARRAY, BINARY, BOOL, DATE, MAXKEY, MINKEY, NULL, NUMBER, OBJECT, OBJECTID, REGEX, STRING, TIMESTAMP,
    compare, sort_key, type_rank, values_equal,
)

UTC = datetime.timezone.utc

# One value of each type, in MongoDB's type order.
ONE_OF_EACH = [
    MinKey(), None, -5, "", {}, [], b"", ObjectId(b"\x00" * 12), False,
    datetime.datetime(1, 1, 1, tzinfo=UTC), Timestamp(0, 0), Regex("", ""), Code("x"), Code("x", {}), MaxKey(),
]


def test_type_order_follows_mongodb():
    ranks = [type_rank(v) for v in ONE_OF_EACH]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert [type_rank(v) for v in (MinKey(), None, 1, "s", {}, [], b"", ObjectId(), True,
                                     datetime.datetime.now(UTC), Timestamp(1, 1), Regex("a"), MaxKey())] == [
        MINKEY, NULL, NUMBER, STRING, OBJECT, ARRAY, BINARY, OBJECTID, BOOL, DATE, TIMESTAMP, REGEX, MAXKEY]
    for i, a in enumerate(ONE_OF_EACH):
        for j, b in enumerate(ONE_OF_EACH):
            assert compare(a, b) == (i > j) - (i < j), (a, b)


def test_type_brackets_beat_values():
    assert compare(10**18, "") < 0          # any number < any string
    assert compare("zzz", {}) < 0            # any string < any object
    assert compare({"a": MaxKey()}, []) < 0  # any object < any array
    assert compare([MaxKey()], b"") < 0      # any array < any binary
    assert compare(True, datetime.datetime(1, 1, 1, tzinfo=UTC)) < 0


def test_bool_is_not_a_number():
    assert type_rank(True) == BOOL
    assert not values_equal(True, 1)
    assert not values_equal(False, 0)
    assert compare(False, True) < 0


@pytest.mark.parametrize("a,b", [
    (30, 30.0), (30, Int64(30)), (30, Decimal128("30")), (30.0, Decimal128("3.0E+1")), (0, -0.0),
    (Decimal128("-0"), 0), (float("nan"), float("nan")), (float("nan"), Decimal128("NaN")),
    (Decimal128("-NaN"), Decimal128("NaN")), (float("inf"), Decimal128("Infinity")),
    (2**53 + 1, Decimal128("9007199254740993")), (Decimal128("1.50"), 1.5),
])
def test_numbers_equal_across_types(a, b):
    assert compare(a, b) == 0 and values_equal(a, b) and values_equal(b, a)


@pytest.mark.parametrize("lo,hi", [
    (float("nan"), float("-inf")), (Decimal128("NaN"), -(2**63)), (float("-inf"), -1e308),
    (-1.5, -1), (-1, -0.5), (-0.5, 0), (0, 5e-324), (Decimal128("0.1"), 0.1),  # the double 0.1 is above 1/10
    (2**53, 2**53 + 1), (float(2**53), 2**53 + 1), (9007199254740993, 9007199254740994.0),
    (1.7976931348623157e308, Decimal128("1E+400")), (Decimal128("1E+400"), float("inf")),
    (2**63 - 1, 2.0**63), (Decimal128("1E-400"), 5e-324), (Decimal128("-1E-400"), 0),
])
def test_number_order(lo, hi):
    assert compare(lo, hi) == -1 and compare(hi, lo) == 1


def _oracle_key(v):
    """Where a number sits, computed with exact fractions: NaN, -inf, finite values, +inf."""
    if isinstance(v, Decimal128):
        v = v.to_decimal()
        if v.is_nan():
            return (0,)
        if v.is_infinite():
            return (1,) if v < 0 else (3,)
        return (2, Fraction(v))
    if isinstance(v, float):
        if math.isnan(v):
            return (0,)
        if math.isinf(v):
            return (1,) if v < 0 else (3,)
    return (2, Fraction(v))


def _oracle(a, b) -> int:
    ka, kb = _oracle_key(a), _oracle_key(b)
    return (ka > kb) - (ka < kb)


@given(vs.numbers, vs.numbers)
def test_number_compare_matches_exact_arithmetic(a, b):
    assert compare(a, b) == _oracle(a, b)


@given(vs.pool_numbers, vs.pool_numbers)
def test_number_compare_matches_exact_arithmetic_on_collisions(a, b):
    assert compare(a, b) == _oracle(a, b)


@given(vs.strings, vs.strings)
def test_strings_compare_by_utf8_bytes(a, b):
    ea, eb = a.encode(), b.encode()
    assert compare(a, b) == (ea > eb) - (ea < eb)


def test_strings_examples():
    assert compare("a", "b") < 0 and compare("B", "a") < 0 and compare("a", "a\x00") < 0
    assert compare("\uffff", "\U00010000") < 0  # UTF-8 byte order, not UTF-16 code units


def test_objects_compare_field_by_field():
    assert compare({"a": 1}, {"a": 2}) < 0
    assert compare({"a": 1}, {"b": 0}) < 0
    assert compare({"a": 1}, {"a": 1, "b": 0}) < 0          # shorter first
    assert compare({"a": 1, "b": 2}, {"b": 2, "a": 1}) != 0  # field order matters
    assert compare({"b": 1}, {"a": "x"}) < 0                 # as MongoDB: the value's type before the name
    assert values_equal({"a": 1, "b": [1.0]}, {"a": 1.0, "b": [Int64(1)]})


def test_arrays_compare_element_by_element():
    assert compare([1, 2], [1, 3]) < 0
    assert compare([1, 2], [1, 2, 0]) < 0
    assert compare([], [MinKey()]) < 0
    assert compare([2], [1, 5]) > 0
    assert values_equal([1, "a"], (1.0, "a"))


def test_binary_dates_and_others():
    assert compare(b"zz", b"aaa") < 0                      # length first, as MongoDB
    assert compare(Binary(b"a", 5), b"b") > 0              # then subtype
    assert values_equal(b"ab", Binary(b"ab", 0))
    u = uuid.uuid4()
    assert values_equal(u, Binary(u.bytes, 4)) and not values_equal(u, Binary(u.bytes, 3))
    d = datetime.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert values_equal(d, d.replace(microsecond=123000))   # BSON dates hold milliseconds
    assert values_equal(d.replace(tzinfo=None), d)          # naive means UTC
    assert compare(datetime.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
                   datetime.datetime(1970, 1, 1, tzinfo=UTC)) < 0
    assert compare(Timestamp(1, 5), Timestamp(2, 0)) < 0 and compare(Timestamp(1, 5), Timestamp(1, 6)) < 0
    assert values_equal(Regex("a", "im"), re.compile("a", re.I | re.M)) is False  # from_native adds 'u'
    assert values_equal(Regex("a", "imu"), re.compile("a", re.I | re.M))
    assert compare(Regex("a", "i"), Regex("b", "")) < 0
    assert compare(ObjectId(b"\x00" * 11 + b"\x01"), ObjectId(b"\x00" * 12)) > 0


def test_unsupported_types_are_refused():
    with pytest.raises(BadValueError) as err:
        compare(object(), 1)
    assert "accepted" in err.value.message
    with pytest.raises(BadValueError):
        type_rank({1, 2})


@given(vs.mixed, vs.mixed)
def test_antisymmetric(a, b):
    assert compare(a, b) == -compare(b, a)
    assert values_equal(a, b) == (compare(a, b) == 0)


@settings(max_examples=60)
@given(st.lists(vs.mixed, min_size=3, max_size=8))
def test_sorting_is_a_total_order(items):
    ordered = sorted(items, key=sort_key)
    for x, y in zip(ordered, ordered[1:]):
        assert compare(x, y) <= 0
    for x in ordered:
        for y in ordered:
            for z in ordered[:3]:
                if compare(x, y) <= 0 and compare(y, z) <= 0:
                    assert compare(x, z) <= 0


@settings(max_examples=60)
@given(vs.bson_documents)
def test_bson_round_trip_is_equal(doc):
    back = codec.decode(codec.encode(doc))
    assert values_equal(back, doc)


def test_sort_key_sorts_mixed_types():
    items = [MaxKey(), "b", 2.5, None, [1], {"a": 1}, 1, "a", MinKey(), float("nan")]
    expected = [MinKey(), None, float("nan"), 1, 2.5, "a", "b", {"a": 1}, [1], MaxKey()]
    got = sorted(items, key=sort_key)
    assert all(values_equal(x, y) for x, y in zip(got, expected)) and len(got) == len(expected)
