"""values.literal: the short HQL text of a value in messages, which must read back as HQL."""

from __future__ import annotations

import datetime
import re

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

from hoarddb.hql import parse_value
from hoarddb.values.literal import literal
from hoarddb.values.order import compare

UTC = datetime.timezone.utc


@pytest.mark.parametrize("value, text", [
    (float("nan"), "NaN"),  # these three used to show as nan, inf, -inf: not HQL
    (float("inf"), "Infinity"),
    (float("-inf"), "-Infinity"),
    ("a\nb\x00", r'"a\nb\u0000"'),  # a raw line break used to end the message's line
    ({"a b": 1, "x.y": "z"}, '{"a b": 1, x.y: "z"}'),  # a key with a space used to show unquoted
    (b"\x00ab", 'BinData(0, "AGFi")'),  # used to show as b'\x00ab'
    (Binary(b"a", 5), 'BinData(5, "YQ==")'),
    (Timestamp(1, 2), "Timestamp(1, 2)"),
    (Regex("a.b", "i"), 'Regex("a.b", "i")'),
    (Code("f()"), 'Code("f()")'),
    (MinKey(), "MinKey()"),
    (Int64(5), "int64(5)"),
])
def test_literal_text(value, text):
    assert literal(value) == text


@pytest.mark.parametrize("value", [
    None, True, 0, -0.0, 1.5, 2**63 - 1, Int64(-3), float("inf"), "x\"y\\z\t", {"_id_": "u1", "n": [1, {"k": None}]},
    datetime.datetime(2026, 9, 29, 10, 0, 0, 123000, tzinfo=UTC), ObjectId("65f0c0ffee0123456789abcd"),
    Decimal128("12.50"), b"hi", Binary(b"x", 128), Timestamp(5, 6), Regex("^a", "im"), re.compile("q", re.S),
    Code("g()", {"x": 1}), MinKey(), MaxKey(), {"": 1, "1a": 2},
])
def test_literal_reads_back_as_hql(value):
    back = parse_value(literal(value))
    assert compare(back, value) == 0, literal(value)
    if isinstance(value, Code):
        assert isinstance(back, Code) and back.scope == value.scope


def test_long_bytes_are_summarised():
    import hashlib

    data = b"\x01" * 1000
    assert literal(data) == f"BinData(0, <1000 bytes, sha256 {hashlib.sha256(data).hexdigest()}>)"
