"""HQL values: every literal form, and printing then parsing gives the value back."""

from __future__ import annotations

import datetime
import math
import uuid

import pytest
from bson.binary import Binary
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp
from hypothesis import given, settings
from hypothesis import strategies as st

from hoarddb.errors import BadValueError, SyntaxError_
from hoarddb.hql import format_value, parse_value
from hoarddb.hql.printer import quote

UTC = datetime.timezone.utc


def same(a, b) -> bool:
    """Equal and of the same types all the way down (1 is not 1.0, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


LITERALS = [
    # text, value
    ("1", 1),
    ("-7", -7),
    ("0x1F", 31),
    ("2.5", 2.5),
    ("-2.5", -2.5),
    ("1e3", 1000.0),
    ("1.5E-3", 0.0015),
    ("9223372036854775807", 2**63 - 1),
    ("-9223372036854775808", -(2**63)),
    ("true", True),
    ("false", False),
    ("null", None),
    ("Infinity", float("inf")),
    ("-Infinity", float("-inf")),
    ('"double"', "double"),
    ("'single'", "single"),
    (r"'it\'s'", "it's"),
    (r'"a\"b"', 'a"b'),
    (r'"tab\tnew\nline\\"', "tab\tnew\nline\\"),
    (r'"\u00e9\x41\/"', "éA/"),
    (r'"\ud83d\ude00"', "\U0001F600"),
    ('"-- not a comment"', "-- not a comment"),
    ("[]", []),
    ("[1, 'a', [2]]", [1, "a", [2]]),
    ("[1, 2,]", [1, 2]),
    ("{}", {}),
    ('{a: 1, "b c": 2, $set: {x: 1}, _id_: "k", a.b: 3,}', {"a": 1, "b c": 2, "$set": {"x": 1}, "_id_": "k", "a.b": 3}),
    ("{type: 1, null: 2, db: 3, create: 4}", {"type": 1, "null": 2, "db": 3, "create": 4}),
    ('ISODate("2026-09-29T10:00:00Z")', datetime.datetime(2026, 9, 29, 10, 0, tzinfo=UTC)),
    ('ISODate("2026-09-29T12:00:00.250+02:00")', datetime.datetime(2026, 9, 29, 10, 0, 0, 250000, tzinfo=UTC)),
    ('ISODate("2026-09-29")', datetime.datetime(2026, 9, 29, tzinfo=UTC)),
    ('Date("2026-09-29T10:00:00")', datetime.datetime(2026, 9, 29, 10, 0, tzinfo=UTC)),
    ("int32(30)", 30),
    ("NumberInt(-5)", -5),
    ("int64(30)", Int64(30)),
    ('NumberLong("42")', Int64(42)),
    ("double(30)", 30.0),
    ('double("Infinity")', float("inf")),
    ('ObjectId("65f0c0ffee0123456789abcd")', ObjectId("65f0c0ffee0123456789abcd")),
    ('Decimal128("12.50")', Decimal128("12.50")),
    ('NumberDecimal("1E+3")', Decimal128("1E+3")),
    ('UUID("0192a3b4-c5d6-7890-abcd-ef12345678a1")', uuid.UUID("0192a3b4-c5d6-7890-abcd-ef12345678a1")),
    ('BinData(0, "aGVsbG8=")', b"hello"),
    ('BinData(5, "aGVsbG8=")', Binary(b"hello", 5)),
    ("Timestamp(1727604000, 1)", Timestamp(1727604000, 1)),
    ('Regex("^ab+c", "i")', Regex("^ab+c", "i")),
    ("MinKey()", MinKey()),
    ("MaxKey()", MaxKey()),
    ("isodate('2026-01-01T00:00:00Z')", datetime.datetime(2026, 1, 1, tzinfo=UTC)),
]


@pytest.mark.parametrize("text,value", LITERALS, ids=[t for t, _ in LITERALS])
def test_literal(text, value):
    parsed = parse_value(text)
    assert same(parsed, value), (parsed, value)
    # ...and it prints back to text that parses to the same value.
    assert same(parse_value(format_value(parsed)), value)


def test_literals_span_lines_and_skip_comments():
    text = """{
        Author: "Bob",   -- who wrote it
        Tags: [
            "a",
            "b"
        ]
    }"""
    assert parse_value(text) == {"Author": "Bob", "Tags": ["a", "b"]}


def test_nan():
    assert math.isnan(parse_value("NaN"))
    assert format_value(float("nan")) == "NaN"


def test_now_is_a_utc_date_at_millisecond_precision():
    before = datetime.datetime.now(UTC) - datetime.timedelta(seconds=1)
    value = parse_value("now()")
    assert value.tzinfo is not None and value >= before
    assert value.microsecond % 1000 == 0
    assert isinstance(parse_value("ISODate()"), datetime.datetime)


def test_new_object_id_and_uuid():
    assert isinstance(parse_value("ObjectId()"), ObjectId)
    assert isinstance(parse_value("UUID()"), uuid.UUID)


def test_types_survive_round_trip():
    assert format_value(Int64(5)) == "int64(5)"
    assert format_value(5.0) == "5.0"
    assert format_value(-0.0) == "-0.0"
    assert format_value(b"hi") == 'BinData(0, "aGk=")'
    assert format_value(datetime.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)) == 'ISODate("2026-01-02T03:04:05.006Z")'
    assert format_value({"a b": 1, "ok": "x"}) == '{"a b": 1, ok: "x"}'


@pytest.mark.parametrize("text,line,column,fragment", [
    ("99999999999999999999", 1, 1, "outside the 64-bit range"),
    ("-9223372036854775809", 1, 2, "outside the 64-bit range"),
    ('ISODate("yesterday")', 1, 1, "not an ISO 8601 date"),
    ("int32(3000000000)", 1, 1, "outside"),
    ('ObjectId("xyz")', 1, 1, "24 hex digits"),
    ('BinData(0, "!!")', 1, 1, "base64"),
    ('Decimal128("abc")', 1, 1, "not a decimal"),
    ('UUID("nope")', 1, 1, "not a UUID"),
    ("Frob(1)", 1, 1, "unknown value constructor Frob"),
    ("int32()", 1, 1, "takes 1 argument"),
    ("{a: 1, a: 2}", 1, 8, "given twice"),
])
def test_bad_values_are_refused_with_position(text, line, column, fragment):
    with pytest.raises(BadValueError) as e:
        parse_value(text)
    assert fragment in e.value.message
    assert (e.value.line, e.value.column) == (line, column)
    assert e.value.message.startswith(f"line {line}, column {column}: ")


@pytest.mark.parametrize("text,line,column,fragment", [
    ("{a: 1 b: 2}", 1, 7, "unexpected 'b'"),
    ("[1, 2", 1, 6, "incomplete"),
    ('"open', 1, 1, "unterminated string"),
    ("{a: hello}", 1, 5, "unquoted word hello"),
    ("{\n  a: 1,\n  b: @\n}", 3, 6, "unexpected character '@'"),
    ("1 2", 1, 3, "unexpected '2'; expected the end"),
])
def test_syntax_errors_name_line_and_column(text, line, column, fragment):
    with pytest.raises(SyntaxError_) as e:
        parse_value(text)
    assert fragment in e.value.message
    assert (e.value.line, e.value.column) == (line, column)
    assert e.value.code == 20 and e.value.codeName == "SYNTAX_ERROR"


# ---- property: print then parse is the identity ------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(Int64),
    st.floats(allow_nan=False),
    _text,
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31),
                 timezones=st.just(UTC)),
    st.binary(max_size=40),
    st.builds(Binary, st.binary(max_size=20), st.sampled_from([1, 2, 5, 128])),
    st.uuids(),
    st.binary(min_size=12, max_size=12).map(ObjectId),
    st.decimals(allow_nan=False, allow_infinity=False, places=3, max_value=10**20, min_value=-(10**20)).map(
        lambda d: Decimal128(str(d))),
)
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(_text, children, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_round_trip(value):
    text = format_value(value)
    assert same(parse_value(text), value), text
    assert same(parse_value(format_value(value, width=None)), value)


@settings(max_examples=200, deadline=None)
@given(_text)
def test_quoted_strings_round_trip(text):
    assert parse_value(quote(text)) == text


# ---- audit: edges of dates, strings, regex flags, Code, and every BSON type round-tripping ------

@pytest.mark.parametrize("text", ['ISODate("9999-12-31T23:59:59.999-05:00")', 'ISODate("0001-01-01T00:00:00+01:00")'])
def test_a_date_beyond_the_range_once_in_utc_is_a_bad_value(text):
    # Used to escape as lark's VisitError (an OverflowError): a traceback in the shell.
    with pytest.raises(BadValueError) as e:
        parse_value("{a: " + text + "}")
    assert (e.value.line, e.value.column) == (1, 5)
    assert "outside the dates" in e.value.message


def test_a_bad_date_in_a_script_stops_only_its_statement():
    from hoarddb.hql import statements

    found = list(statements('db.X.push({a: ISODate("9999-12-31T23:59:59.999-05:00")})\nshow databases'))
    assert isinstance(found[0], BadValueError)
    assert found[1].request == {"op": "list_databases"}


@pytest.mark.parametrize("text", [r'"\ud83d"', r'"a\udc00b"', '"a\udcffb"', r'{"\ud800": 1}'])
def test_lone_surrogates_are_refused(text):
    # BSON strings are UTF-8, which cannot hold half a surrogate pair: the engine used to fail
    # with INTERNAL_ERROR (UnicodeEncodeError) when such a string was written.
    with pytest.raises(BadValueError) as e:
        parse_value(text)
    assert "surrogate" in e.value.message


def test_surrogate_pairs_make_one_character():
    assert parse_value(r'"\ud83d\ude00"') == "\U0001f600"
    assert parse_value(r'"\uD83D\uDE00x"') == "\U0001f600x"


def test_regex_flags_are_checked():
    assert parse_value('Regex("a", "imsx")') == Regex("a", "imsx")
    with pytest.raises(BadValueError) as e:
        parse_value('Regex("a", "iq")')  # used to drop the q silently
    assert "'q'" in e.value.message and "accepted" in e.value.message


def test_code_constructor():
    from bson.code import Code

    assert parse_value('Code("f()")') == Code("f()")
    assert parse_value('Code("f()")').scope is None
    assert parse_value('code("g()", {x: 1})') == Code("g()", {"x": 1})
    with pytest.raises(BadValueError):
        parse_value('Code("f()", 5)')


def _nan_free(value):
    """The value with every NaN made the canonical float/decimal NaN (HQL prints them all as NaN)."""
    if isinstance(value, float) and value != value:
        return float("nan")
    if isinstance(value, Decimal128) and value.to_decimal().is_nan():
        return Decimal128("NaN")
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_free(v) for v in value]
    return value


def _bson(value) -> bytes:
    import bson

    from hoarddb.values.codec import CODEC_OPTIONS

    return bson.encode({"v": _nan_free(value)}, codec_options=CODEC_OPTIONS)


def _all_bson_values():
    from bson.code import Code
    from bson.dbref import DBRef

    from ..values import values_strategies as vs

    extra = st.one_of(
        st.builds(Code, _text),
        st.builds(Code, _text, st.dictionaries(st.sampled_from(["x", "y"]), st.integers(-5, 5), max_size=2)),
        st.builds(DBRef, st.sampled_from(["users", "c"]), st.one_of(st.integers(0, 9), _text)),
        st.builds(Regex, _text.filter(lambda s: "\x00" not in s), st.sampled_from(["", "i", "ms", "imsxlu"])),
    )
    return st.recursive(st.one_of(vs.bson_values, extra),
                        lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(_text, c, max_size=3)),
                        max_leaves=8).filter(lambda v: not _has_nul_key(v))


def _has_nul_key(value) -> bool:
    if isinstance(value, dict):
        return any("\x00" in k or _has_nul_key(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul_key(v) for v in value)
    return False


@settings(max_examples=200, deadline=None)
@given(_all_bson_values())
def test_every_bson_type_prints_and_parses_back_to_the_same_bson(value):
    # Every BSON type hoardDB stores, NaN, -0.0, Decimal128 specials, Timestamp, Regex, MinKey,
    # MaxKey, Code (printed as a plain string before), DBRef (printed as <DBRef ...> before).
    text = format_value(value)
    assert _bson(parse_value(text)) == _bson(value), text
    assert _bson(parse_value(format_value(value, width=None))) == _bson(value)


@pytest.mark.parametrize("text,column", [("1e999", 1), ("-1e999", 2), ("{a: 2.5e400}", 5)])
def test_a_double_beyond_its_range_is_a_bad_value_not_infinity(text, column):
    # 1e999 was stored as Infinity without a word
    with pytest.raises(BadValueError) as e:
        parse_value(text)
    assert "beyond a double's range" in e.value.message and "write Infinity if you mean it" in e.value.message
    assert e.value.column == column
    assert parse_value("1e308") == 1e308 and parse_value("-Infinity") == float("-inf")
