"""HQL's value constructors and scalar literals: what ``ISODate("...")``, ``int64(5)`` or ``'it\\'s'`` mean.

The grammar (hql.lark) only knows that ``Name(args)`` is a constructor call; the table
:data:`CONSTRUCTORS` below says which names exist and what each builds. The renderer
(hoarddb/values/literal.py) writes every value back in a form this module reads, so a
printed document can be pasted into the shell again. Adding a constructor: one entry in
``CONSTRUCTORS``, and a case in ``values.literal._scalar`` for the type it builds.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from bson.binary import Binary
from bson.code import Code
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UTC = datetime.timezone.utc

#: Bare words a value may be, beside true, false and null.
BARE_VALUES = {"Infinity": float("inf"), "NaN": float("nan")}


class LiteralError(ValueError):
    """LiteralError is a literal that lexes and parses but whose value is not acceptable."""


# ---- scalars -------------------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0",
            "\\": "\\", "'": "'", '"': '"', "/": "/"}


def decode_string(raw: str) -> str:
    """The text of a quoted string token (``"a\\n"`` or ``'it\\'s'``), escapes resolved.

    Escapes: ``\\n \\t \\r \\b \\f \\v \\0 \\\\ \\' \\" \\/``, ``\\xHH`` and ``\\uHHHH`` (a
    surrogate pair of two ``\\u`` escapes makes one character). Any other escaped
    character stands for itself.
    """
    body = raw[1:-1]
    if "\\" not in body:
        return _no_lone_surrogate(body)
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in ("u", "x"):
            width = 4 if e == "u" else 2
            digits = body[i + 2:i + 2 + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise LiteralError(f"\\{e} needs {width} hex digits, got {digits!r}")
            code = int(digits, 16)
            i += 2 + width
            if 0xD800 <= code < 0xDC00 and body[i:i + 2] == "\\u":
                low = body[i + 2:i + 6]
                if len(low) == 4 and all(d in "0123456789abcdefABCDEF" for d in low) and 0xDC00 <= int(low, 16) < 0xE000:
                    code = 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)
                    i += 6
            out.append(chr(code))
        else:
            out.append(_ESCAPES.get(e, e))
            i += 2
    return _no_lone_surrogate("".join(out))


def _no_lone_surrogate(text: str) -> str:
    """``text``, refusing a UTF-16 surrogate left on its own: BSON strings are UTF-8, which cannot hold one."""
    for ch in text:
        if 0xD800 <= ord(ch) < 0xE000:
            raise LiteralError(
                f"\\u{ord(ch):04x} is half of a UTF-16 surrogate pair and is not a character on its own; "
                "write the pair (\\ud83d\\ude00) or the character itself"
            )
    return text


def decode_number(text: str, negative: bool = False) -> int | float:
    """The value of a NUMBER token: an int (within int64) or a float (with ``.`` or an exponent)."""
    if text[:2].lower() == "0x":
        value: int | float = int(text, 16)
    elif any(c in text for c in ".eE"):
        value = float(text)
        if value in (float("inf"), float("-inf")):
            raise LiteralError(
                f"number {'-' if negative else ''}{text} is beyond a double's range (about 1.8e308); "
                'write Infinity if you mean it, or a Decimal128("...")'
            )
    else:
        value = int(text)
    if negative:
        value = -value
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise LiteralError(
            f"integer {value} is outside the 64-bit range [{INT64_MIN}, {INT64_MAX}]; "
            'write it as a double (1e20) or a Decimal128("...")'
        )
    return value


# ---- constructors --------------------------------------------------------------------

def now() -> datetime.datetime:
    """The current time in UTC, at the millisecond precision BSON keeps."""
    t = datetime.datetime.now(UTC)
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def parse_date(text: str) -> datetime.datetime:
    """A timezone-aware UTC datetime from ISO 8601 text; without an offset the time is UTC."""
    if not isinstance(text, str):
        raise LiteralError(f'ISODate takes a string such as "2026-09-29T10:00:00Z", got {text!r}')
    try:
        value = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise LiteralError(
            f'{text!r} is not an ISO 8601 date; write it as "2026-09-29", "2026-09-29T10:00:00Z" '
            'or "2026-09-29T12:00:00.123+02:00"'
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:00-05:00 is after the last datetime Python holds
        raise LiteralError(f"{text!r} is outside the dates hoardDB holds (years 1 to 9999 in UTC)") from None


def _integer(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip(), 0)
        except ValueError:
            raise LiteralError(f"{name} takes an integer, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise LiteralError(f"{name} takes an integer, got {value!r}")
    if not low <= value <= high:
        raise LiteralError(f"{name}({value}) is outside [{low}, {high}]")
    return int(value)


def _double(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise LiteralError(f"double takes a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise LiteralError(f"double takes a number, got {value!r}") from None


def _string(name: str, value: Any, example: str) -> str:
    if not isinstance(value, str):
        raise LiteralError(f"{name} takes a string such as {example}, got {value!r}")
    return value


def _object_id(*args: Any) -> ObjectId:
    if not args:
        return ObjectId()
    text = _string("ObjectId", args[0], '"65f0c0ffee0123456789abcd"')
    if not ObjectId.is_valid(text):
        raise LiteralError(f"ObjectId needs 24 hex digits, got {text!r}")
    return ObjectId(text)


def _decimal(value: Any) -> Decimal128:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = repr(value)
    text = _string("Decimal128", value, '"12.50"')
    try:
        return Decimal128(text)
    except Exception:
        raise LiteralError(f"{text!r} is not a decimal number") from None


def _uuid(*args: Any) -> uuid.UUID:
    if not args:
        return uuid.uuid4()
    text = _string("UUID", args[0], '"0192a3b4-c5d6-7890-abcd-ef12345678a1"')
    try:
        return uuid.UUID(text)
    except ValueError:
        raise LiteralError(f"{text!r} is not a UUID (32 hex digits, dashes optional)") from None


def _bindata(subtype: Any, data: Any) -> bytes | Binary:
    subtype = _integer("BinData's subtype", subtype, 0, 255)
    text = _string("BinData", data, '"aGVsbG8="')
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise LiteralError(f"BinData's data must be base64, got {text[:40]!r}") from None
    return raw if subtype == 0 else Binary(raw, subtype)


def _timestamp(t: Any, i: Any) -> Timestamp:
    return Timestamp(_integer("Timestamp's time", t, 0, 2**32 - 1), _integer("Timestamp's increment", i, 0, 2**32 - 1))


#: The flag letters a BSON regular expression may carry.
REGEX_FLAGS = "ilmsux"


def _regex(pattern: Any, flags: Any = "") -> Regex:
    flags = _string("Regex's flags", flags, '"i"')
    unknown = sorted(set(flags) - set(REGEX_FLAGS))
    if unknown:
        raise LiteralError(f"Regex flag(s) {''.join(unknown)!r} unknown; accepted: {', '.join(REGEX_FLAGS)}")
    return Regex(_string("Regex", pattern, '"^ab+c"'), flags)


def _code(code: Any, scope: Any = None) -> Code:
    text = _string("Code", code, '"function () { return 1 }"')
    if scope is not None and not isinstance(scope, dict):
        raise LiteralError(f"Code's scope must be a document such as {{x: 1}}, got {scope!r}")
    return Code(text, scope)


@dataclass(frozen=True)
class Constructor:
    """Constructor is one ``Name(args)`` form: its arity, what it builds, and an example."""

    name: str
    arity: tuple  # (fewest, most) arguments
    build: Callable[..., Any]
    example: str
    summary: str


_TABLE = [
    Constructor("ISODate", (0, 1), lambda *a: parse_date(a[0]) if a else now(), 'ISODate("2026-09-29T10:00:00Z")',
                "a date (UTC); ISODate() is now"),
    Constructor("Date", (0, 1), lambda *a: parse_date(a[0]) if a else now(), 'Date("2026-09-29")', "same as ISODate"),
    Constructor("now", (0, 0), now, "now()", "the current date and time (UTC, milliseconds)"),
    Constructor("int32", (1, 1), lambda v: _integer("int32", v, INT32_MIN, INT32_MAX), "int32(30)",
                "a 32-bit integer"),
    Constructor("NumberInt", (1, 1), lambda v: _integer("NumberInt", v, INT32_MIN, INT32_MAX), "NumberInt(30)",
                "same as int32"),
    Constructor("int64", (1, 1), lambda v: Int64(_integer("int64", v, INT64_MIN, INT64_MAX)), "int64(30)",
                "a 64-bit integer, kept 64-bit in BSON"),
    Constructor("NumberLong", (1, 1), lambda v: Int64(_integer("NumberLong", v, INT64_MIN, INT64_MAX)),
                "NumberLong(30)", "same as int64"),
    Constructor("double", (1, 1), _double, "double(30)", "a 64-bit float, even for a whole number"),
    Constructor("ObjectId", (0, 1), _object_id, 'ObjectId("65f0c0ffee0123456789abcd")',
                "a 12-byte object id; ObjectId() makes a new one"),
    Constructor("Decimal128", (1, 1), _decimal, 'Decimal128("12.50")', "a 128-bit decimal"),
    Constructor("NumberDecimal", (1, 1), _decimal, 'NumberDecimal("12.50")', "same as Decimal128"),
    Constructor("UUID", (0, 1), _uuid, 'UUID("0192a3b4-c5d6-7890-abcd-ef12345678a1")',
                "a UUID; UUID() makes a random one"),
    Constructor("BinData", (2, 2), _bindata, 'BinData(0, "aGVsbG8=")', "bytes: a BSON binary subtype and base64"),
    Constructor("Timestamp", (2, 2), _timestamp, "Timestamp(1727604000, 1)", "a BSON timestamp (seconds, increment)"),
    Constructor("Regex", (1, 2), _regex, 'Regex("^ab+c", "i")', "a BSON regular expression"),
    Constructor("Code", (1, 2), _code, 'Code("function () { return 1 }")',
                "BSON JavaScript code, with an optional scope document: Code(\"x\", {x: 1})"),
    Constructor("MinKey", (0, 0), MinKey, "MinKey()", "the value below every other"),
    Constructor("MaxKey", (0, 0), MaxKey, "MaxKey()", "the value above every other"),
]

#: Every constructor by its name, lower-cased: names match case-insensitively.
CONSTRUCTORS: dict[str, Constructor] = {c.name.lower(): c for c in _TABLE}


def construct(name: str, args: list) -> Any:
    """The value ``name(*args)`` builds; raises LiteralError naming the known constructors."""
    c = CONSTRUCTORS.get(name.lower())
    if c is None:
        known = ", ".join(x.name for x in _TABLE)
        raise LiteralError(f"unknown value constructor {name}(); known: {known}")
    low, high = c.arity
    if not low <= len(args) <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise LiteralError(f"{c.name} takes {want} argument(s), got {len(args)}: {c.example}")
    return c.build(*args)
