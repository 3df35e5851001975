"""Raw BSON helpers: reading one field and aliasing one without decoding the document."""

from __future__ import annotations

import datetime

import pytest
from bson import Binary, Decimal128, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.code import Code
from hypothesis import given, strategies as st

from hoarddb.values.codec import decode, encode, raw_alias, raw_get, raw_with

SAMPLE = {
    "d": 1.5, "s": "x\x00y", "o": {"z": [1, {"q": None}]}, "b": Binary(b"ab", 5), "oid": ObjectId(), "t": True,
    "dt": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc), "n": None, "r": Regex("a.b", "i"),
    "i": 5, "ts": Timestamp(1, 2), "l": 2 ** 40, "dec": Decimal128("1.1"), "mn": MinKey(), "mx": MaxKey(),
    "c": Code("f()"), "cs": Code("g()", {"x": 1}), "arr": [], "_id": "k",
}


def test_every_bson_type_is_skipped_and_read():
    raw = encode(SAMPLE)
    for name, value in SAMPLE.items():
        assert raw_get(raw, name) == value, name


def test_missing_field():
    raw = encode({"a": "_id_"})  # the name appears as bytes inside a value, not as a field
    assert raw_get(raw, "_id_", None) is None
    with pytest.raises(KeyError):
        raw_get(raw, "nope")
    assert raw_alias(raw, "_id", "_id_") is None


def test_alias_and_with_put_the_field_first_and_keep_the_rest():
    raw = encode(SAMPLE)
    aliased = decode(raw_alias(raw, "oid", "_id_"))
    assert list(aliased)[0] == "_id_" and aliased["_id_"] == SAMPLE["oid"]
    assert {k: v for k, v in aliased.items() if k != "_id_"} == decode(raw)
    added = decode(raw_with(raw, "_id_", 7))
    assert list(added)[0] == "_id_" and added["_id_"] == 7


@given(st.dictionaries(st.text(min_size=1, max_size=5).filter(lambda k: "\x00" not in k and not k.startswith("$")),
                       st.one_of(st.integers(-(2 ** 63), 2 ** 63 - 1), st.text(), st.none(), st.booleans(),
                                 st.lists(st.integers(0, 9), max_size=3)), max_size=6))
def test_raw_get_agrees_with_decode(doc):
    raw = encode(doc)
    for name, value in decode(raw).items():
        assert raw_get(raw, name) == value


def test_encode_checked_refuses_a_lone_surrogate_as_a_bad_value():
    # UnicodeEncodeError used to escape encode_checked: the engine answered INTERNAL_ERROR.
    from hoarddb.errors import BadValueError
    from hoarddb.values.codec import encode_checked

    for doc in ({"a": "\ud83d"}, {"\udcff": 1}, {"a": [{"b": "x\ud800"}]}):
        with pytest.raises(BadValueError) as e:
            encode_checked(doc)
        assert "surrogate" in e.value.message
