"""One renderer of values as HQL text: the shell's answers and the engine's messages write a value alike,
and what they write parses back as the same value."""

from __future__ import annotations

import datetime
import hashlib

from bson.code import Code
from bson.dbref import DBRef
from bson.regex import Regex
from hypothesis import given, settings
from hypothesis import strategies as st

from hoarddb.hql import format_value, parse_value
from hoarddb.values.literal import BYTES_SHOWN, literal

from ..values import values_strategies as vs
from .test_literals import _bson, _has_nul_key

UTC = datetime.timezone.utc

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)

#: Every kind of value HQL can write: each BSON type, with dates down to the microsecond
#: (Python keeps them; BSON's millisecond is one case of it), Code with and without scope,
#: DBRef (a document of $ref and $id), regular expressions with every flag.
_every_kind = st.one_of(
    vs.bson_values,
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31), timezones=st.just(UTC)),
    st.builds(Code, _text),
    st.builds(Code, _text, st.dictionaries(st.sampled_from(["x", "y"]), st.integers(-5, 5), max_size=2)),
    st.builds(DBRef, st.sampled_from(["users", "c"]), st.one_of(st.integers(0, 9), _text)),
    st.builds(Regex, _text.filter(lambda s: "\x00" not in s), st.sampled_from(["", "i", "ms", "imsxlu"])),
)
_values = st.recursive(
    _every_kind,
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(_text, c, max_size=3)),
    max_leaves=10,
).filter(lambda v: not _has_nul_key(v))


@settings(max_examples=300, deadline=None)
@given(_values)
def test_rendering_then_parsing_gives_the_same_value(value):
    for text in (literal(value), format_value(value), format_value(value, width=None)):
        assert _bson(parse_value(text)) == _bson(value), text


@settings(max_examples=200, deadline=None)
@given(_values)
def test_messages_and_the_shell_write_a_value_alike(value):
    # values/literal.py and the shell's printer used to differ (dates with and without .000).
    assert literal(value) == format_value(value, width=None)


def test_dates_are_written_one_way():
    at = datetime.datetime(2026, 9, 29, 10, tzinfo=UTC)
    assert literal(at) == format_value(at) == 'ISODate("2026-09-29T10:00:00Z")'
    assert literal(at.replace(microsecond=123000)) == 'ISODate("2026-09-29T10:00:00.123Z")'
    assert literal(at.replace(microsecond=123456)) == 'ISODate("2026-09-29T10:00:00.123456Z")'
    assert parse_value(literal(at.replace(microsecond=123456))) == at.replace(microsecond=123456)
    assert literal(datetime.datetime(1, 1, 1, tzinfo=UTC)) == 'ISODate("0001-01-01T00:00:00Z")'
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    assert literal(datetime.datetime(2026, 9, 29, 12, tzinfo=plus_two)) == 'ISODate("2026-09-29T10:00:00Z")'


def test_long_bytes_are_summarised_alike():
    data = b"\x07" * (BYTES_SHOWN + 1)
    summary = f"BinData(0, <{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}>)"
    assert literal(data) == summary
    assert format_value(data, bytes_shown=BYTES_SHOWN) == summary
    assert parse_value(format_value(data)) == data  # the shell's values print in full unless told otherwise
