"""Filter matching with MongoDB's meaning: compile a filter document once, then test documents against it.

Regular expressions run on the ``regex`` package (``re``'s syntax in its V0 mode), not on
``re``: its matching lets go of the GIL, so a long match holds only its own thread, and it
stops at a time limit. A regular expression may spend at most :func:`regex_timeout` seconds
matching one value; past that the filter raises RegexTimeoutError. A pattern that
backtracks catastrophically (``(a|aa)+$`` on forty ``a``s and a ``b``) would otherwise run
for hours. The limit is per value, not per request, so a scan of many documents with an
ordinary pattern is never refused for being long.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterator, Mapping

import regex
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.regex import Regex

from hoarddb.errors import BadValueError, RegexTimeoutError

from .expression import compile_expression, truthy, type_name
from .keys import encode_key
from .order import BINARY, NUMBER, REGEX, STRING, binary_parts, compare, is_nan, number_value, regex_parts, type_rank, values_equal
from .paths import MISSING, resolve, split_path

try:  # re's own parser: checks a pattern's syntax and size before the regex package compiles it
    from re import _parser as _re_parser  # Python 3.11+
except ImportError:  # pragma: no cover
    import sre_parse as _re_parser

#: Operators accepted at the top of a filter (or of an ``$and``/``$or``/``$nor`` member).
LOGICAL_OPERATORS = ("$and", "$or", "$nor")
#: Top-level operators that are not logical: an aggregation expression, a comment.
TOP_OPERATORS = LOGICAL_OPERATORS + ("$expr", "$comment")
#: Operators accepted in a field's condition, ``{field: {$op: value}}``.
FIELD_OPERATORS = (
    "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$not",
    "$regex", "$options", "$all", "$size", "$elemMatch", "$type", "$mod",
    "$bitsAllSet", "$bitsAnySet", "$bitsAllClear", "$bitsAnyClear",
)
#: Option letters and their flags (the same bits in re and in the regex package).
_REGEX_OPTIONS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL, "x": regex.VERBOSE, "u": 0}

#: Seconds a regular expression may spend matching one value, unless
#: :func:`regex_time_limit` says otherwise (the server's ``regex_timeout`` option).
DEFAULT_REGEX_TIMEOUT = 1.0
_regex_timeout: contextvars.ContextVar[float] = contextvars.ContextVar("regex_timeout", default=DEFAULT_REGEX_TIMEOUT)

Cands = list  # the values a path reaches (see paths.resolve)
DocPred = Callable[[Mapping], bool]


def _accepted(ops) -> str:
    return ", ".join(ops)


# ---------------------------------------------------------------------------
# public


def compile_filter(filter) -> Callable[[dict], bool]:  # noqa: A002 - the name callers use
    """A predicate ``doc -> bool`` for a MongoDB-style filter, validated as a whole up front.

    Raises BadValueError for a filter that is not a document, an unknown operator, or an
    operator given the wrong kind of value; the message lists what is accepted. The
    predicate raises RegexTimeoutError when one of the filter's regular expressions
    matched one value for :func:`regex_timeout` seconds (the limit when it was compiled).
    """
    return _compile_document(filter, "filter")


def regex_timeout() -> float:
    """Seconds a regular expression of a filter compiled now may match one value for (0: no limit)."""
    return _regex_timeout.get()


@contextlib.contextmanager
def regex_time_limit(seconds: float) -> Iterator[None]:
    """Inside, filters compiled in this thread (or task) allow their regular expressions
    ``seconds`` of matching per value (0: no limit, which lets one pattern run for hours).

        with regex_time_limit(10):
            bucket.find({"Log": {"$regex": "timeout.*retry"}})
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise BadValueError(f"a regex time limit is a number of seconds >= 0 (0: none), got {seconds!r}")
    token = _regex_timeout.set(float(seconds))
    try:
        yield
    finally:
        _regex_timeout.reset(token)


def matches(doc, filter) -> bool:  # noqa: A002
    """True when ``doc`` matches ``filter`` (compile once with :func:`compile_filter` to test many)."""
    return compile_filter(filter)(doc)


def equality_fields(filter, check: bool = True) -> dict:  # noqa: A002
    """The fields (dotted paths as written) the filter pins to one value by ``{f: v}`` or ``{f: {$eq: v}}``.

    Only conditions every match must meet count: the filter's own fields and those of a
    top-level ``$and`` (nested ``$and`` too), never ``$or``/``$nor``/``$not``. A regex value
    pins nothing (it is a pattern). Under MongoDB semantics a document whose field is an
    array matches when any element equals the value, and ``None`` also matches a missing
    field: an index answering these must index array elements and absent fields. The first
    pin of a field wins. Validates the filter (BadValueError as compile_filter).
    """
    if check:  # callers that compiled the filter already pass check=False
        compile_filter(filter)
    pinned: dict = {}
    _collect_equalities(filter, pinned)
    return pinned


def filter_has_regex(filter) -> bool:  # noqa: A002
    """Whether a filter (valid or not) holds a regular expression anywhere: a regex value or ``$regex``."""
    stack = [filter]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            if "$regex" in value:
                return True
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif _is_regex(value):
            return True
    return False


def _collect_equalities(flt: Mapping, pinned: dict) -> None:
    for key, value in flt.items():
        if key == "$and":
            for member in value:
                _collect_equalities(member, pinned)
            continue
        if key.startswith("$"):
            continue
        if _is_operator_doc(value, key):
            if "$eq" in value:
                pinned.setdefault(key, value["$eq"])
        elif not _is_regex(value):
            pinned.setdefault(key, value)


# ---------------------------------------------------------------------------
# documents and logical operators


def _compile_document(flt, where: str, top: bool = True) -> DocPred:
    """``top``: the filter is the whole filter (or a member of its $and/$or/$nor), where $expr may stand."""
    if not isinstance(flt, Mapping):
        raise BadValueError(
            f"{where} must be a document such as {{'age': {{'$gt': 30}}}}, not {type(flt).__name__}"
        )
    preds: list[DocPred] = []
    for key, value in flt.items():
        if not isinstance(key, str):
            raise BadValueError(f"{where} has a non-string field name {key!r}; field names are strings")
        if key == "$comment":
            continue  # a note for logs and profilers: it matches everything
        if key == "$expr":
            if not top:
                raise BadValueError(f"$expr can only stand at the top of a filter (or in its $and/$or/$nor), not in {where}")
            preds.append(_expr_pred(value, where))
        elif key.startswith("$"):
            preds.append(_compile_logical(key, value, where, top))
        else:
            parts = split_path(key, what="filter field")
            preds.append(_field_predicate(parts, _compile_condition(value, key)))
    if not preds:
        return _always
    if len(preds) == 1:
        return preds[0]
    return lambda doc: all(p(doc) for p in preds)


def _always(doc) -> bool:
    return True


def _field_predicate(parts, cond: FieldPred) -> DocPred:
    on_leaves = getattr(cond, "on_leaves", None)
    if on_leaves is not None:  # the common case: one resolve, no Reach
        return lambda doc: on_leaves(resolve(doc, parts))
    return lambda doc: cond(_Reach(doc, parts))


def _expr_pred(value, where: str) -> DocPred:
    """``{$expr: expression}``: the documents for which the aggregation expression is true
    (not false, null, missing or zero)."""
    evaluate = compile_expression(value, where=f"$expr in {where}")
    return lambda doc: truthy(evaluate(doc))


def _compile_logical(op: str, value, where: str, top: bool = True) -> DocPred:
    if op not in LOGICAL_OPERATORS:
        raise BadValueError(
            f"unknown top-level filter operator {op!r} in {where}; accepted: {_accepted(TOP_OPERATORS)} "
            f"(field operators such as $gt go inside a field: {{'age': {{'$gt': 30}}}})"
        )
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(m, Mapping) for m in value):
        raise BadValueError(f"{op} needs a non-empty list of filter documents, such as [{{'a': 1}}, {{'b': 2}}]")
    members = [_compile_document(m, f"member {i} of {op}", top) for i, m in enumerate(value)]
    if op == "$and":
        return lambda doc: all(m(doc) for m in members)
    if op == "$or":
        return lambda doc: any(m(doc) for m in members)
    return lambda doc: not any(m(doc) for m in members)


# ---------------------------------------------------------------------------
# what a field condition looks at


class _Reach:
    """What one field path reaches in one document, each form found on first use (paths.resolve).

    ``leaves`` is what value conditions test, as MongoDB's matcher: an array at the end of
    the path as each of its elements and as itself. ``values`` gives arrays whole, for the
    conditions on the array itself ($size, $elemMatch).
    """

    __slots__ = ("doc", "parts", "_leaves", "_values")

    def __init__(self, doc, parts):
        self.doc = doc
        self.parts = parts
        self._leaves = None
        self._values = None

    @property
    def leaves(self) -> Cands:
        if self._leaves is None:
            self._leaves = resolve(self.doc, self.parts)
        return self._leaves

    @property
    def values(self) -> Cands:
        if self._values is None:
            self._values = resolve(self.doc, self.parts, leaf_arrays=False)
        return self._values


class _Element:
    """One array element as ``$elemMatch {$op: ...}`` tests it: itself only (an element that is an
    array is not looked into, as MongoDB)."""

    __slots__ = ("leaves", "values")

    def __init__(self, value):
        self.leaves = self.values = [value]


#: A compiled field condition: ``reach -> bool``. One that only looks at ``reach.leaves``
#: carries that test as ``.on_leaves`` (``cands -> bool``), so a plain field skips the Reach.
FieldPred = Callable[[_Reach], bool]


def _on_leaves(test: Callable[[Cands], bool]) -> FieldPred:
    def pred(reach) -> bool:
        return test(reach.leaves)
    pred.on_leaves = test
    return pred


def _on_values(test: Callable[[Cands], bool]) -> FieldPred:
    return lambda reach: test(reach.values)


def _all_of(preds: list) -> FieldPred:
    if len(preds) == 1:
        return preds[0]
    tests = [getattr(p, "on_leaves", None) for p in preds]
    if all(t is not None for t in tests):
        return _on_leaves(lambda cands: all(t(cands) for t in tests))
    return lambda reach: all(p(reach) for p in preds)


# ---------------------------------------------------------------------------
# field conditions


def _is_regex(value) -> bool:
    return isinstance(value, (Regex, re.Pattern))


def _is_operator_doc(value, field: str) -> bool:
    """True for ``{$gt: 1, ...}``; False for a literal document; refuses a mix of the two."""
    if not isinstance(value, Mapping) or not value:
        return False
    dollar = [isinstance(k, str) and k.startswith("$") for k in value]
    if all(dollar):
        return True
    if any(dollar):
        raise BadValueError(
            f"the condition on {field!r} mixes operators and field names; use either operators "
            f"({_accepted(FIELD_OPERATORS)}) or a literal document for exact equality"
        )
    return False


def _compile_condition(value, field: str) -> FieldPred:
    if _is_operator_doc(value, field):
        return _compile_operators(value, field)
    return _eq_pred(value)


def _compile_operators(ops: Mapping, field: str) -> FieldPred:
    for op in ops:
        if op not in FIELD_OPERATORS:
            hint = " (it goes at the top of the filter, not inside a field)" if op in TOP_OPERATORS else ""
            raise BadValueError(
                f"unknown filter operator {op!r} on field {field!r}{hint}; accepted: {_accepted(FIELD_OPERATORS)}"
            )
    preds: list[FieldPred] = []
    if "$options" in ops and "$regex" not in ops:
        raise BadValueError(f"$options on {field!r} needs a $regex beside it")
    for op, arg in ops.items():
        if op == "$options":
            continue
        if op == "$regex":
            preds.append(_regex_pred(*_compile_regex(arg, ops.get("$options"), field)))
        elif op == "$eq":
            preds.append(_eq_pred(arg, pattern=False))
        elif op == "$ne":
            preds.append(_negate(_eq_pred(arg, pattern=False)))
        elif op in ("$gt", "$gte", "$lt", "$lte"):
            preds.append(_cmp_pred(op, arg))
        elif op == "$in":
            preds.append(_in_pred(_list_arg(op, arg, field), field))
        elif op == "$nin":
            preds.append(_negate(_in_pred(_list_arg(op, arg, field), field)))
        elif op == "$exists":
            preds.append(_exists_pred(bool(arg)))
        elif op == "$not":
            preds.append(_negate(_not_arg(arg, field)))
        elif op == "$all":
            preds.append(_all_pred(_list_arg(op, arg, field), field))
        elif op == "$size":
            preds.append(_size_pred(arg, field))
        elif op == "$elemMatch":
            preds.append(_elem_match_pred(arg, field))
        elif op == "$type":
            preds.append(_type_pred(arg, field))
        elif op == "$mod":
            preds.append(_mod_pred(arg, field))
        else:  # the four $bits operators
            preds.append(_bits_pred(op, arg, field))
    return _all_of(preds)


def _negate(pred: FieldPred) -> FieldPred:
    test = getattr(pred, "on_leaves", None)
    if test is not None:
        return _on_leaves(lambda cands: not test(cands))
    return lambda reach: not pred(reach)


def _list_arg(op: str, arg, field: str) -> list:
    if not isinstance(arg, (list, tuple)):
        raise BadValueError(f"{op} on {field!r} needs a list of values, such as {{'{op}': [1, 2, 3]}}")
    return list(arg)


def _not_arg(arg, field: str) -> FieldPred:
    if _is_regex(arg):
        return _regex_pred(_native_regex(arg, field), arg)
    if isinstance(arg, Mapping) and arg and _is_operator_doc(arg, field):
        return _compile_operators(arg, field)
    raise BadValueError(
        f"$not on {field!r} needs an operator document such as {{'$not': {{'$gt': 5}}}} or a regex"
    )


# -- equality ---------------------------------------------------------------


def _eq_pred(q, *, pattern: bool = True) -> FieldPred:
    """Equality with ``q``; a regex ``q`` is a pattern to match strings when ``pattern`` (``{f: /x/}``)."""
    if pattern and _is_regex(q):
        return _regex_pred(_native_regex(q, "the filter"), q)
    encode_key(q)  # refuses, up front, a value BSON cannot hold
    if q is None:
        def null_pred(cands) -> bool:
            for c in cands:
                if c is MISSING or c is None:
                    return True
            return False
        return _on_leaves(null_pred)

    def eq_pred(cands) -> bool:
        for c in cands:
            if c is not MISSING and values_equal(c, q):
                return True
        return False
    return _on_leaves(eq_pred)


def _in_pred(values: list, field: str) -> FieldPred:
    keys = set()
    regexes = []
    has_null = False
    for v in values:
        if isinstance(v, Mapping) and _is_operator_doc(v, field):
            raise BadValueError(f"$in/$nin on {field!r} takes plain values, not operator documents such as {v!r}")
        if _is_regex(v):
            regexes.append((_native_regex(v, field), v))
        else:
            if v is None:
                has_null = True
            keys.add(encode_key(v))

    def one(c) -> bool:
        if encode_key(c) in keys:
            return True
        return any(_regex_matches_or_equal(c, rx, q) for rx, q in regexes)

    def in_pred(cands) -> bool:
        for c in cands:
            if c is MISSING:
                if has_null:
                    return True
                continue
            if one(c):
                return True
        return False
    return _on_leaves(in_pred)


# -- ordering comparisons ----------------------------------------------------


def _cmp_pred(op: str, q) -> FieldPred:
    encode_key(q)  # refuses, up front, a value BSON cannot hold
    q_rank = type_rank(q)
    any_type = isinstance(q, (MinKey, MaxKey))
    q_nan = q_rank == NUMBER and is_nan(q)
    if op == "$gt":
        test = lambda r: r > 0  # noqa: E731
    elif op == "$gte":
        test = lambda r: r >= 0  # noqa: E731
    elif op == "$lt":
        test = lambda r: r < 0  # noqa: E731
    else:
        test = lambda r: r <= 0  # noqa: E731
    inclusive = op in ("$gte", "$lte")

    def one(c) -> bool:
        if any_type:
            return test(compare(c, q))
        if type_rank(c) != q_rank:
            return False
        if q_rank == NUMBER and (q_nan or is_nan(c)):
            # As MongoDB: NaN equals NaN and is neither above nor below any number.
            return inclusive and q_nan and is_nan(c)
        return test(compare(c, q))

    # A missing field matches as MongoDB's matcher has it: $gte/$lte null (as {f: null}
    # does), and the bounds that take every value, $gt/$gte MinKey and $lt/$lte MaxKey.
    missing_matches = (q is None and inclusive) or (any_type and test(compare(None, q)))

    def cmp_pred(cands) -> bool:
        for c in cands:
            if c is MISSING:
                if missing_matches:
                    return True
                continue
            if one(c):
                return True
        return False
    return _on_leaves(cmp_pred)


# -- $exists, $size, $all, $elemMatch ----------------------------------------


def _exists_pred(want: bool) -> FieldPred:
    return _on_leaves(lambda cands: any(c is not MISSING for c in cands) == want)


def _size_pred(arg, field: str) -> FieldPred:
    n = number_value(arg) if type_rank(arg) == NUMBER else None
    if n is None or n != n or abs(n) == float("inf") or n != int(n) or n < 0:
        raise BadValueError(f"$size on {field!r} needs a whole number >= 0, such as {{'$size': 2}}")
    n = int(n)
    return _on_values(lambda cands: any(isinstance(c, (list, tuple)) and len(c) == n for c in cands))


def _all_pred(values: list, field: str) -> FieldPred:
    if not values:
        return lambda cands: False  # as MongoDB: $all of nothing matches nothing
    preds = []
    plain: dict[bytes, object] = {}  # the plain values, each once (a value repeated adds nothing)
    for v in values:
        if isinstance(v, Mapping) and _is_operator_doc(v, field):
            if list(v) != ["$elemMatch"]:
                raise BadValueError(f"$all on {field!r} takes values or {{'$elemMatch': ...}} documents")
            preds.append(_elem_match_pred(v["$elemMatch"], field))
        elif v is None or _is_regex(v):
            preds.append(_eq_pred(v))
        else:
            plain.setdefault(encode_key(v), v)
    if len(plain) > _ALL_BY_KEYS:
        # Many values: key the field's values once per document, instead of scanning them
        # once per value (an $all of 10,000 values against arrays of 10,000 elements was
        # 10^8 comparisons per document).
        needed = frozenset(plain)

        def all_by_keys(cands) -> bool:
            have = {encode_key(c) for c in cands if c is not MISSING}
            return needed <= have
        preds.insert(0, _on_leaves(all_by_keys))
    else:
        preds[:0] = [_eq_pred(v) for v in plain.values()]
    return _all_of(preds)


#: Above this many plain values, $all keys the field's values (see _all_pred).
_ALL_BY_KEYS = 8


def _elem_match_pred(arg, field: str) -> FieldPred:
    if not isinstance(arg, Mapping) or not arg:
        raise BadValueError(f"$elemMatch on {field!r} needs a non-empty document, such as {{'$elemMatch': {{'$gt': 5}}}}")
    keys = list(arg)
    value_ops = all(isinstance(k, str) and k.startswith("$") and k not in TOP_OPERATORS for k in keys)
    if value_ops:
        cond = _compile_operators(arg, field)

        def element_ok(e) -> bool:
            return cond(_Element(e))
    else:
        doc_pred = _compile_document(arg, f"$elemMatch on {field!r}", top=False)

        def element_ok(e) -> bool:
            if isinstance(e, Mapping):
                return doc_pred(e)
            if isinstance(e, (list, tuple)):
                # As MongoDB: an element that is an array is a document with fields "0", "1", ...
                return doc_pred({str(i): v for i, v in enumerate(e)})
            return False

    return _on_values(lambda cands: any(
        isinstance(c, (list, tuple)) and any(element_ok(e) for e in c) for c in cands
    ))


# -- $type, $mod, $bits -------------------------------------------------------

#: $type's names and their BSON type numbers ("number" is every numeric type).
TYPE_NUMBERS = {
    "double": 1, "string": 2, "object": 3, "array": 4, "binData": 5, "undefined": 6, "objectId": 7,
    "bool": 8, "date": 9, "null": 10, "regex": 11, "dbPointer": 12, "javascript": 13, "symbol": 14,
    "javascriptWithScope": 15, "int": 16, "timestamp": 17, "long": 18, "decimal": 19, "minKey": -1,
    "maxKey": 127,
}
_NUMERIC_TYPES = frozenset({1, 16, 18, 19})


def bson_type_number(value) -> int:
    """The BSON type number of a value as it is stored (a Python int: 16 within int32, else 18)."""
    return TYPE_NUMBERS[type_name(value)]


def _type_pred(arg, field: str) -> FieldPred:
    """``{$type: "string"}``, ``{$type: 2}``, ``{$type: ["int", "long"]}``, ``{$type: "number"}``."""
    aliases = list(arg) if isinstance(arg, (list, tuple)) else [arg]
    if not aliases:
        raise BadValueError(f"$type on {field!r} needs at least one type, such as {{'$type': 'string'}}")
    wanted: set[int] = set()
    for alias in aliases:
        if isinstance(alias, str) and not isinstance(alias, bool):
            if alias == "number":
                wanted |= _NUMERIC_TYPES
            elif alias in TYPE_NUMBERS:
                wanted.add(TYPE_NUMBERS[alias])
            else:
                raise BadValueError(
                    f"$type on {field!r}: unknown type name {alias!r}; accepted: number, "
                    f"{_accepted(TYPE_NUMBERS)} (or their numbers, such as 2 for string)")
        elif not isinstance(alias, bool) and type_rank(alias) == NUMBER:
            n = number_value(alias)
            if is_nan(alias) or n != int(n) or int(n) not in TYPE_NUMBERS.values():
                raise BadValueError(
                    f"$type on {field!r}: {alias!r} is not a BSON type number; accepted: "
                    f"{', '.join(str(v) for v in sorted(TYPE_NUMBERS.values()))}, or a name such as 'string'")
            wanted.add(int(n))
        else:
            raise BadValueError(
                f"$type on {field!r} takes a type name such as 'string', a type number such as 2, or a list of "
                f"them; got {alias!r:.40}")
    frozen = frozenset(wanted)

    def type_pred(cands) -> bool:
        for c in cands:
            if c is not MISSING and bson_type_number(c) in frozen:
                return True
        return False
    return _on_leaves(type_pred)


def _whole(value, what: str, field: str, op: str) -> int:
    """A number as MongoDB's $mod takes it: truncated toward zero; NaN and infinity refused."""
    if isinstance(value, bool) or type_rank(value) != NUMBER:
        raise BadValueError(f"$mod on {field!r}: the {what} must be a number, got {value!r:.40}; "
                            "write {'$mod': [divisor, remainder]}")
    n = number_value(value)
    if is_nan(value) or n in (float("inf"), float("-inf")) or (hasattr(n, "is_infinite") and n.is_infinite()):
        raise BadValueError(f"$mod on {field!r}: the {what} must be a finite number, got {value!r}")
    n = int(n)
    if not -(1 << 63) <= n < (1 << 63):
        raise BadValueError(f"$mod on {field!r}: the {what} {value!r} is out of the range of a 64-bit integer")
    return n


def _c_mod(a: int, b: int) -> int:
    """The remainder of a division truncated toward zero (it has the dividend's sign, as in C)."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _mod_pred(arg, field: str) -> FieldPred:
    """``{$mod: [divisor, remainder]}``: numbers whose value, truncated to a whole number, leaves that remainder."""
    if not isinstance(arg, (list, tuple)):
        raise BadValueError(f"$mod on {field!r} needs an array [divisor, remainder], such as {{'$mod': [4, 0]}}")
    if len(arg) < 2:
        raise BadValueError(f"$mod on {field!r}: malformed, not enough elements; write [divisor, remainder]")
    if len(arg) > 2:
        raise BadValueError(f"$mod on {field!r}: malformed, too many elements; write [divisor, remainder]")
    divisor = _whole(arg[0], "divisor", field, "$mod")
    remainder = _whole(arg[1], "remainder", field, "$mod")
    if divisor == 0:
        raise BadValueError(f"$mod on {field!r}: the divisor cannot be 0")

    def one(c) -> bool:
        if isinstance(c, bool) or c is MISSING or type_rank(c) != NUMBER or is_nan(c):
            return False
        n = number_value(c)
        if n in (float("inf"), float("-inf")) or (hasattr(n, "is_infinite") and n.is_infinite()):
            return False
        return _c_mod(int(n), divisor) == remainder

    return _on_leaves(lambda cands: any(one(c) for c in cands))


_BITS_OPERATORS = ("$bitsAllSet", "$bitsAnySet", "$bitsAllClear", "$bitsAnyClear")


def _bit_positions(op: str, arg, field: str) -> list[int]:
    """The bit positions a $bits operator tests, from a number, a BinData mask or a list of positions."""
    usage = (f"{op} on {field!r} takes a non-negative whole number (a mask), binary data (a mask, byte 0 "
             f"holding bits 0-7) or an array of bit positions, such as {{'{op}': [1, 5]}}")
    if isinstance(arg, bool):
        raise BadValueError(usage)
    if isinstance(arg, (list, tuple)):
        positions = []
        for p in arg:
            if isinstance(p, bool) or type_rank(p) != NUMBER or is_nan(p):
                raise BadValueError(f"{op} on {field!r}: bit positions must be whole numbers, got {p!r:.40}")
            n = number_value(p)
            if n != int(n) or int(n) < 0:
                raise BadValueError(f"{op} on {field!r}: bit positions must be whole numbers >= 0, got {p!r}")
            if int(n) > (1 << 31) - 1:
                raise BadValueError(f"{op} on {field!r}: the bit position {p!r} is too large")
            positions.append(int(n))
        return positions
    rank = type_rank(arg)
    if rank == NUMBER:
        n = number_value(arg)
        if is_nan(arg) or n != int(n):
            raise BadValueError(f"{op} on {field!r}: a numeric mask must be a whole number, got {arg!r}")
        n = int(n)
        if n < 0:
            raise BadValueError(f"{op} on {field!r}: a numeric mask must not be negative, got {arg!r}")
        if n >= 1 << 63:
            raise BadValueError(f"{op} on {field!r}: the mask {arg!r} does not fit in a 64-bit integer")
        return [i for i in range(n.bit_length()) if n >> i & 1]
    if rank == BINARY:
        data = binary_parts(arg)[1]
        return [i * 8 + b for i, byte in enumerate(data) for b in range(8) if byte >> b & 1]
    raise BadValueError(usage)


def _bits_of(c):
    """``(test(position) -> bool)`` for a value $bits can test, or None (it never matches)."""
    if c is MISSING or isinstance(c, bool):
        return None
    rank = type_rank(c)
    if rank == NUMBER:
        if is_nan(c):
            return None
        n = number_value(c)
        if n in (float("inf"), float("-inf")) or (hasattr(n, "is_infinite") and n.is_infinite()) or n != int(n):
            return None
        n = int(n)
        if not -(1 << 63) <= n < (1 << 63):
            return None
        # Two's complement: a negative number's bits past 63 are its sign bit, which Python's >> gives.
        return lambda i: (n >> min(i, 63)) & 1 == 1
    if rank == BINARY:
        data = binary_parts(c)[1]
        return lambda i: i // 8 < len(data) and data[i // 8] >> (i % 8) & 1 == 1
    return None


def _bits_pred(op: str, arg, field: str) -> FieldPred:
    positions = _bit_positions(op, arg, field)
    want_set = op in ("$bitsAllSet", "$bitsAnySet")
    every = op in ("$bitsAllSet", "$bitsAllClear")

    def one(c) -> bool:
        test = _bits_of(c)
        if test is None:
            return False
        if every:
            return all(test(i) == want_set for i in positions)
        return any(test(i) == want_set for i in positions)

    return _on_leaves(lambda cands: any(one(c) for c in cands))


# -- regular expressions -----------------------------------------------------


def _compile_regex(pattern, options, field: str) -> tuple["_Pattern", Regex]:
    """(compiled, the BSON regex it is) of ``$regex`` with its ``$options``."""
    if _is_regex(pattern):
        base, letters = regex_parts(pattern)
        if options is not None:
            letters += _options_arg(options, field)
            return _build_regex(base, letters, field), Regex(base, letters)
        return _native_regex(pattern, field), Regex(base, letters)
    if not isinstance(pattern, str):
        raise BadValueError(f"$regex on {field!r} needs a string pattern or a regex, not {type(pattern).__name__}")
    letters = "" if options is None else _options_arg(options, field)
    return _build_regex(pattern, letters, field), Regex(pattern, letters)


def _options_arg(options, field: str) -> str:
    if not isinstance(options, str):
        raise BadValueError(f"$options on {field!r} must be a string of letters; accepted: i, m, s, x")
    return options


def _native_regex(value, field: str) -> "_Pattern":
    if isinstance(value, re.Pattern) and isinstance(value.pattern, bytes):
        raise BadValueError(f"a regex on {field!r} must have a str pattern, not bytes")
    pattern, letters = regex_parts(value)
    return _build_regex(pattern, letters, field)


def _build_regex(pattern: str, letters: str, field: str) -> "_Pattern":
    flags = regex.V0
    for letter in letters:
        if letter == "l":
            continue  # locale-dependent matching: not applicable to str patterns
        if letter not in _REGEX_OPTIONS:
            raise BadValueError(f"unknown regex option {letter!r} on {field!r}; accepted: i, m, s, x")
        flags |= _REGEX_OPTIONS[letter]
    if len(pattern) > MAX_REGEX_LENGTH:
        raise BadValueError(
            f"the regular expression on {field!r} is {len(pattern)} characters long; the limit is "
            f"{MAX_REGEX_LENGTH}. To match one of many strings use $in with the strings themselves")
    # The syntax accepted is re's, as before: re's parser checks it and measures what the
    # regex package would expand (it spells out a fixed repeat such as a{1000} item by
    # item, so (?:(?:a{1000}){1000}){1000} would take tens of gigabytes to compile).
    try:
        parsed = _re_parser.parse(pattern, flags & ~regex.V0)  # only i, m, s, x left: re's bits too
    except (re.error, ValueError, OverflowError, RecursionError) as exc:
        raise BadValueError(f"bad regular expression {_shown(pattern)!r} on {field!r}: {exc}") from None
    if _expanded_size(parsed) > MAX_REGEX_EXPANSION:
        raise BadValueError(
            f"the regular expression {_shown(pattern)!r} on {field!r} repeats too much: its fixed repeats "
            f"({{n}}) multiply to over {MAX_REGEX_EXPANSION} items. Use open repeats such as {{1,1000}}, "
            "or smaller counts")
    try:
        compiled = regex.compile(pattern, flags)
    except (regex.error, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise BadValueError(f"bad regular expression {_shown(pattern)!r} on {field!r}: {exc}") from None
    return _Pattern(compiled, pattern, field, _regex_timeout.get())


#: The longest regular expression a filter may hold, in characters (compiling one takes
#: time in proportion: about 5 ms per thousand characters).
MAX_REGEX_LENGTH = 32_768
#: The most items the fixed repeats of one regular expression may multiply to (see
#: _expanded_size): about 270 bytes each once compiled, so some 30 MB at most.
MAX_REGEX_EXPANSION = 100_000


def _expanded_size(parsed) -> int:
    """How many items the regex package spells out for a parsed pattern (re's parse tree):
    each repeat counts its body times its lower bound, so ``(?:a{1000}){1000}`` is a million."""
    total = 0
    for op, arg in parsed:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, body = arg
            total += max(1, low) * _expanded_size(body)
        elif name in ("SUBPATTERN", "ASSERT", "ASSERT_NOT"):  # (group, flags..., body), (direction, body)
            total += _expanded_size(arg[-1])
        elif name == "ATOMIC_GROUP":
            total += _expanded_size(arg)
        elif name == "BRANCH":
            total += sum(_expanded_size(branch) for branch in arg[1])
        elif name == "GROUPREF_EXISTS":
            total += sum(_expanded_size(branch) for branch in arg[1:] if branch is not None)
        else:
            total += 1
        if total > MAX_REGEX_EXPANSION:
            return total
    return total


def _shown(pattern: str) -> str:
    return pattern if len(pattern) <= 60 else pattern[:57] + "..."


class _Pattern:
    """A compiled regular expression of a filter: its matching lets go of the GIL (so the
    server's event loop and other requests run meanwhile) and stops after ``limit``
    seconds on one value (0: never)."""

    __slots__ = ("rx", "pattern", "field", "limit", "_timeout_arg")

    def __init__(self, rx, pattern: str, field: str, limit: float):
        self.rx, self.pattern, self.field, self.limit = rx, pattern, field, limit
        self._timeout_arg = limit if limit > 0 else None

    def search(self, text: str) -> bool:
        """Whether the pattern occurs in ``text``; RegexTimeoutError when finding out takes too long."""
        try:
            return self.rx.search(text, timeout=self._timeout_arg, concurrent=True) is not None
        except TimeoutError:
            raise self._timeout() from None

    def _timeout(self) -> RegexTimeoutError:
        return RegexTimeoutError(
            f"the regular expression {_shown(self.pattern)!r} on {self.field!r} was still matching one value "
            f"when the {self.limit:g} s it may spend on one ran out (regex_timeout). Nested repeats "
            "such as (a+)+ or (a|aa)* take exponential time on some strings: rewrite the pattern without "
            "them, anchor it (^prefix, which also lets it stop early), or narrow the documents first with "
            "an indexed field (search); a server's regex_timeout option raises the limit")


def _regex_matches_or_equal(c, rx: _Pattern, q) -> bool:
    """As MongoDB: a string matches by the pattern, a stored regex by being the same regex."""
    if c is MISSING:
        return False
    rank = type_rank(c)
    if rank == STRING:
        return rx.search(c)
    if rank == REGEX:
        return values_equal(c, q)
    return False


def _regex_pred(rx: _Pattern, q) -> FieldPred:
    """``{f: /re/}``, ``{f: {$regex: ...}}`` and ``$not: /re/``: strings by ``rx``, stored regexes equal to ``q``."""
    search = rx.search

    def regex_pred(cands) -> bool:
        for c in cands:
            if type(c) is str:
                if search(c):
                    return True
            elif _regex_matches_or_equal(c, rx, q):
                return True
        return False
    return _on_leaves(regex_pred)
