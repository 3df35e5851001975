"""One value written as a user would type it in HQL, for messages: "u1", 30, null, ISODate("...")."""

from __future__ import annotations

import base64
import datetime
import math
import re
import uuid

from bson.binary import Binary
from bson.code import Code
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

#: Bytes longer than this are shown as a size, not in full: a message stays short.
BYTES_SHOWN = 64

_BARE_KEY = re.compile(r"(?:\$|[^\W\d])[\w$]*(?:\.(?:\$|[^\W\d])[\w$]*)*\Z")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote(text: str) -> str:
    """``text`` as a double-quoted HQL string (the shell's printer writes strings so too)."""
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


def _bytes(data: bytes, subtype: int) -> str:
    if len(data) > BYTES_SHOWN:
        return f"BinData({subtype}, <{len(data)} bytes>)"
    return f'BinData({subtype}, "{base64.b64encode(data).decode()}")'


def literal(value) -> str:
    """The HQL literal text of a value (short, for error messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Code):  # a str subclass
        return f"Code({quote(str(value))})" if value.scope is None else f"Code({quote(str(value))}, {literal(value.scope)})"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, Int64):
        return f"int64({int(value)})"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        text = value.astimezone(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return f'ISODate("{text}")'
    if isinstance(value, ObjectId):
        return f'ObjectId("{value}")'
    if isinstance(value, Decimal128):
        return f'Decimal128("{value}")'
    if isinstance(value, uuid.UUID):
        return f'UUID("{value}")'
    if isinstance(value, Binary):
        return _bytes(bytes(value), value.subtype)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _bytes(bytes(value), 0)
    if isinstance(value, Timestamp):
        return f"Timestamp({value.time}, {value.inc})"
    if isinstance(value, (Regex, re.Pattern)):
        rx = Regex.from_native(value) if isinstance(value, re.Pattern) else value
        flags = rx.flags if isinstance(rx.flags, str) else "".join(
            letter for letter, bit in (("i", re.I), ("l", re.L), ("m", re.M), ("s", re.S), ("u", re.U), ("x", re.X))
            if rx.flags & bit)
        return f"Regex({quote(rx.pattern)}, {quote(flags)})"
    if isinstance(value, MinKey):
        return "MinKey()"
    if isinstance(value, MaxKey):
        return "MaxKey()"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{format_key(k)}: {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)
