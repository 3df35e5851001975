"""encode_key / encode_keys / decode_key: byte keys that sort exactly like compare()."""

from __future__ import annotations

import datetime
import uuid

import pytest
from bson.binary import Binary
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from hypothesis import given, settings
from hypothesis import strategies as st

from . import values_strategies as vs
from hoarddb.errors import BadValueError
from hoarddb.values.keys import decode_key, decode_keys, encode_key, encode_keys, key_end
from hoarddb.values.order import compare, values_equal

UTC = datetime.timezone.utc


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def _bytes_cmp(a: bytes, b: bytes) -> int:
    return (a > b) - (a < b)


def _check_pair(a, b) -> None:
    ka, kb = encode_key(a), encode_key(b)
    c = compare(a, b)
    assert _bytes_cmp(ka, kb) == c, (a, b, ka.hex(), kb.hex())
    assert (ka == kb) == (c == 0)


@given(vs.mixed, vs.mixed)
def test_key_order_agrees_with_compare(a, b):
    _check_pair(a, b)


@settings(max_examples=300)
@given(vs.numbers, vs.numbers)
def test_number_key_order_agrees_with_compare(a, b):
    _check_pair(a, b)


@settings(max_examples=300)
@given(vs.pool_values, vs.pool_values)
def test_key_order_on_frequent_collisions(a, b):
    _check_pair(a, b)


@given(vs.strings, vs.strings)
def test_string_key_order(a, b):
    _check_pair(a, b)


@settings(max_examples=200)
@given(vs.mixed, vs.mixed, vs.mixed, vs.mixed)
def test_concatenated_keys_sort_like_tuples(a1, a2, b1, b2):
    expected = compare(a1, b1) or compare(a2, b2)
    assert _bytes_cmp(encode_keys([a1, a2]), encode_keys([b1, b2])) == expected
    assert encode_keys([a1, a2]) == encode_key(a1) + encode_key(a2)


@settings(max_examples=100)
@given(vs.pool_values, vs.pool_values, vs.pool_values, vs.pool_values)
def test_concatenated_keys_sort_like_tuples_on_collisions(a1, a2, b1, b2):
    expected = compare(a1, b1) or compare(a2, b2)
    assert _bytes_cmp(encode_keys([a1, a2]), encode_keys([b1, b2])) == expected


@given(vs.mixed)
def test_decode_round_trip(value):
    key = encode_key(value)
    back = decode_key(key)
    assert values_equal(back, value), (value, back)
    assert encode_key(back) == key


@given(st.lists(vs.mixed, max_size=4))
def test_decode_keys_round_trip(values):
    back = decode_keys(encode_keys(values))
    assert len(back) == len(values) and all(values_equal(x, y) for x, y in zip(back, values))


@pytest.mark.parametrize("same", [
    [30, 30.0, Int64(30), Decimal128("30"), Decimal128("3.0E+1"), Decimal128("30.000")],
    [0, -0.0, 0.0, Int64(0), Decimal128("0"), Decimal128("-0"), Decimal128("0E-30")],
    [float("nan"), Decimal128("NaN"), Decimal128("-NaN"), Decimal128("sNaN")],
    [float("inf"), Decimal128("Infinity")],
    [2**53 + 1, Int64(2**53 + 1), Decimal128("9007199254740993")],
    [b"ab", Binary(b"ab", 0), bytearray(b"ab")],
    [uuid.UUID(int=7), Binary(uuid.UUID(int=7).bytes, 4)],
    [[1, {"a": 2}], (1.0, {"a": Int64(2)})],
    [datetime.datetime(2020, 1, 1, tzinfo=UTC), datetime.datetime(2020, 1, 1, 0, 0, 0, 999, tzinfo=UTC)],
])
def test_equal_values_give_equal_bytes(same):
    keys = {encode_key(v) for v in same}
    assert len(keys) == 1


def test_numbers_share_one_short_encoding():
    assert encode_key(30).hex() == "1ec03e00000000000002"
    assert len(encode_key(-1.5)) == 10 and len(encode_key(2**53)) == 10
    assert len(encode_key(Decimal128("19.99"))) > 10  # not exactly a double: carries its exact value


def test_negative_and_fractional_floats_sort_right():
    ordered = [float("nan"), float("-inf"), -1e308, -2.5, -2, -1.5, -1, -0.5, -5e-324, 0, 5e-324, 0.25, 0.5, 1,
               1.5, 2**53, 2**53 + 1, 1e308, float("inf")]
    keys = [encode_key(v) for v in ordered]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_decimal_tie_breaks_sort_right():
    ordered = [Decimal128("-1E+400"), -1.7976931348623157e308, -0.1, Decimal128("-0.1"), Decimal128("-1E-400"), 0,
               Decimal128("1E-400"), 5e-324, Decimal128("0.1"), 0.1, Decimal128("0.1000000000000000055511151231257828"),
               2**63 - 1, 2.0**63, 2**64 - 1, 1.7976931348623157e308, Decimal128("1E+400"),
               Decimal128("9.999999999999999999999999999999999E+6144"), float("inf")]
    keys = [encode_key(v) for v in ordered]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    for a, b in zip(ordered, ordered[1:]):
        assert compare(a, b) < 0


def test_strings_are_escaped_and_terminated():
    assert encode_key("a\x00b") == b"\x28a\x00\xffb\x00\x01"
    assert encode_key("a") < encode_key("a\x00") < encode_key("a\x01") < encode_key("ab")
    # a string key is never a prefix that breaks tuple order
    assert encode_keys(["a", "z"]) < encode_keys(["a\x00", ""])
    assert encode_keys([b"a", 1]) < encode_keys([b"a\x00", 0])


def test_type_tags_follow_type_order():
    values = [MinKey(), None, -(2**63), "", {}, [], b"", ObjectId(b"\x00" * 12), False,
              datetime.datetime(1, 1, 1, tzinfo=UTC), MaxKey()]
    keys = [encode_key(v) for v in values]
    assert keys == sorted(keys)


def test_decode_types():
    assert decode_key(encode_key(3.0)) == 3 and type(decode_key(encode_key(3.0))) is int
    assert type(decode_key(encode_key(Int64(4)))) is int
    assert decode_key(encode_key(2.5)) == 2.5
    assert isinstance(decode_key(encode_key(Decimal128("19.99"))), Decimal128)
    assert decode_key(encode_key(uuid.UUID(int=3))) == uuid.UUID(int=3)
    assert decode_key(encode_key({"a": [1, "x", None]})) == {"a": [1, "x", None]}
    assert decode_key(encode_key(datetime.datetime(2020, 1, 2, 3, 4, 5, 6000, tzinfo=UTC))) == \
        datetime.datetime(2020, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)


def test_decode_refuses_garbage():
    for bad in (b"", b"\xff", b"\x1e\x00", encode_key(1) + b"\x14", b"\x28abc"):
        with pytest.raises(BadValueError):
            decode_key(bad)


@given(st.lists(vs.mixed, max_size=4))
def test_key_end_splits_a_tuple_key(values):
    data = encode_keys(values)
    pos, ends = 0, []
    for v in values:
        pos = key_end(memoryview(data), pos)
        ends.append(pos)
    assert pos == len(data)
    starts = [0] + ends[:-1]
    assert [data[a:b] for a, b in zip(starts, ends)] == [encode_key(v) for v in values]


def test_key_end_refuses_truncated_keys():
    for bad in (b"", b"\x1e\x00", encode_key("abc")[:-1], encode_key([1, 2])[:-1]):
        with pytest.raises(BadValueError):
            key_end(bad, 0)
