"""Filter matching with MongoDB's meaning: compile a filter document once, then test documents against it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.regex import Regex

from hoarddb.errors import BadValueError

from .keys import encode_key
from .order import NUMBER, REGEX, STRING, compare, is_nan, number_value, regex_parts, type_rank, values_equal
from .paths import MISSING, resolve, split_path

#: Operators accepted at the top of a filter (or of an ``$and``/``$or``/``$nor`` member).
LOGICAL_OPERATORS = ("$and", "$or", "$nor")
#: Operators accepted in a field's condition, ``{field: {$op: value}}``.
FIELD_OPERATORS = (
    "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$not",
    "$regex", "$options", "$all", "$size", "$elemMatch",
)
_REGEX_OPTIONS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "u": 0}

Cands = list  # the values a path reaches (see paths.resolve)
DocPred = Callable[[Mapping], bool]


def _accepted(ops) -> str:
    return ", ".join(ops)


# ---------------------------------------------------------------------------
# public


def compile_filter(filter) -> Callable[[dict], bool]:  # noqa: A002 - the name callers use
    """A predicate ``doc -> bool`` for a MongoDB-style filter, validated as a whole up front.

    Raises BadValueError for a filter that is not a document, an unknown operator, or an
    operator given the wrong kind of value; the message lists what is accepted.
    """
    return _compile_document(filter, "filter")


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


def _compile_document(flt, where: str) -> DocPred:
    if not isinstance(flt, Mapping):
        raise BadValueError(
            f"{where} must be a document such as {{'age': {{'$gt': 30}}}}, not {type(flt).__name__}"
        )
    preds: list[DocPred] = []
    for key, value in flt.items():
        if not isinstance(key, str):
            raise BadValueError(f"{where} has a non-string field name {key!r}; field names are strings")
        if key.startswith("$"):
            preds.append(_compile_logical(key, value, where))
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


def _compile_logical(op: str, value, where: str) -> DocPred:
    if op not in LOGICAL_OPERATORS:
        raise BadValueError(
            f"unknown top-level filter operator {op!r} in {where}; accepted: {_accepted(LOGICAL_OPERATORS)} "
            f"(field operators such as $gt go inside a field: {{'age': {{'$gt': 30}}}})"
        )
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(m, Mapping) for m in value):
        raise BadValueError(f"{op} needs a non-empty list of filter documents, such as [{{'a': 1}}, {{'b': 2}}]")
    members = [_compile_document(m, f"member {i} of {op}") for i, m in enumerate(value)]
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
            hint = " (it goes at the top of the filter, not inside a field)" if op in LOGICAL_OPERATORS else ""
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
    for v in values:
        if isinstance(v, Mapping) and _is_operator_doc(v, field):
            if list(v) != ["$elemMatch"]:
                raise BadValueError(f"$all on {field!r} takes values or {{'$elemMatch': ...}} documents")
            preds.append(_elem_match_pred(v["$elemMatch"], field))
        else:
            preds.append(_eq_pred(v))
    return _all_of(preds)


def _elem_match_pred(arg, field: str) -> FieldPred:
    if not isinstance(arg, Mapping) or not arg:
        raise BadValueError(f"$elemMatch on {field!r} needs a non-empty document, such as {{'$elemMatch': {{'$gt': 5}}}}")
    keys = list(arg)
    value_ops = all(isinstance(k, str) and k.startswith("$") and k not in LOGICAL_OPERATORS for k in keys)
    if value_ops:
        cond = _compile_operators(arg, field)

        def element_ok(e) -> bool:
            return cond(_Element(e))
    else:
        doc_pred = _compile_document(arg, f"$elemMatch on {field!r}")

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


# -- regular expressions -----------------------------------------------------


def _compile_regex(pattern, options, field: str) -> tuple[re.Pattern, Regex]:
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


def _native_regex(value, field: str) -> re.Pattern:
    if isinstance(value, re.Pattern):
        if isinstance(value.pattern, bytes):
            raise BadValueError(f"a regex on {field!r} must have a str pattern, not bytes")
        return value
    pattern, letters = regex_parts(value)
    return _build_regex(pattern, letters, field)


def _build_regex(pattern: str, letters: str, field: str) -> re.Pattern:
    flags = 0
    for letter in letters:
        if letter == "l":
            continue  # locale-dependent matching: not applicable to str patterns
        if letter not in _REGEX_OPTIONS:
            raise BadValueError(f"unknown regex option {letter!r} on {field!r}; accepted: i, m, s, x")
        flags |= _REGEX_OPTIONS[letter]
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise BadValueError(f"bad regular expression {pattern!r} on {field!r}: {exc}") from None


def _regex_matches_or_equal(c, rx: re.Pattern, q) -> bool:
    """As MongoDB: a string matches by the pattern, a stored regex by being the same regex."""
    if c is MISSING:
        return False
    rank = type_rank(c)
    if rank == STRING:
        return rx.search(c) is not None
    if rank == REGEX:
        return values_equal(c, q)
    return False


def _regex_pred(rx: re.Pattern, q) -> FieldPred:
    """``{f: /re/}``, ``{f: {$regex: ...}}`` and ``$not: /re/``: strings by ``rx``, stored regexes equal to ``q``."""
    def regex_pred(cands) -> bool:
        for c in cands:
            if type(c) is str:
                if rx.search(c) is not None:
                    return True
            elif _regex_matches_or_equal(c, rx, q):
                return True
        return False
    return _on_leaves(regex_pred)
