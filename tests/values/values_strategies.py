"""Hypothesis strategies for BSON values, shared by the tests of hoarddb.values."""

from __future__ import annotations

import datetime
import uuid

from bson.binary import Binary
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp
from hypothesis import strategies as st

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UTC = datetime.timezone.utc

EDGE_INTS = [0, 1, -1, 30, 2**31 - 1, -(2**31), 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63), 2**62 + 1]
EDGE_FLOATS = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 30.0, 1e-300, -1e-300, 5e-324, -5e-324, 1.7976931348623157e308,
               -1.7976931348623157e308, float("inf"), float("-inf"), float("nan"), 2.0**53, 2.0**63, -(2.0**63),
               0.1, -0.1, 19.99]
EDGE_DECIMALS = ["0", "-0", "30", "30.0", "3E+1", "19.99", "-19.99", "0.1", "1E-400", "-1E-400", "1E+400",
                 "-1E+400", "9007199254740993", "9223372036854775807", "9223372036854775808", "NaN", "-NaN",
                 "Infinity", "-Infinity", "1.797693134862315708145274237317044E+308", "5E-324", "2.5E-324",
                 "9.999999999999999999999999999999999E+6144", "1E-6176"]

ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(INT64_MIN, INT64_MAX), st.integers(-1000, 1000))
int64s = ints.map(Int64)
floats = st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(), st.floats(-1000, 1000),
                   st.integers(-(2**60), 2**60).map(float))


@st.composite
def _raw_decimals(draw):
    coefficient = draw(st.integers(0, 10**34 - 1))
    exponent = draw(st.integers(-6176, 6111))
    sign = draw(st.sampled_from(["", "-"]))
    return Decimal128(f"{sign}{coefficient}E{exponent}")


decimals = st.one_of(
    st.sampled_from(EDGE_DECIMALS).map(Decimal128),
    _raw_decimals(),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: Decimal128(repr(f))),
    st.integers(-(10**20), 10**20).map(lambda i: Decimal128(str(i))),
    st.tuples(st.integers(-10**6, 10**6), st.integers(-8, 2)).map(lambda t: Decimal128(f"{t[0]}E{t[1]}")),
)
numbers = st.one_of(ints, int64s, floats, decimals)

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6)
small_texts = st.sampled_from(["", "a", "b", "ab", "a\x00", "a\x00b", "\x00", "\x01", "é", "z", "\U0001f600", "ä"])
strings = st.one_of(texts, small_texts)

datetimes = st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31),
                         timezones=st.just(UTC))
object_ids = st.binary(min_size=12, max_size=12).map(ObjectId)
binaries = st.one_of(
    st.binary(max_size=6),
    st.builds(Binary, st.binary(max_size=6), st.sampled_from([0, 2, 5, 128])),
    st.uuids(),
    st.builds(lambda u: Binary(u.bytes, 4), st.uuids()),
)
timestamps = st.builds(Timestamp, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
regexes = st.builds(Regex, st.sampled_from(["a", "a.*", "^b", "", "x\x00"]), st.sampled_from(["", "i", "im", "s"]))

scalars = st.one_of(
    st.none(), st.booleans(), numbers, strings, datetimes, object_ids, binaries, timestamps, regexes,
    st.just(MinKey()), st.just(MaxKey()),
)


def _containers(children):
    return st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "c", "ab", "\x00"]), children, max_size=3),
    )


values = st.recursive(scalars, _containers, max_leaves=6)

# A small pool, so that pairs often collide (equal values in different dress).
pool_numbers = st.sampled_from([0, -0.0, 1, 1.0, Int64(1), Decimal128("1"), Decimal128("1.0"), 30, 30.0, Int64(30),
                                Decimal128("30"), Decimal128("3E+1"), float("nan"), Decimal128("NaN"), 0.1,
                                Decimal128("0.1"), -1, -1.5, Decimal128("-1.5"), 2**53, 2**53 + 1,
                                Decimal128("9007199254740993"), float(2**53), float("inf"), Decimal128("Infinity"),
                                float("-inf"), Decimal128("-Infinity"), Decimal128("1E+400"), Decimal128("1E-400")])
pool_scalars = st.one_of(pool_numbers, st.sampled_from(
    [None, True, False, "", "a", "a\x00", "ab", b"", b"a", Binary(b"a", 0), Binary(b"a", 5), MinKey(), MaxKey(),
     datetime.datetime(2020, 1, 1, tzinfo=UTC), datetime.datetime(2020, 1, 1, 0, 0, 0, 500, tzinfo=UTC),
     uuid.UUID(int=5), Binary(uuid.UUID(int=5).bytes, 4), Regex("a", "i"), Timestamp(1, 2)]))
pool_values = st.recursive(pool_scalars, lambda c: st.one_of(
    st.lists(c, max_size=2), st.dictionaries(st.sampled_from(["a", "b"]), c, max_size=2)), max_leaves=4)

mixed = st.one_of(values, pool_values)

# Values BSON itself can hold: no NUL in field names or regex patterns.
_bson_scalars = st.one_of(
    st.none(), st.booleans(), numbers, strings, datetimes, object_ids, binaries, timestamps,
    st.builds(Regex, st.sampled_from(["a", "a.*", "^b", ""]), st.sampled_from(["", "i", "ms"])),
    st.just(MinKey()), st.just(MaxKey()),
)
bson_values = st.recursive(_bson_scalars, lambda c: st.one_of(
    st.lists(c, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c", "é"]), c, max_size=3)), max_leaves=6)
bson_documents = st.dictionaries(st.sampled_from(["a", "b", "c", "d.e"]), bson_values, max_size=4)
