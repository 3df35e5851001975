"""The BSON codec every layer uses: one set of codec options, so a value reads back as it was written."""

from __future__ import annotations

import datetime
import re
import uuid

import bson
import bson.int64
import bson.errors
from bson.dbref import DBRef
from bson.objectid import ObjectId
from bson.codec_options import CodecOptions, UuidRepresentation
from bson.raw_bson import RawBSONDocument

from ..errors import BadValueError

#: Dates come back timezone-aware in UTC; ``uuid.UUID`` is stored as binary subtype 4.
CODEC_OPTIONS = CodecOptions(
    document_class=dict,
    tz_aware=True,
    tzinfo=datetime.timezone.utc,
    uuid_representation=UuidRepresentation.STANDARD,
)

#: The same, for read-only RawBSONDocument views of stored bytes (nested documents stay raw).
RAW_CODEC_OPTIONS = CODEC_OPTIONS.with_options(document_class=RawBSONDocument)

#: The largest document hoardDB stores, as MongoDB: 16 MiB of BSON.
MAX_DOCUMENT_SIZE = 16 * 1024 * 1024


def encode(doc) -> bytes:
    """BSON bytes of a mapping (raises ``bson.errors.InvalidDocument`` on values BSON cannot hold)."""
    return _dict_to_bson(doc, False, ENCODE_OPTIONS)


def encode_checked(doc, what: str = "the document", stored: bool = False) -> bytes:
    """:func:`encode`, refusing a value BSON cannot hold with BadValueError (saying which).

    ``stored``: ``doc`` is a document to keep (not a filter, an update or a message), whose
    field names must not begin with ``$`` or hold a ``.`` at any depth (MongoDB's rule): a
    filter reads ``a.b`` as a path into ``a``, so no filter could ever match such a field.
    pymongo's C encoder checks the names as it writes them (``check_keys``).
    """
    try:
        return _dict_to_bson(doc, stored, ENCODE_OPTIONS)  # (encode's body: one call less on every write)
    except bson.errors.InvalidDocument as exc:
        name = _BAD_NAME.search(str(exc)) if stored else None
        if name is not None and name.group(1) in ("$ref", "$id", "$db"):
            refs = _dbrefs(doc)  # {$ref, $id, $db?}, as a shell writes a DBRef: MongoDB's one use of $ names
            if refs is not doc:
                return encode_checked(refs, what, stored)
        if name is not None:
            raise BadValueError(
                f"{what} has a field named {name.group(1)!r}: field names may not begin with '$' or hold a '.' "
                "(a filter reads a.b as the field b inside a, and $ begins an operator); nest the value "
                "({a: {b: 1}} for a.b) or rename the field") from None
        raise BadValueError(f"{what} cannot be stored as BSON: {exc}") from None
    except OverflowError as exc:
        if "date value out of range" in str(exc):
            raise BadValueError(
                f"{what} holds a date out of range: a date must fall within the years 1 to 9999 in UTC (a datetime "
                "with a time zone is stored in UTC, which can carry it past 9999)") from None
        raise BadValueError(f"{what} holds an integer BSON cannot store (64-bit at most): {exc}") from None
    except UnicodeEncodeError as exc:  # a str holding a lone UTF-16 surrogate, which UTF-8 cannot encode
        raise BadValueError(
            f"{what} holds a string BSON cannot store: {exc.object[exc.start:exc.end]!r} is a lone UTF-16 "
            "surrogate, not a character"
        ) from None


def _dbrefs(value):
    """``value`` with every document shaped as a DBRef (``$ref`` a string and ``$id`` first,
    ``$db`` a string next if present) made a ``bson.DBRef``, which BSON writes with those names;
    ``value`` itself when none is."""
    if isinstance(value, dict):
        keys = list(value)
        if keys[:2] == ["$ref", "$id"] and isinstance(value["$ref"], str):
            db = value.get("$db") if keys[2:3] == ["$db"] else None
            if db is None or isinstance(db, str):
                rest = {k: _dbrefs(v) for k, v in value.items() if k not in ("$ref", "$id", "$db")}
                try:  # (a DBRef's other fields are written unchecked: check them as a document's)
                    _dict_to_bson({"id": value["$id"]}, True, ENCODE_OPTIONS)
                    _dict_to_bson(rest, True, ENCODE_OPTIONS)
                except bson.errors.InvalidDocument:
                    return value
                return DBRef(value["$ref"], value["$id"], db, **rest)
        changed = {k: _dbrefs(v) for k, v in value.items()}
        return changed if any(changed[k] is not value[k] for k in value) else value
    if isinstance(value, list):
        changed = [_dbrefs(v) for v in value]
        return changed if any(a is not b for a, b in zip(changed, value)) else value
    return value


#: The field name in pymongo's refusal of a name (``key 'a.b' must not contain '.'``).
_BAD_NAME = re.compile(r"key '(.*)' must not (?:contain '\.'|start with '\$')", re.S)


def decode(data) -> dict:
    """The document a BSON byte string holds (raises one of :data:`DECODE_ERRORS` on bytes
    that are not BSON)."""
    return _bson_to_dict(data, CODEC_OPTIONS)


#: What decoding bytes that are not a BSON document raises (stored bytes damaged on disk,
#: for a reader of files; the wire catches more, since its bytes come from anyone).
DECODE_ERRORS = (bson.errors.BSONError, UnicodeDecodeError)


# bson.encode/decode check their arguments in Python before calling these C functions;
# ours are always a mapping and bytes with fixed options, so the hot paths call them
# directly (a third of a document read's cost). Fall back where a bson lacks them.
try:
    from bson import _bson_to_dict, _dict_to_bson
except ImportError:  # pragma: no cover - other bson builds
    def _bson_to_dict(data, options):
        return bson.decode(data, codec_options=options)

    def _dict_to_bson(doc, check_keys, options):
        return bson.encode(doc, check_keys, codec_options=options)


def _encode_options():
    """The options :func:`encode` hands pymongo's C encoder: :data:`CODEC_OPTIONS` with
    ``None`` for its document class, when that encodes byte for byte the same.

    The C encoder reads its options tuple again on every call (``convert_codec_options``
    in bson/_cbsonmodule.c: the seven fields, the type registry's three maps, and whether
    the document class has a ``_type_marker``). On Python 3.11 asking ``dict`` that makes
    the class lookup raise an AttributeError with a formatted message, then clear it:
    ~2,100 of the ~4,000 instructions the options cost, on every document encoded. The
    document class is only used to decode (the encoder writes what each value is; of the
    options it reads the UUID representation and the type registry), and ``None`` answers
    ``_type_marker`` without raising. Checked here once on a document of every kind the
    encoder treats by an option; anything else (another bson, the pure Python encoder,
    which wants a real CodecOptions) keeps :data:`CODEC_OPTIONS`.
    tests/values/test_codec.py compares the two on generated documents.
    """
    fast = (None, *CODEC_OPTIONS[1:])
    sample = {"_id_": "k", "u": uuid.UUID(int=7), "d": datetime.datetime(2020, 1, 2, tzinfo=datetime.timezone.utc),
              "n": {"a": [1, 2.5, None, True, b"x", bson.int64.Int64(3)]}}
    try:
        if _dict_to_bson(sample, False, fast) == _dict_to_bson(sample, False, CODEC_OPTIONS):
            return fast
    except Exception:  # pragma: no cover - a bson that wants a CodecOptions
        pass
    return CODEC_OPTIONS  # pragma: no cover


#: The options :func:`encode` and :func:`encode_checked` (every message too) hand pymongo's C
#: encoder: for encoding only, never for decoding (see _encode_options).
ENCODE_OPTIONS = _encode_options()


def decode_all(data) -> list[dict]:
    """Every document of concatenated BSON."""
    return bson.decode_all(data, codec_options=CODEC_OPTIONS)


# -- raw BSON: reading one top-level field, and adding one, without decoding the rest -------------
#
# A BSON document is  int32 total length | element* | 0x00 ; an element is
#     type byte | name (cstring) | value
# and the value's size follows from its type. A loader that only needs the key of a
# 1 KB document reads it this way in a microsecond, instead of decoding it all.

_FIXED = {0x01: 8, 0x06: 0, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8, 0x13: 16,
          0x7F: 0, 0xFF: 0}
_MISSING = object()


def _value_end(raw, pos: int, kind: int) -> int:
    if kind in _FIXED:
        return pos + _FIXED[kind]
    if kind in (0x02, 0x0D, 0x0E):  # string, JS code, symbol: int32 length + bytes
        return pos + 4 + int.from_bytes(raw[pos:pos + 4], "little")
    if kind in (0x03, 0x04, 0x0F):  # document, array, code with scope: int32 total length
        return pos + int.from_bytes(raw[pos:pos + 4], "little")
    if kind == 0x05:  # binary: int32 length + subtype + bytes
        return pos + 5 + int.from_bytes(raw[pos:pos + 4], "little")
    if kind == 0x0B:  # regex: two cstrings
        pos = raw.index(b"\x00", pos) + 1
        return raw.index(b"\x00", pos) + 1
    if kind == 0x0C:  # DBPointer: string + 12 bytes
        return pos + 4 + int.from_bytes(raw[pos:pos + 4], "little") + 12
    raise bson.errors.InvalidBSON(f"unknown BSON element type {kind:#x}")


def _element(raw: bytes, name: str) -> tuple[int, int, int] | None:
    """``(start, value start, end)`` of the top-level element ``name`` of raw BSON, or None."""
    want = name.encode()
    if raw.find(want + b"\x00", 5) < 0:  # not even as bytes anywhere: certainly not a field (fast, in C)
        return None
    pos, end = 4, len(raw) - 1
    while pos < end:
        kind = raw[pos]
        name_end = raw.index(b"\x00", pos + 1)
        value_end = _value_end(raw, name_end + 1, kind)
        if raw[pos + 1:name_end] == want:
            return pos, name_end + 1, value_end
        pos = value_end
    return None


def raw_get(raw: bytes, name: str, default=_MISSING):
    """The value of the top-level field ``name`` of raw BSON, decoding only that field."""
    want = name.encode()
    if raw[5:6 + len(want)] == want + b"\x00":  # the first field: ObjectId and strings read directly
        kind, pos = raw[4], 6 + len(want)
        if kind == 0x07:
            return ObjectId(raw[pos:pos + 12])
        if kind == 0x02:
            n = int.from_bytes(raw[pos:pos + 4], "little")
            return raw[pos + 4:pos + 3 + n].decode("utf-8", "surrogatepass")
    found = _element(raw, name)
    if found is None:
        if default is _MISSING:
            raise KeyError(name)
        return default
    start, _, end = found
    element = raw[start:end]
    return decode((len(element) + 5).to_bytes(4, "little") + element + b"\x00")[name]


def raw_with(raw: bytes, name: str, value) -> bytes:
    """Raw BSON with the field ``name = value`` put first (the rest untouched, byte for byte)."""
    element = encode({name: value})[4:-1]
    body = raw[4:]
    return (4 + len(element) + len(body)).to_bytes(4, "little") + element + body


def raw_alias(raw: bytes, name: str, alias: str) -> bytes | None:
    """Raw BSON with a copy of field ``name`` put first under the name ``alias`` (the value's bytes
    copied, not decoded); None when there is no field ``name``."""
    found = _element(raw, name)
    if found is None:
        return None
    start, value_start, end = found
    element = raw[start:start + 1] + alias.encode() + b"\x00" + raw[value_start:end]
    body = raw[4:]
    return (4 + len(element) + len(body)).to_bytes(4, "little") + element + body


def raw_to_front(raw: bytes, *names: str) -> bytes:
    """Raw BSON with the top-level fields ``names`` (those present) moved to the front in this order,
    the rest untouched, byte for byte, in its order.

    ``raw_to_front(raw, "_id", "_id_")`` lays a document out as an encoder writes the same
    decoded document once ``_id_`` is put first (BSON encoders then move ``_id`` before it).
    """
    found = sorted(f for f in (_element(raw, name) for name in names) if f is not None)
    if not found:
        return raw
    front = {raw[start + 1:value_start - 1]: raw[start:end] for start, value_start, end in found}
    head = b"".join(front.get(name.encode(), b"") for name in names)
    parts, pos = [], 4
    for start, _, end in found:
        parts.append(raw[pos:start])
        pos = end
    parts.append(raw[pos:])
    body = head + b"".join(parts)
    return (4 + len(body)).to_bytes(4, "little") + body
