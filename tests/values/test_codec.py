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


# -- encode: the C encoder with prepared options, byte for byte bson.encode -------------------------

import collections  # noqa: E402
import re  # noqa: E402
import uuid  # noqa: E402

import bson  # noqa: E402
from bson import DBRef, Int64  # noqa: E402
from bson.datetime_ms import DatetimeMS  # noqa: E402
from bson.raw_bson import RawBSONDocument  # noqa: E402
from bson.son import SON  # noqa: E402

from hoarddb.values import codec  # noqa: E402

from . import values_strategies as vs  # noqa: E402

_TZ = datetime.timezone(datetime.timedelta(hours=-5, minutes=-30))

#: One value of every kind the encoder writes, and of every kind it reads an option for
#: (uuid.UUID: the UUID representation; the rest: none, which is what is checked).
EVERY_KIND = {
    "_id_": "k", "float": -0.5, "str": "x\x00é", "doc": {"a": {"b": None}}, "list": [1, "a"], "tuple": (2, 3.0),
    "bytes": b"\x00\xff", "binary": Binary(b"ab", 128), "uuid": uuid.UUID(int=7),
    "uuid_binary_4": Binary(uuid.UUID(int=8).bytes, 4), "uuid_binary_3": Binary(uuid.UUID(int=9).bytes, 3),
    "oid": ObjectId(b"0123456789ab"), "true": True, "false": False,
    "utc": datetime.datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=datetime.timezone.utc),
    "naive": datetime.datetime(1969, 12, 31, 23, 59, 59, 999000), "tz": datetime.datetime(2000, 2, 29, tzinfo=_TZ),
    "datetime_ms": DatetimeMS(-(2 ** 50)), "none": None, "regex": Regex("a.b", "imsux"),
    "pattern": re.compile(r"^x\d+$", re.I | re.M | re.S | re.X), "code": Code("f()"),
    "code_scope": Code("g()", {"x": 1, "y": [Code("h")]}), "int32": -(2 ** 31), "int64": 2 ** 63 - 1,
    "Int64": Int64(5), "timestamp": Timestamp(2 ** 32 - 1, 1), "decimal": Decimal128("-1.5E-400"),
    "min": MinKey(), "max": MaxKey(), "dbref": DBRef("c", ObjectId(b"ba9876543210"), "db", extra=1),
    "son": SON([("b", 1), ("a", 2)]), "ordered": collections.OrderedDict([("z", 1), ("_id", 2)]),
    "raw": RawBSONDocument(bson.encode({"r": 1})), "$key": 1, "dotted.key": 2, "": 3,
}

#: What neither may encode: the same error, type and message, from both.
UNENCODABLE = [
    {"a": object()}, {"a": 2 ** 64}, {"a": -(2 ** 63) - 1}, {"a": "x\ud800"}, {5: 1}, {"a": {b"k": 1}},
    {"a": [1, {"b": {1, 2}}]}, {"a\x00b": 1}, {"a": Regex("x\x00")}, {"a": Code("f", {"s": object()})},
]

_more_scalars = st.one_of(
    vs.scalars,
    st.builds(Int64, vs.ints),
    st.datetimes(min_value=datetime.datetime(1, 1, 2), max_value=datetime.datetime(9999, 12, 30)),  # naive
    st.datetimes(min_value=datetime.datetime(1, 1, 2), max_value=datetime.datetime(9999, 12, 30),
                 timezones=st.just(_TZ)),
    st.builds(DatetimeMS, st.integers(-(2 ** 62), 2 ** 62)),
    st.builds(Code, st.text(max_size=4)),
    st.builds(Code, st.text(max_size=4), st.dictionaries(st.sampled_from(["x", "y"]), vs.ints, max_size=2)),
    st.builds(DBRef, st.sampled_from(["c", "d"]), vs.object_ids),
    st.builds(lambda u: Binary(u.bytes, 3), st.uuids()),
    st.uuids(),
    st.sampled_from([re.compile("a.b", re.I), re.compile(r"^x\d+$", re.M | re.S), re.compile(b"by")]),
)
_keys = st.one_of(st.sampled_from(["a", "b", "_id", "_id_", "$x", "d.e", "é", ""]),
                  st.text(max_size=4).filter(lambda k: "\x00" not in k))


def _containers(children):
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_keys, children, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b"]), children, max_size=2).map(SON),
        st.dictionaries(st.sampled_from(["a", "b"]), children, max_size=2).map(collections.OrderedDict),
        st.dictionaries(st.sampled_from(["a", "b"]), vs.ints, max_size=2).map(
            lambda d: RawBSONDocument(bson.encode(d))),
    )


def _bson_encode(doc):
    return bson.encode(doc, codec_options=codec.CODEC_OPTIONS)


def _outcome(encode, doc):
    try:
        return encode(doc)
    except Exception as exc:
        return type(exc), str(exc)


def test_encode_is_bson_encode_for_every_kind_of_value():
    assert codec.encode(EVERY_KIND) == _bson_encode(EVERY_KIND)
    assert codec.encode_checked(EVERY_KIND) == _bson_encode(EVERY_KIND)
    for name, value in EVERY_KIND.items():  # each alone, and nested in an array and a document
        for doc in ({name: value}, {"a": [value]}, {"a": {"b": value}}):
            assert codec.encode(doc) == _bson_encode(doc), name
    for doc in UNENCODABLE:
        expected = _outcome(_bson_encode, doc)
        assert not isinstance(expected, bytes), doc
        assert _outcome(codec.encode, doc) == expected


@given(st.dictionaries(_keys, st.recursive(_more_scalars, _containers, max_leaves=8), max_size=5))
def test_encode_is_byte_for_byte_bson_encode(doc):
    expected = _outcome(_bson_encode, doc)  # (bytes, or the error both raise: a regex holding a NUL)
    assert _outcome(codec.encode, doc) == expected
    if isinstance(expected, bytes):
        assert codec.encode_checked(doc) == expected


def test_encode_uses_the_prepared_options_with_the_c_encoder():
    """The ~2,000 instructions an encode saves (codec._encode_options) are taken where
    pymongo's C encoder is; elsewhere encode keeps CODEC_OPTIONS."""
    if bson.has_c():
        assert codec.ENCODE_OPTIONS is not codec.CODEC_OPTIONS and codec.ENCODE_OPTIONS[0] is None
        assert codec.ENCODE_OPTIONS[1:] == tuple(codec.CODEC_OPTIONS)[1:]
