"""The total order of BSON values as MongoDB sorts them: type ranks, numbers compared by value, and compare()."""

from __future__ import annotations

import datetime
import decimal
import re
import uuid
from collections.abc import Mapping

from bson.binary import Binary
from bson.code import Code
from bson.datetime_ms import DatetimeMS
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

from hoarddb.errors import BadValueError

# Type ranks, lowest first: the order MongoDB sorts values of different types in.
MINKEY = 0
NULL = 1
NUMBER = 2
STRING = 3
OBJECT = 4
ARRAY = 5
BINARY = 6
OBJECTID = 7
BOOL = 8
DATE = 9
TIMESTAMP = 10
REGEX = 11
CODE = 12
CODE_W_SCOPE = 13
MAXKEY = 14

#: Rank -> a name for messages and docs.
RANK_NAMES = {
    MINKEY: "minKey", NULL: "null", NUMBER: "number", STRING: "string", OBJECT: "object",
    ARRAY: "array", BINARY: "binData", OBJECTID: "objectId", BOOL: "bool", DATE: "date",
    TIMESTAMP: "timestamp", REGEX: "regex", CODE: "javascript", CODE_W_SCOPE: "javascriptWithScope",
    MAXKEY: "maxKey",
}

_RANK_BY_TYPE: dict[type, int] = {
    type(None): NULL,
    bool: BOOL,
    int: NUMBER,
    Int64: NUMBER,
    float: NUMBER,
    Decimal128: NUMBER,
    decimal.Decimal: NUMBER,
    str: STRING,
    dict: OBJECT,
    DBRef: OBJECT,
    list: ARRAY,
    tuple: ARRAY,
    bytes: BINARY,
    bytearray: BINARY,
    memoryview: BINARY,
    Binary: BINARY,
    uuid.UUID: BINARY,
    ObjectId: OBJECTID,
    datetime.datetime: DATE,
    DatetimeMS: DATE,
    Timestamp: TIMESTAMP,
    Regex: REGEX,
    re.Pattern: REGEX,
    MinKey: MINKEY,
    MaxKey: MAXKEY,
}

_NAN = float("nan")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def type_rank(value) -> int:
    """The rank of a value's type in the BSON sort order (:data:`MINKEY` ... :data:`MAXKEY`).

    Raises BadValueError for a Python value BSON cannot hold.
    """
    rank = _RANK_BY_TYPE.get(type(value))
    if rank is not None:
        return rank
    if isinstance(value, Code):  # a str subclass: check first
        return CODE if value.scope is None else CODE_W_SCOPE
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, (int, float, Decimal128, decimal.Decimal)):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, (Mapping, DBRef)):
        return OBJECT
    if isinstance(value, (list, tuple)):
        return ARRAY
    if isinstance(value, (bytes, bytearray, memoryview, uuid.UUID)):
        return BINARY
    if isinstance(value, ObjectId):
        return OBJECTID
    if isinstance(value, (datetime.datetime, DatetimeMS)):
        return DATE
    if isinstance(value, Timestamp):
        return TIMESTAMP
    if isinstance(value, (Regex, re.Pattern)):
        return REGEX
    if isinstance(value, MinKey):
        return MINKEY
    if isinstance(value, MaxKey):
        return MAXKEY
    raise BadValueError(
        f"values of type {type(value).__name__} cannot be stored or compared; accepted: null, numbers "
        "(int, Int64, float, Decimal128), str, dict, list, bytes/Binary/UUID, ObjectId, bool, datetime, "
        "Timestamp, Regex, Code, MinKey, MaxKey"
    )


# ---------------------------------------------------------------------------
# Normal forms shared with keys.py


def number_value(value):
    """A number as a Python int, float or decimal.Decimal that compares exactly; every NaN becomes float NaN."""
    if isinstance(value, Decimal128):
        value = value.to_decimal()
    if isinstance(value, decimal.Decimal):
        return _NAN if value.is_nan() else value
    if isinstance(value, bool):  # not a number in BSON; callers check the rank first
        return int(value)
    return value


def is_nan(value) -> bool:
    """True for a float or Decimal128 NaN (any payload, quiet or signalling)."""
    if isinstance(value, float):
        return value != value
    if isinstance(value, Decimal128):
        return value.to_decimal().is_nan()
    if isinstance(value, decimal.Decimal):
        return value.is_nan()
    return False


def binary_parts(value) -> tuple[int, bytes]:
    """(subtype, data) of a binary value: bytes are subtype 0, a UUID is subtype 4."""
    if isinstance(value, Binary):
        return value.subtype, bytes(value)
    if isinstance(value, uuid.UUID):
        return 4, value.bytes
    return 0, bytes(value)


def date_ms(value) -> int:
    """Milliseconds since the epoch, as BSON stores a date (microseconds are dropped; naive means UTC)."""
    if isinstance(value, DatetimeMS):
        return int(value)
    if value.tzinfo is None or value.utcoffset() is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    delta = value - _EPOCH
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


_FLAG_LETTERS = (("i", re.IGNORECASE), ("l", re.LOCALE), ("m", re.MULTILINE), ("s", re.DOTALL),
                 ("u", re.UNICODE), ("x", re.VERBOSE))


def regex_parts(value) -> tuple[str, str]:
    """(pattern, flags) of a regex, flags as the letters BSON stores (``ilmsux`` order)."""
    if isinstance(value, re.Pattern):
        value = Regex.from_native(value)
    pattern = value.pattern
    if isinstance(pattern, bytes):
        pattern = pattern.decode("utf-8", "surrogatepass")
    flags = value.flags
    if isinstance(flags, str):
        letters = "".join(sorted(set(flags), key="ilmsux".find))
    else:
        letters = "".join(letter for letter, bit in _FLAG_LETTERS if flags & bit)
    return pattern, letters


def object_items(value) -> list:
    """The (name, value) pairs of a document in order (a DBRef as its ``$ref``/``$id``/``$db`` document)."""
    if isinstance(value, DBRef):
        value = value.as_doc()
    return list(value.items())


def code_parts(value) -> tuple[str, object]:
    """(code, scope) of a JavaScript code value; scope is None or a document."""
    return str(value), value.scope


# ---------------------------------------------------------------------------
# compare


def _sign(x) -> int:
    return (x > 0) - (x < 0)


def _cmp_numbers(a, b) -> int:
    a = number_value(a)
    b = number_value(b)
    a_nan = isinstance(a, float) and a != a
    b_nan = isinstance(b, float) and b != b
    if a_nan or b_nan:
        return 0 if a_nan and b_nan else (-1 if a_nan else 1)
    return (a > b) - (a < b)


def _cmp_plain(a, b) -> int:
    return (a > b) - (a < b)


def compare(a, b) -> int:
    """-1, 0 or 1 as ``a`` sorts before, with, or after ``b`` in MongoDB's order of BSON values.

    Types first (MinKey < null < numbers < strings < objects < arrays < binary < ObjectId
    < bool < date < timestamp < regex < code < MaxKey), then values: numbers by exact value
    across int/Int64/float/Decimal128 (NaN lowest, equal to NaN; 0 == -0.0), strings by
    UTF-8 bytes, objects field by field (type of the value, then name, then value),
    arrays element by element, shorter first.
    """
    ra = type_rank(a)
    rb = type_rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    return _compare_same(ra, a, b)


def _compare_same(rank: int, a, b) -> int:
    if rank == NUMBER:
        return _cmp_numbers(a, b)
    if rank == STRING:
        # Code-point order of Python strings is the byte order of their UTF-8.
        return _cmp_plain(str(a), str(b))
    if rank == OBJECT:
        return _cmp_objects(object_items(a), object_items(b))
    if rank == ARRAY:
        for x, y in zip(a, b):
            c = compare(x, y)
            if c:
                return c
        return _cmp_plain(len(a), len(b))
    if rank == BINARY:
        sa, da = binary_parts(a)
        sb, db = binary_parts(b)
        return _cmp_plain((len(da), sa, da), (len(db), sb, db))
    if rank == OBJECTID:
        return _cmp_plain(a.binary, b.binary)
    if rank == BOOL:
        return _cmp_plain(bool(a), bool(b))
    if rank == DATE:
        return _cmp_plain(date_ms(a), date_ms(b))
    if rank == TIMESTAMP:
        return _cmp_plain((a.time, a.inc), (b.time, b.inc))
    if rank == REGEX:
        pa, fa = regex_parts(a)
        pb, fb = regex_parts(b)
        return _cmp_plain(pa, pb) or _cmp_plain(fa, fb)
    if rank == CODE:
        return _cmp_plain(str(a), str(b))
    if rank == CODE_W_SCOPE:
        return _cmp_plain(str(a), str(b)) or _cmp_objects(object_items(a.scope), object_items(b.scope))
    return 0  # null, MinKey, MaxKey: one value each


def _cmp_objects(ia: list, ib: list) -> int:
    for (ka, va), (kb, vb) in zip(ia, ib):
        ra = type_rank(va)
        rb = type_rank(vb)
        if ra != rb:
            return -1 if ra < rb else 1
        if ka != kb:
            return -1 if ka < kb else 1
        c = _compare_same(ra, va, vb)
        if c:
            return c
    return _cmp_plain(len(ia), len(ib))


def values_equal(a, b) -> bool:
    """True when ``a`` and ``b`` are the same BSON value (30 == 30.0 == Int64(30), NaN == NaN, field order matters)."""
    ta = type(a)
    if ta is type(b) and ta in (str, int, bytes, ObjectId):
        return a == b
    return compare(a, b) == 0


def sort_key(value):
    """A key for Python's ``sorted`` that orders values like :func:`compare`."""
    return _SortKey(value)


class _SortKey:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __lt__(self, other):
        return compare(self.value, other.value) < 0

    def __eq__(self, other):
        return compare(self.value, other.value) == 0
