"""Order-preserving, self-delimiting byte keys for BSON values: bytes sort exactly as compare() orders the values.

Byte layout. Every encoding starts with a tag byte, in type order; containers end with 0x00,
which is below every tag, so a shorter container sorts first.

    type          tag   body
    ------------  ----  -------------------------------------------------------------------
    MinKey        0x0A  (none)
    null          0x14  (none)
    number        0x1E  F(8) M [X]   one encoding for int, Int64, float, Decimal128
    string        0x28  S            UTF-8, 0x00 escaped as 0x00 0xFF, ended by 0x00 0x01
    object        0x32  { T name:S body }* 0x00   per field: the tag of its value, its
                                     name (escaped as a string), the value's body
    array         0x3C  { key }* 0x00             each element a full key (tag + body)
    binary        0x46  len(4, big-endian) subtype(1) data   (MongoDB: length, subtype, data)
    ObjectId      0x50  12 bytes
    bool          0x5A  0x00 false / 0x01 true
    date          0x64  ms since epoch + 2**63, 8 bytes big-endian
    timestamp     0x6E  time(4) inc(4), big-endian unsigned
    regex         0x78  pattern:S flags:S
    code          0x82  code:S
    code w/ scope 0x8C  code:S scope as an object body
    MaxKey        0xF0  (none)

Numbers. F is the sortable float64 of the value's nearest double ``f`` (round to nearest
even; beyond the double range a finite value is clamped to +-DBL_MAX): positive doubles
get their sign bit flipped, negative ones all their bits, -0.0 counts as 0.0, and every
NaN is eight 0x00 bytes, below -inf. M says where the exact value ``v`` lies against ``f``:

    0x01  v < f   then X = the exact decimal value of v
    0x02  v == f  nothing follows (every float, every int up to 2**53, every equal value)
    0x03  v > f   then X = the exact decimal value of v

X is sign(1: 0x01 negative, 0x02 positive), then for |v| = 0.d1d2d3... * 10**(E+1) with
no trailing zeros: E + 2**31 as 4 bytes big-endian, the digits in pairs (one byte
1 + 10*a + b each, an odd last digit padded with 0), and a 0x00 terminator. For a negative
v everything after the sign byte is bit-inverted (the terminator becomes 0xFF), so larger
magnitudes sort first. So 30, 30.0, Int64(30) and Decimal128("30") are all
``1E C0 3E 00 00 00 00 00 00 02``, and only values that are not exactly a double (ints
beyond 2**53, most Decimal128 values such as 19.99) pay for X.
"""

from __future__ import annotations

import datetime
import decimal
import math
import struct
import uuid
from collections.abc import Iterable

from bson.binary import Binary
from bson.code import Code
from bson.decimal128 import Decimal128
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

from hoarddb.errors import BadValueError

from .order import (
    ARRAY,
    BINARY,
    BOOL,
    CODE,
    CODE_W_SCOPE,
    DATE,
    MAXKEY,
    MINKEY,
    NULL,
    NUMBER,
    OBJECT,
    OBJECTID,
    REGEX,
    STRING,
    TIMESTAMP,
    binary_parts,
    code_parts,
    date_ms,
    number_value,
    object_items,
    regex_parts,
    type_rank,
)

TAG_END = 0x00
TAGS = {
    MINKEY: 0x0A,
    NULL: 0x14,
    NUMBER: 0x1E,
    STRING: 0x28,
    OBJECT: 0x32,
    ARRAY: 0x3C,
    BINARY: 0x46,
    OBJECTID: 0x50,
    BOOL: 0x5A,
    DATE: 0x64,
    TIMESTAMP: 0x6E,
    REGEX: 0x78,
    CODE: 0x82,
    CODE_W_SCOPE: 0x8C,
    MAXKEY: 0xF0,
}
_RANK_BY_TAG = {tag: rank for rank, tag in TAGS.items()}
_STRING_TAG = bytes([TAGS[STRING]])
_OBJECTID_TAG = bytes([TAGS[OBJECTID]])

_BELOW, _EXACT, _ABOVE = 0x01, 0x02, 0x03
_NEG, _POS = 0x01, 0x02
_DBL_MAX = 1.7976931348623157e308
_SIGN_BIT = 1 << 63
_ALL_BITS = (1 << 64) - 1
_EXP_BIAS = 1 << 31
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_D = struct.Struct(">d")
_Q = struct.Struct(">Q")
_I = struct.Struct(">I")
_EXPONENT = struct.Struct(">I")
_INVERT = bytes(255 - i for i in range(256))


# ---------------------------------------------------------------------------
# encoding


def encode_key(value) -> bytes:
    """The order-preserving, self-delimiting key bytes of one BSON value."""
    if type(value) is str:  # the common keys: skip the general path (and the escaping, when there is no NUL)
        if "\x00" not in value:
            return _STRING_TAG + value.encode("utf-8", "surrogatepass") + b"\x00\x01"
        return _STRING_TAG + value.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff") + b"\x00\x01"
    if type(value) is ObjectId:
        return _OBJECTID_TAG + value.binary
    out = bytearray()
    rank = type_rank(value)
    out.append(TAGS[rank])
    _body(rank, value, out)
    return bytes(out)


def encode_keys(values: Iterable) -> bytes:
    """The key of a tuple of values: the concatenation of their keys, which sorts like the tuple."""
    out = bytearray()
    for value in values:
        rank = type_rank(value)
        out.append(TAGS[rank])
        _body(rank, value, out)
    return bytes(out)


def _string(text: str, out: bytearray) -> None:
    out += text.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff")
    out += b"\x00\x01"


def _object_body(items, out: bytearray) -> None:
    for name, value in items:
        rank = type_rank(value)
        out.append(TAGS[rank])
        _string(name, out)
        _body(rank, value, out)
    out.append(TAG_END)


def _body(rank: int, value, out: bytearray) -> None:
    if rank == NUMBER:
        _number(value, out)
    elif rank == STRING:
        _string(value, out)
    elif rank == OBJECT:
        _object_body(object_items(value), out)
    elif rank == ARRAY:
        for element in value:
            r = type_rank(element)
            out.append(TAGS[r])
            _body(r, element, out)
        out.append(TAG_END)
    elif rank == BINARY:
        subtype, data = binary_parts(value)
        out += _I.pack(len(data))
        out.append(subtype)
        out += data
    elif rank == OBJECTID:
        out += value.binary
    elif rank == BOOL:
        out.append(1 if value else 0)
    elif rank == DATE:
        out += _Q.pack(date_ms(value) + _SIGN_BIT)
    elif rank == TIMESTAMP:
        out += _I.pack(value.time) + _I.pack(value.inc)
    elif rank == REGEX:
        pattern, flags = regex_parts(value)
        _string(pattern, out)
        _string(flags, out)
    elif rank == CODE:
        _string(str(value), out)
    elif rank == CODE_W_SCOPE:
        code, scope = code_parts(value)
        _string(code, out)
        _object_body(object_items(scope), out)
    # MinKey, null, MaxKey: the tag says it all


def _sortable_double(f: float) -> bytes:
    if f != f:
        return b"\x00" * 8
    if f == 0.0:
        f = 0.0
    bits = _Q.unpack(_D.pack(f))[0]
    bits ^= _ALL_BITS if bits & _SIGN_BIT else _SIGN_BIT
    return _Q.pack(bits)


def _number(value, out: bytearray) -> None:
    v = number_value(value)
    if isinstance(v, float):
        out += _sortable_double(v)
        out.append(_EXACT)
        return
    if isinstance(v, int):
        try:
            f = float(v)
        except OverflowError:
            f = _DBL_MAX if v > 0 else -_DBL_MAX
    else:  # decimal.Decimal, finite or infinite (NaN became a float above)
        f = float(v)
        if math.isinf(f) and v.is_finite():
            f = math.copysign(_DBL_MAX, f)
    out += _sortable_double(f)
    if v == f:
        out.append(_EXACT)
        return
    out.append(_BELOW if v < f else _ABOVE)
    _exact(v, out)


def _digits_exponent(v) -> tuple[int, str, int]:
    """(sign 0/1, significant digits without trailing zeros, adjusted exponent E) of a non-zero exact number."""
    if isinstance(v, int) and v.bit_length() < 10_000:  # str() of a huge int is refused by Python
        sign = 1 if v < 0 else 0
        text = str(-v if sign else v)
        return sign, text.rstrip("0"), len(text) - 1
    sign, digits, exponent = decimal.Decimal(v).as_tuple()
    text = "".join(map(str, digits)).lstrip("0")
    adjusted = exponent + len(text) - 1
    return sign, text.rstrip("0"), adjusted


def _exact(v, out: bytearray) -> None:
    sign, digits, adjusted = _digits_exponent(v)
    if not 0 <= adjusted + _EXP_BIAS < (1 << 32):
        raise BadValueError("a number's exponent is out of range for a key; accepted: |exponent| < 2**31")
    body = bytearray(_EXPONENT.pack(adjusted + _EXP_BIAS))
    if len(digits) % 2:
        digits += "0"
    body += bytes(1 + int(digits[i:i + 2]) for i in range(0, len(digits), 2))
    body.append(0)
    if sign:
        out.append(_NEG)
        out += bytes(body).translate(_INVERT)
    else:
        out.append(_POS)
        out += body


# ---------------------------------------------------------------------------
# skipping


def key_end(data, pos: int = 0) -> int:
    """The offset just past the one key that starts at ``pos`` in ``data`` (to split a tuple key)."""
    if not isinstance(data, bytes):
        data = bytes(data)
    try:
        end = _skip(data, pos)
    except (IndexError, KeyError, ValueError, struct.error):
        raise BadValueError(f"not a hoardDB key: truncated or malformed at byte {pos}") from None
    if end > len(data):
        raise BadValueError(f"not a hoardDB key: truncated at byte {pos}")
    return end


def _skip_string(data, pos: int) -> int:
    while True:
        zero = data.index(b"\x00", pos)
        marker = data[zero + 1]
        if marker == 0x01:
            return zero + 2
        if marker != 0xFF:
            raise ValueError("bad string escape")
        pos = zero + 2


def _skip_object_body(data, pos: int) -> int:
    while data[pos] != TAG_END:
        rank = _RANK_BY_TAG[data[pos]]
        pos = _skip_body(rank, data, _skip_string(data, pos + 1))
    return pos + 1


def _skip(data, pos: int) -> int:
    return _skip_body(_RANK_BY_TAG[data[pos]], data, pos + 1)


_FIXED_BODY = {MINKEY: 0, NULL: 0, MAXKEY: 0, BOOL: 1, OBJECTID: 12, DATE: 8, TIMESTAMP: 8}


def _skip_body(rank: int, data, pos: int) -> int:
    fixed = _FIXED_BODY.get(rank)
    if fixed is not None:
        return pos + fixed
    if rank == NUMBER:
        marker = data[pos + 8]
        if marker == _EXACT:
            return pos + 9
        sign = data[pos + 9]
        return data.index(b"\xff" if sign == _NEG else b"\x00", pos + 14) + 1
    if rank == STRING or rank == CODE:
        return _skip_string(data, pos)
    if rank == OBJECT:
        return _skip_object_body(data, pos)
    if rank == ARRAY:
        while data[pos] != TAG_END:
            pos = _skip(data, pos)
        return pos + 1
    if rank == BINARY:
        return pos + 5 + _I.unpack_from(data, pos)[0]
    if rank == REGEX:
        return _skip_string(data, _skip_string(data, pos))
    if rank == CODE_W_SCOPE:
        return _skip_object_body(data, _skip_string(data, pos))
    raise ValueError("unknown rank")


# ---------------------------------------------------------------------------
# decoding


def decode_key(data) -> object:
    """The value one key holds (equal to the encoded one, not always of the same Python type).

    Numbers come back as int when integral and within int64, else float, or Decimal128
    for a decimal that is not exactly a double; bytes of subtype 0 as bytes, subtype 4 as
    uuid.UUID. Raises BadValueError if ``data`` is not exactly one key.
    """
    data = bytes(data)
    value, pos = _decode(data, 0)
    if pos != len(data):
        raise BadValueError(f"key has {len(data) - pos} bytes after its value; use decode_keys for a tuple key")
    return value


def decode_keys(data) -> list:
    """The values of a concatenation of keys (the inverse of :func:`encode_keys`)."""
    data = bytes(data)
    values, pos = [], 0
    while pos < len(data):
        value, pos = _decode(data, pos)
        values.append(value)
    return values


def _decode(data: bytes, pos: int):
    try:
        tag = data[pos]
        rank = _RANK_BY_TAG[tag]
    except (IndexError, KeyError):
        raise BadValueError(f"not a hoardDB key: bad tag at byte {pos}") from None
    try:
        return _decode_body(rank, data, pos + 1)
    except (IndexError, ValueError, struct.error) as exc:
        if isinstance(exc, BadValueError):
            raise
        raise BadValueError(f"not a hoardDB key: truncated or malformed at byte {pos}") from None


def _decode_string(data: bytes, pos: int) -> tuple[str, int]:
    chunks = []
    while True:
        zero = data.index(b"\x00", pos)
        chunks.append(data[pos:zero])
        marker = data[zero + 1]
        if marker == 0x01:
            return b"\x00".join(chunks).decode("utf-8", "surrogatepass"), zero + 2
        if marker != 0xFF:
            raise ValueError("bad string escape")
        pos = zero + 2


def _decode_object(data: bytes, pos: int) -> tuple[dict, int]:
    doc = {}
    while data[pos] != TAG_END:
        rank = _RANK_BY_TAG[data[pos]]
        name, pos = _decode_string(data, pos + 1)
        doc[name], pos = _decode_body(rank, data, pos)
    return doc, pos + 1


def _decode_body(rank: int, data: bytes, pos: int):
    if rank == NUMBER:
        return _decode_number(data, pos)
    if rank == STRING:
        return _decode_string(data, pos)
    if rank == OBJECT:
        return _decode_object(data, pos)
    if rank == ARRAY:
        items = []
        while data[pos] != TAG_END:
            value, pos = _decode(data, pos)
            items.append(value)
        return items, pos + 1
    if rank == BINARY:
        (length,) = _I.unpack_from(data, pos)
        subtype = data[pos + 4]
        start = pos + 5
        raw = data[start:start + length]
        if len(raw) != length:
            raise ValueError("truncated binary")
        if subtype == 0:
            value = raw
        elif subtype == 4 and length == 16:
            value = uuid.UUID(bytes=raw)
        else:
            value = Binary(raw, subtype)
        return value, start + length
    if rank == OBJECTID:
        raw = data[pos:pos + 12]
        if len(raw) != 12:
            raise ValueError("truncated ObjectId")
        return ObjectId(raw), pos + 12
    if rank == BOOL:
        return bool(data[pos]), pos + 1
    if rank == DATE:
        (biased,) = _Q.unpack_from(data, pos)
        ms = biased - _SIGN_BIT
        try:
            value = _EPOCH + datetime.timedelta(milliseconds=ms)
        except OverflowError:
            from bson.datetime_ms import DatetimeMS

            value = DatetimeMS(ms)
        return value, pos + 8
    if rank == TIMESTAMP:
        time, inc = _I.unpack_from(data, pos)[0], _I.unpack_from(data, pos + 4)[0]
        return Timestamp(time, inc), pos + 8
    if rank == REGEX:
        pattern, pos = _decode_string(data, pos)
        flags, pos = _decode_string(data, pos)
        return Regex(pattern, flags), pos
    if rank == CODE:
        code, pos = _decode_string(data, pos)
        return Code(code), pos
    if rank == CODE_W_SCOPE:
        code, pos = _decode_string(data, pos)
        scope, pos = _decode_object(data, pos)
        return Code(code, scope), pos
    if rank == MINKEY:
        return MinKey(), pos
    if rank == MAXKEY:
        return MaxKey(), pos
    return None, pos


def _decode_double(raw: bytes) -> float:
    (bits,) = _Q.unpack(raw)
    if bits == 0:
        return float("nan")
    bits ^= _SIGN_BIT if bits & _SIGN_BIT else _ALL_BITS
    return _D.unpack(_Q.pack(bits))[0]


def _decode_number(data: bytes, pos: int):
    raw = data[pos:pos + 8]
    if len(raw) != 8:
        raise ValueError("truncated number")
    f = _decode_double(raw)
    marker = data[pos + 8]
    pos += 9
    if marker == _EXACT:
        if f == f and not math.isinf(f) and f.is_integer() and _INT64_MIN <= f <= _INT64_MAX and f != 2.0**63:
            return int(f), pos
        return f, pos
    if marker not in (_BELOW, _ABOVE):
        raise ValueError("bad number marker")
    sign = data[pos]
    if sign not in (_NEG, _POS):
        raise ValueError("bad number sign")
    end = data.index(b"\xff" if sign == _NEG else b"\x00", pos + 5)
    body = data[pos + 1:end + 1]
    if sign == _NEG:
        body = body.translate(_INVERT)
    adjusted = _EXPONENT.unpack_from(body, 0)[0] - _EXP_BIAS
    digits = "".join(f"{b - 1:02d}" for b in body[4:-1]).rstrip("0") or "0"
    exponent = adjusted - len(digits) + 1
    pos = end + 1
    dec = decimal.Decimal((1 if sign == _NEG else 0, tuple(map(int, digits)), exponent))
    if exponent >= 0 and _INT64_MIN <= dec <= _INT64_MAX:
        return int(dec), pos
    if len(digits) <= 34 and -6176 <= exponent <= 6111:
        return Decimal128(dec), pos
    if exponent >= 0:  # a Python int beyond what Decimal128 holds
        return int(dec), pos
    return float(dec), pos

