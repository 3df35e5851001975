"""Every BSON value written as HQL text, the one way hoardDB writes values for people: "u1", 30, ISODate("...").

The shell prints answers with :func:`render` (hql/printer.py's ``format_value`` is it, with
the shell's line width), and error messages quote values with :func:`literal`, its short
one-line form. What either writes reads back with ``hoarddb.hql.parse_value`` as the same
value, except bytes longer than the ``bytes_shown`` asked for, which are written as a
summary (their size and SHA-256). Adding a BSON type: a case in :func:`_scalar` and its
constructor in hql/literals.py.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import math
import re
import uuid
from collections.abc import Mapping
from typing import Any

from bson.binary import Binary
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

#: In messages, bytes longer than this are shown as a summary, not in full: a message stays short.
BYTES_SHOWN = 64

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UTC = datetime.timezone.utc
_BARE_KEY = re.compile(r"(?:\$|[^\W\d])[\w$]*(?:\.(?:\$|[^\W\d])[\w$]*)*\Z")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_REGEX_FLAGS = ((re.I, "i"), (re.L, "l"), (re.M, "m"), (re.S, "s"), (re.U, "u"), (re.X, "x"))


def quote(text: str) -> str:
    """``text`` as a double-quoted HQL string: quotes, backslashes and control characters escaped."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F or 0xD800 <= code < 0xE000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_key(key) -> str:
    """A document key, bare when HQL reads it back bare (``Name``, ``$set``, ``a.b``), else quoted."""
    key = str(key)
    return key if _BARE_KEY.match(key) else quote(key)


def format_date(value: datetime.datetime) -> str:
    """``ISODate("2026-09-29T10:00:00Z")`` in UTC, with milliseconds (or microseconds) only when present.

    A date without a time zone is taken to be in UTC already, as BSON's dates are.
    """
    if value.tzinfo is not None:
        value = value.astimezone(_UTC)
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    if value.microsecond % 1000:
        text += f".{value.microsecond:06d}"
    elif value.microsecond:
        text += f".{value.microsecond // 1000:03d}"
    return f'ISODate("{text}Z")'


def format_float(value: float) -> str:
    """A double as HQL reads it back as a double: ``2.5``, ``1e+300``, ``NaN``, ``-Infinity``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)  # always has a '.' or an exponent


def regex_flags(flags: Any) -> str:
    """A regular expression's flags as BSON's letters (``"im"``), from letters or Python's ``re`` bits."""
    if isinstance(flags, str):
        return flags
    return "".join(letter for bit, letter in _REGEX_FLAGS if flags & bit)


def _bytes(data: bytes, subtype: int, bytes_shown: int | None) -> str:
    if bytes_shown is not None and len(data) > bytes_shown:
        return f"BinData({subtype}, <{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}>)"
    return f'BinData({subtype}, "{base64.b64encode(data).decode()}")'


def _scalar(value: Any, bytes_shown: int | None) -> str | None:
    """The text of a value that is not a document or an array; None for those."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Int64):
        return f"int64({int(value)})"
    if isinstance(value, int):
        # Beyond 64 bits BSON has no integer: such a Python int is stored as a Decimal128.
        return str(value) if _INT64_MIN <= value <= _INT64_MAX else f'Decimal128("{value}")'
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, Code):  # a str subclass: before str, or it would print as a plain string
        if value.scope is None:
            return f"Code({quote(str(value))})"
        return f"Code({quote(str(value))}, {render(value.scope, bytes_shown=bytes_shown)})"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, datetime.datetime):
        return format_date(value)
    if isinstance(value, Binary):
        return _bytes(bytes(value), value.subtype, bytes_shown)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _bytes(bytes(value), 0, bytes_shown)
    if isinstance(value, uuid.UUID):
        return f'UUID("{value}")'
    if isinstance(value, ObjectId):
        return f'ObjectId("{value}")'
    if isinstance(value, Decimal128):
        return f'Decimal128("{value}")'
    if isinstance(value, Timestamp):
        return f"Timestamp({value.time}, {value.inc})"
    if isinstance(value, re.Pattern):
        value = Regex.from_native(value)
    if isinstance(value, Regex):
        return f"Regex({quote(value.pattern)}, {quote(regex_flags(value.flags))})"
    if isinstance(value, MinKey):
        return "MinKey()"
    if isinstance(value, MaxKey):
        return "MaxKey()"
    if isinstance(value, datetime.date):  # a date without a time: its midnight in UTC
        return format_date(datetime.datetime(value.year, value.month, value.day, tzinfo=_UTC))
    return None


def render(value: Any, *, width: int | None = None, indent: int = 0, bytes_shown: int | None = None) -> str:
    """``value`` in HQL literal syntax, such as ``{Author: "Bob", At: ISODate("...")}``.

    A document or array wider than ``width`` is broken over lines, two spaces per level
    (``None``, the default, keeps it on one line); ``indent`` is the column it starts at.
    Bytes longer than ``bytes_shown`` are written as a summary, which does not read back
    (``None`` writes all bytes).
    """
    text = _scalar(value, bytes_shown)
    if text is not None:
        return text
    if isinstance(value, DBRef):  # BSON reads {$ref, $id} back as a DBRef: write the document it is
        value = value.as_doc()
    if isinstance(value, Mapping):
        items = [(format_key(k), v) for k, v in value.items()]
        open_, close = "{", "}"
    elif isinstance(value, (list, tuple)):
        items = [(None, v) for v in value]
        open_, close = "[", "]"
    else:
        return f"<{type(value).__name__} {value!r}>"
    if not items:
        return open_ + close

    def one(key, v, **kw):
        shown = render(v, bytes_shown=bytes_shown, **kw)
        return shown if key is None else f"{key}: {shown}"

    flat = open_ + ", ".join(one(k, v) for k, v in items) + close
    if width is None or indent + len(flat) <= width:
        return flat
    pad = "  " * (indent // 2 + 1)
    inner = [pad + one(k, v, width=width, indent=len(pad)) for k, v in items]
    return open_ + "\n" + ",\n".join(inner) + "\n" + "  " * (indent // 2) + close


def literal(value: Any) -> str:
    """The short one-line HQL text of a value, for error messages (long bytes as a summary)."""
    return render(value, bytes_shown=BYTES_SHOWN)
