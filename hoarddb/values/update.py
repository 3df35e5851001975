"""Update operators with MongoDB's meaning: validate an update document, and apply it to make a new document.

Positional parts reach array elements: ``a.$`` the first element the update's filter
matched (``query``), ``a.$[]`` every element, ``a.$[x]`` the elements that the array filter
named ``x`` matches (``array_filters``). :func:`upsert_document` builds the document an
upsert inserts: the filter's equality fields, then the update with ``$setOnInsert``.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import re
from collections.abc import Mapping

from bson.decimal128 import Decimal128, create_decimal128_context
from bson.int64 import Int64
from bson.regex import Regex
from bson.timestamp import Timestamp

from hoarddb.errors import BadValueError

from .filter import FIELD_OPERATORS, TOP_OPERATORS, compile_filter, equality_fields
from .keys import encode_key
from .literal import literal
from .order import NUMBER, RANK_NAMES, compare, type_rank, values_equal
from .paths import MISSING, is_index, split_path

#: The field that holds a document's key; no update may touch it.
DOC_KEY = "_id_"

#: Every update operator, in the order the docs list them.
UPDATE_OPERATORS = (
    "$set", "$unset", "$inc", "$mul", "$min", "$max", "$push", "$pull", "$pullAll", "$pop",
    "$addToSet", "$rename", "$currentDate", "$setOnInsert",
)
PUSH_MODIFIERS = ("$each", "$position", "$slice", "$sort")

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_DECIMAL128_CONTEXT = create_decimal128_context()


def _accepted(ops) -> str:
    return ", ".join(ops)


def is_number(value) -> bool:
    """True for int, Int64, float and Decimal128 (bool is not a number)."""
    return not isinstance(value, bool) and type_rank(value) == NUMBER


# ---------------------------------------------------------------------------
# validation: an update becomes a list of steps


class _Step:
    __slots__ = ("op", "path", "parts", "arg", "extra", "dynamic")

    def __init__(self, op, path, parts, arg, extra=None):
        self.op, self.path, self.parts, self.arg, self.extra = op, path, parts, arg, extra
        self.dynamic = any(p.startswith("$") for p in parts)

    def at(self, parts: tuple) -> "_Step":
        """This step on one concrete path (its positional parts replaced by positions)."""
        return _Step(self.op, ".".join(parts), parts, self.arg, self.extra)


def validate_update(update, array_filters=None) -> None:
    """Check an update document as a whole; raises BadValueError saying what is wrong and what is accepted."""
    compile_update(update, array_filters)


_IDENTIFIER = re.compile(r"[a-z][A-Za-z0-9]*\Z")


def _positional_kind(part: str) -> str | None:
    """None for a plain part; "$", "$[]", or the identifier of ``$[x]``."""
    if not part.startswith("$"):
        return None
    if part in ("$", "$[]"):
        return part
    if part.startswith("$[") and part.endswith("]") and _IDENTIFIER.match(part[2:-1]):
        return part[2:-1]
    return "?"


class Update:
    """A validated update, ready to apply to many documents (:func:`compile_update`)."""

    def __init__(self, steps: list, array_filters: dict, positional: bool):
        self.steps = steps
        self.array_filters = array_filters
        #: Whether a path holds ``$``, which needs the filter that matched the document.
        self.positional = positional
        self._position_filters: dict = {}

    def apply(self, doc, *, now: datetime.datetime | None = None, query=None, inserting: bool = False) -> dict:
        """A new document: ``doc`` (left untouched) with the update applied. ``query`` is the
        filter that matched ``doc`` (for ``a.$``); ``inserting``: an upsert inserts it, so
        ``$setOnInsert`` applies (otherwise it changes nothing)."""
        result = _copy(doc)
        position_of = None
        for step in self.steps:
            if step.op == "$setOnInsert" and not inserting:
                continue
            if not step.dynamic:
                _APPLY[step.op](result, step, now)
                continue
            if position_of is None:
                position_of = self._positions(doc, query, inserting)
            for parts in _expand(result, step, position_of, self.array_filters):
                _APPLY[step.op](result, step.at(parts), now)
        return result

    def _positions(self, doc, query, inserting: bool):
        """``prefix parts -> position`` of the first element each array the filter looks into matched."""
        cache: dict = {}

        def position_of(prefix: tuple, path: str) -> int:
            if prefix not in cache:
                cache[prefix] = None if inserting or query is None else _matched_position(
                    self._position_filters, query, doc, prefix)
            if cache[prefix] is None:
                raise BadValueError(
                    f"the positional operator in {path!r} did not find the match needed from the query: "
                    "the filter must look into that array (such as {'grades': 85} for 'grades.$'), and an "
                    "upsert's insert has no position; to reach every element use $[] or $[<name>] with arrayFilters")
            return cache[prefix]
        return position_of


def compile_update(update, array_filters=None) -> Update:
    """Validate ``update`` (and its ``arrayFilters``, a list of filter documents, each about one
    identifier used as ``$[<identifier>]``) once, to apply to many documents."""
    steps = _plan(update)
    used: dict[str, str] = {}
    positional = False
    for step in steps:
        for part in step.parts:
            kind = _positional_kind(part)
            if kind == "$":
                positional = True
            elif kind not in (None, "$[]"):
                used.setdefault(kind, step.path)
    return Update(steps, _array_filters(array_filters, used, update), positional)


def _array_filters(array_filters, used: dict, update) -> dict:
    """``identifier -> element predicate`` of arrayFilters, each used by the update and each used one given."""
    if array_filters is None:
        array_filters = []
    if not isinstance(array_filters, (list, tuple)):
        raise BadValueError("arrayFilters must be a list of filter documents, such as [{'elem.grade': {'$gte': 85}}]")
    compiled: dict = {}
    for i, flt in enumerate(array_filters):
        if not isinstance(flt, Mapping) or not flt:
            raise BadValueError(f"arrayFilters[{i}] must be a non-empty filter document, such as {{'x': {{'$gt': 1}}}}")
        names = _filter_identifiers(flt)
        if len(names) != 1:
            shown = " and ".join(repr(n) for n in sorted(names)) or "none"
            raise BadValueError(
                f"arrayFilters[{i}] must be about one identifier (the names before the first '.'), found {shown}")
        name = names.pop()
        if not _IDENTIFIER.match(name):
            raise BadValueError(
                f"arrayFilters[{i}]: the identifier {name!r} must begin with a lowercase letter and hold only "
                "letters and digits")
        if name in compiled:
            raise BadValueError(f"arrayFilters holds two filters for the identifier {name!r}; give one")
        match = compile_filter(flt)
        compiled[name] = lambda e, match=match, name=name: match({name: e})
    for name, path in used.items():
        if name not in compiled:
            raise BadValueError(f"no array filter found for the identifier {name!r} in the path {path!r}; "
                                f"add one to arrayFilters, such as [{{'{name}': {{'$gt': 0}}}}]")
    for name in compiled:
        if name not in used:
            raise BadValueError(f"the array filter for the identifier {name!r} is not used in the update; "
                                f"use it as '$[{name}]' in a path, or leave it out")
    return compiled


def _filter_identifiers(flt: Mapping) -> set:
    names = set()
    for key, value in flt.items():
        if key in ("$and", "$or", "$nor") and isinstance(value, (list, tuple)):
            for member in value:
                if isinstance(member, Mapping):
                    names |= _filter_identifiers(member)
        elif isinstance(key, str) and not key.startswith("$"):
            names.add(key.split(".")[0])
    return names


def _matched_position(cache: dict, query, doc, prefix: tuple):
    """The position of the first element of the array at ``prefix`` that meets, alone, every
    condition of ``query`` on a path into that array; None when no condition looks into it."""
    sub = cache.get(prefix, _UNSET)
    if sub is _UNSET:
        conditions: dict = {}
        _conditions_under(query, prefix, conditions)
        sub = cache[prefix] = compile_filter(conditions) if conditions else None
    if sub is None:
        return None
    array = _get(doc, prefix)
    if not isinstance(array, list):
        return None
    for i, element in enumerate(array):
        if sub(_with_value(doc, prefix, [element])):
            return i
    return None


_UNSET = object()


def _conditions_under(flt, prefix: tuple, out: dict) -> None:
    if not isinstance(flt, Mapping):
        return
    for key, value in flt.items():
        if key == "$and" and isinstance(value, (list, tuple)):
            for member in value:
                _conditions_under(member, prefix, out)
        elif isinstance(key, str) and not key.startswith("$"):
            parts = tuple(key.split("."))
            if parts[:len(prefix)] == prefix:
                out.setdefault("$and", []).append({key: value})


def _with_value(doc, parts: tuple, value):
    """A shallow copy of ``doc`` with ``value`` at ``parts`` (copies only the containers on the way)."""
    if not parts:
        return value
    head = parts[0]
    if isinstance(doc, Mapping):
        out = dict(doc)
        out[head] = _with_value(doc.get(head), parts[1:], value)
        return out
    if isinstance(doc, list) and is_index(head) and int(head) < len(doc):
        out = list(doc)
        out[int(head)] = _with_value(doc[int(head)], parts[1:], value)
        return out
    return doc


def _expand(root, step: _Step, position_of, array_filters: dict) -> list[tuple]:
    """The concrete paths a step with positional parts reaches in ``root``, in document order."""
    out: list[tuple] = []

    def walk(value, i: int, prefix: tuple) -> None:
        if i == len(step.parts):
            out.append(prefix)
            return
        part = step.parts[i]
        kind = _positional_kind(part)
        if kind is None:
            walk(_child(value, part), i + 1, prefix + (part,))
            return
        n = position_of(prefix, step.path) if kind == "$" else None
        if not isinstance(value, list):
            where = ".".join(prefix)
            if value is MISSING:
                raise BadValueError(f"{step.op} {step.path!r}: the path {where!r} must exist in the document "
                                    "in order to apply array updates")
            raise BadValueError(f"{step.op} {step.path!r}: cannot apply array updates to {where!r}, which holds "
                                f"{_shown(value)}, not an array")
        if n is not None:
            walk(_child(value, str(n)), i + 1, prefix + (str(n),))
            return
        keep = array_filters.get(kind)
        for j, element in enumerate(value):
            if keep is None or keep(element):
                walk(element, i + 1, prefix + (str(j),))

    walk(root, 0, ())
    return out


def _child(value, part: str):
    if isinstance(value, dict):
        return value.get(part, MISSING)
    if isinstance(value, list) and is_index(part):
        i = int(part)
        return value[i] if i < len(value) else MISSING
    return MISSING


def upsert_document(query, update: "Update", *, now: datetime.datetime | None = None) -> dict:
    """The document an upsert inserts when nothing matches ``query``: the fields the filter pins
    by equality (``{a: 1}``, ``{"b.c": {$eq: 2}}``, inside a top-level ``$and`` too; dotted paths
    become nested documents), then ``update`` applied with ``$setOnInsert``."""
    seed: dict = {}
    for path, value in equality_fields(query).items():
        if isinstance(value, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in value):
            continue
        parts = split_path(path, what="filter field")
        if parts[0] == DOC_KEY and len(parts) > 1:
            continue
        if _get(seed, parts) is not MISSING:
            continue
        _set(seed, parts, _copy(value), "upsert")
    if DOC_KEY in seed:
        seed = {DOC_KEY: seed[DOC_KEY], **{k: v for k, v in seed.items() if k != DOC_KEY}}
    return update.apply(seed, now=now, query=query, inserting=True)


def _plan(update) -> list[_Step]:
    if not isinstance(update, Mapping):
        raise BadValueError(
            f"an update must be a document of operators such as {{'$set': {{'a': 1}}}}, not {type(update).__name__}"
        )
    if not update:
        raise BadValueError(f"an update must not be empty; accepted operators: {_accepted(UPDATE_OPERATORS)}")
    steps: list[_Step] = []
    touched: list[tuple[tuple[str, ...], str, str]] = []  # (parts, path, operator)
    for op, fields in update.items():
        if not isinstance(op, str) or not op.startswith("$"):
            raise BadValueError(
                f"update key {op!r} is not an operator; an update takes operators such as "
                f"{{'$set': {{'{op}': ...}}}} (accepted: {_accepted(UPDATE_OPERATORS)}); "
                "to replace a whole document use put"
            )
        if op not in UPDATE_OPERATORS:
            raise BadValueError(f"unknown update operator {op!r}; accepted: {_accepted(UPDATE_OPERATORS)}")
        if not isinstance(fields, Mapping) or not fields:
            raise BadValueError(
                f"{op} needs a non-empty document of fields, such as {{'{op}': {{'field': ...}}}}"
            )
        for path, arg in fields.items():
            parts = _update_path(path, op)
            touched.append((parts, path, op))
            extra = _check_arg(op, path, arg)
            if op == "$rename":
                target = _update_path(arg, op, what="$rename target")
                if target == parts:
                    raise BadValueError(f"$rename of {path!r} to itself; give a different target name")
                touched.append((target, arg, op))
                extra = target
            steps.append(_Step(op, path, parts, arg, extra))
    _check_conflicts(touched)
    return steps


def _update_path(path, op: str, what: str = "field") -> tuple[str, ...]:
    parts = split_path(path, what=f"{op} {what}")
    if parts[0] == DOC_KEY:
        raise BadValueError(
            f"{op} cannot change {DOC_KEY!r}: it is the document's key and is fixed once written; "
            "to move a document to another key, delete it and insert it under the new key"
        )
    dollars = 0
    for i, part in enumerate(parts):
        kind = _positional_kind(part)
        if kind is None:
            continue
        if kind == "?" or i == 0 or op == "$rename" or what != "field":
            raise BadValueError(
                f"{op} {what} {path!r}: {part!r} is not a field name; after an array's name, '$' is the element "
                "the filter matched, '$[]' every element and '$[<identifier>]' the elements arrayFilters "
                "matches ($rename takes no positional parts)"
            )
        if kind == "$":
            dollars += 1
            if dollars > 1:
                raise BadValueError(f"{op} {what} {path!r}: too many positional '$' parts; give one")
    return parts


def _check_arg(op: str, path: str, arg):
    if op in ("$inc", "$mul"):
        if not is_number(arg):
            raise BadValueError(
                f"{op} of {path!r} needs a number (int, Int64, float or Decimal128), not {type(arg).__name__} {arg!r}"
            )
    elif op == "$rename":
        if not isinstance(arg, str):
            raise BadValueError(f"$rename of {path!r} needs the new field name as a string, not {type(arg).__name__}")
    elif op == "$pop":
        if is_number(arg) and compare(arg, 1) == 0:
            return 1
        if is_number(arg) and compare(arg, -1) == 0:
            return -1
        raise BadValueError(f"$pop of {path!r} takes 1 (remove the last element) or -1 (remove the first)")
    elif op == "$pullAll":
        if not isinstance(arg, (list, tuple)):
            raise BadValueError(f"$pullAll of {path!r} needs a list of values to remove")
    elif op == "$currentDate":
        if arg is True:
            return "date"
        if isinstance(arg, Mapping) and list(arg) == ["$type"] and arg["$type"] in ("date", "timestamp"):
            return arg["$type"]
        raise BadValueError(
            f"$currentDate of {path!r} takes true, {{'$type': 'date'}} or {{'$type': 'timestamp'}}"
        )
    elif op == "$push":
        return _push_modifiers(path, arg)
    elif op == "$addToSet":
        if _has_dollar_keys(arg):
            if list(arg) != ["$each"] or not isinstance(arg["$each"], (list, tuple)):
                raise BadValueError(
                    f"$addToSet of {path!r} takes a value or {{'$each': [values]}}; accepted modifier: $each"
                )
            return list(arg["$each"])
        return [arg]
    elif op == "$pull":
        return _pull_condition(path, arg)
    return None


def _has_dollar_keys(arg) -> bool:
    return isinstance(arg, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in arg)


def _push_modifiers(path: str, arg):
    if not _has_dollar_keys(arg):
        return {"$each": [arg]}
    unknown = [k for k in arg if k not in PUSH_MODIFIERS]
    if unknown or "$each" not in arg:
        raise BadValueError(
            f"$push of {path!r} takes a value or {{'$each': [values], ...}}; accepted modifiers: "
            f"{_accepted(PUSH_MODIFIERS)} ($each is required with the others)"
        )
    if not isinstance(arg["$each"], (list, tuple)):
        raise BadValueError(f"$push of {path!r}: $each needs a list of values")
    mods = {"$each": list(arg["$each"])}
    for name in ("$position", "$slice"):
        if name in arg:
            n = arg[name]
            if not is_number(n) or type_rank(n) != NUMBER or compare(n, _to_int(n)) != 0:
                raise BadValueError(f"$push of {path!r}: {name} needs a whole number")
            mods[name] = _to_int(n)
    if "$sort" in arg:
        mods["$sort"] = _sort_spec(path, arg["$sort"])
    return mods


def _to_int(n) -> int:
    try:
        if isinstance(n, Decimal128):
            return int(n.to_decimal())
        return int(n)
    except (ValueError, OverflowError, decimal.InvalidOperation):
        return 0


def _sort_spec(path: str, spec):
    def direction(d) -> int:
        if is_number(d) and compare(d, 1) == 0:
            return 1
        if is_number(d) and compare(d, -1) == 0:
            return -1
        raise BadValueError(f"$push of {path!r}: $sort directions are 1 (ascending) or -1 (descending)")

    if isinstance(spec, Mapping):
        if not spec:
            raise BadValueError(f"$push of {path!r}: $sort needs 1, -1 or a document such as {{'score': -1}}")
        return [(split_path(k, what="$sort field"), direction(d)) for k, d in spec.items()]
    return direction(spec)


def _pull_condition(path: str, arg):
    """A predicate on one array element for $pull, chosen as MongoDB chooses it.

    An operator condition (``{$gte: 6}``) or a regex is applied to each element as a field's
    value would be (so a regex matches strings by the pattern). Any other document, the
    empty one included, is a filter applied to each element that is a document (``{}``
    removes every document). Anything else removes the elements equal to it.
    """
    if isinstance(arg, Mapping):
        keys = list(arg)
        if keys and all(isinstance(k, str) and k.startswith("$") and k not in TOP_OPERATORS for k in keys):
            unknown = [k for k in keys if k not in FIELD_OPERATORS]
            if unknown:
                raise BadValueError(
                    f"unknown operator {unknown[0]!r} in $pull of {path!r}; accepted: {_accepted(FIELD_OPERATORS)}"
                )
            match = compile_filter({"v": arg})
            return lambda e: match({"v": e})
        match = compile_filter(arg)
        return lambda e: isinstance(e, Mapping) and match(e)
    if isinstance(arg, (Regex, re.Pattern)):
        match = compile_filter({"v": arg})
        return lambda e: match({"v": e})
    return lambda e: values_equal(e, arg)


def _check_conflicts(touched) -> None:
    ordered = sorted(touched, key=lambda t: t[0])
    for (a, a_path, a_op), (b, b_path, b_op) in zip(ordered, ordered[1:]):
        if b[:len(a)] == a:
            raise BadValueError(
                f"update operators conflict: {a_op} {a_path!r} and {b_op} {b_path!r} touch the same field; "
                "change each field (or a field and what lies under it) in one operator only"
            )


# ---------------------------------------------------------------------------
# applying


def apply_update(doc, update, *, now: datetime.datetime | None = None, query=None, array_filters=None,
                 inserting: bool = False) -> dict:
    """A new document: ``doc`` (left untouched) with ``update`` applied; validates ``update`` first.

    Operators apply in the order written, fields in the order written. ``now`` is the time
    ``$currentDate`` writes (default: the current UTC time, to the millisecond). ``query``
    is the filter that matched ``doc`` (for ``a.$``), ``array_filters`` the filters of
    ``a.$[x]``; ``inserting`` applies ``$setOnInsert`` (:meth:`Update.apply`).
    Raises BadValueError for an update that does not fit the document, such as ``$inc``
    of a string field or ``$push`` onto a non-array.
    """
    return compile_update(update, array_filters).apply(doc, now=now, query=query, inserting=inserting)


def _copy(value):
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(v) for v in value]
    return value


#: A value shown in a message is cut to this many characters.
_SHOWN_CHARS = 60


def _shown(value) -> str:
    """A stored value for a message: its BSON type and its HQL literal, cut short (``string "x"``)."""
    if value is None:
        return "null"
    text = literal(value)
    if len(text) > _SHOWN_CHARS:
        text = text[:_SHOWN_CHARS] + "..."
    return f"{RANK_NAMES[type_rank(value)]} {text}"


def _describe(parts, upto: int) -> str:
    return ".".join(parts[:upto]) or "the document"


def _get(root, parts):
    value = root
    for part in parts:
        if isinstance(value, dict):
            value = value.get(part, MISSING)
        elif isinstance(value, list) and is_index(part):
            i = int(part)
            value = value[i] if i < len(value) else MISSING
        else:
            return MISSING
        if value is MISSING:
            return MISSING
    return value


def _parent(root, parts, op: str):
    """The container that holds the last part of ``parts``, creating documents on the way."""
    value = root
    for i, part in enumerate(parts[:-1]):
        if isinstance(value, dict):
            nxt = value.get(part, MISSING)
            if nxt is MISSING:
                nxt = value[part] = {}
        elif isinstance(value, list):
            if not is_index(part):
                raise BadValueError(_cannot_traverse(op, parts, i))
            idx = int(part)
            if idx >= len(value):
                value.extend([None] * (idx - len(value)))
                value.append({})
            nxt = value[idx]
        else:
            raise BadValueError(_cannot_create(op, parts, i, value))
        value = nxt
    if isinstance(value, list) and not is_index(parts[-1]):
        raise BadValueError(_cannot_traverse(op, parts, len(parts) - 1))
    if not isinstance(value, (dict, list)):
        raise BadValueError(_cannot_create(op, parts, len(parts) - 1, value))
    return value


def _cannot_traverse(op, parts, i) -> str:
    return (
        f"{op} {'.'.join(parts)!r}: cannot use the part {parts[i]!r} to traverse the array "
        f"{_describe(parts, i)!r}; name a position such as '{_describe(parts, i)}.0'"
    )


def _cannot_create(op, parts, i, value) -> str:
    return (
        f"{op} {'.'.join(parts)!r}: cannot create field {parts[i]!r} inside "
        f"{_describe(parts, i)!r}, which holds {_shown(value)}, not a document"
    )


def _set(root, parts, value, op: str) -> None:
    parent = _parent(root, parts, op)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    else:
        idx = int(last)
        if idx >= len(parent):
            parent.extend([None] * (idx - len(parent) + 1))
        parent[idx] = value


def _unset(root, parts) -> None:
    parent = _get(root, parts[:-1]) if len(parts) > 1 else root
    last = parts[-1]
    if isinstance(parent, dict):
        parent.pop(last, None)
    elif isinstance(parent, list) and is_index(last) and int(last) < len(parent):
        parent[int(last)] = None  # as MongoDB: unsetting an array position leaves null, keeping positions


def _op_set(root, step, now) -> None:
    _set(root, step.parts, _copy(step.arg), step.op)


def _op_unset(root, step, now) -> None:
    _unset(root, step.parts)


def _arith(op: str, a, b):
    if isinstance(a, Decimal128) or isinstance(b, Decimal128):
        da, db = _to_decimal(a), _to_decimal(b)
        with decimal.localcontext(_DECIMAL128_CONTEXT):
            result = da + db if op == "$inc" else da * db
        return Decimal128(result)
    if isinstance(a, float) or isinstance(b, float):
        return float(a) + float(b) if op == "$inc" else float(a) * float(b)
    result = int(a) + int(b) if op == "$inc" else int(a) * int(b)
    if not _INT64_MIN <= result <= _INT64_MAX:
        raise BadValueError(
            f"{op} overflows a 64-bit integer ({result}); use a float or Decimal128 for numbers this large"
        )
    if isinstance(a, Int64) or isinstance(b, Int64):
        return Int64(result)
    return result


def _to_decimal(value) -> decimal.Decimal:
    if isinstance(value, Decimal128):
        return value.to_decimal()
    if isinstance(value, float):
        return decimal.Decimal(repr(value)) if value == value and abs(value) != float("inf") else decimal.Decimal(value)
    return decimal.Decimal(int(value))


def _zero_like(value):
    if isinstance(value, Decimal128):
        return Decimal128("0")
    if isinstance(value, float):
        return 0.0
    if isinstance(value, Int64):
        return Int64(0)
    return 0


def _op_arith(root, step, now) -> None:
    current = _get(root, step.parts)
    if current is MISSING:
        value = _copy(step.arg) if step.op == "$inc" else _zero_like(step.arg)
    elif not is_number(current):
        raise BadValueError(
            f"{step.op} of {step.path!r}: the field holds {_shown(current)}, not a number"
        )
    else:
        value = _arith(step.op, current, step.arg)
    _set(root, step.parts, value, step.op)


def _op_minmax(root, step, now) -> None:
    current = _get(root, step.parts)
    if current is MISSING:
        _set(root, step.parts, _copy(step.arg), step.op)
        return
    c = compare(step.arg, current)
    if (step.op == "$min" and c < 0) or (step.op == "$max" and c > 0):
        _set(root, step.parts, _copy(step.arg), step.op)


def _array_at(root, step, *, create: bool):
    current = _get(root, step.parts)
    if current is MISSING:
        if not create:
            return None
        current = []
        _set(root, step.parts, current, step.op)
        return current
    if not isinstance(current, list):
        raise BadValueError(
            f"{step.op} of {step.path!r}: the field holds {_shown(current)}, not an array"
        )
    return current


def _op_push(root, step, now) -> None:
    array = _array_at(root, step, create=True)
    mods = step.extra
    items = _copy(mods["$each"])
    position = mods.get("$position")
    if position is None:
        array.extend(items)
    else:
        if position < 0:
            position = max(len(array) + position, 0)
        array[position:position] = items
    if "$sort" in mods:
        spec = mods["$sort"]
        if isinstance(spec, int):
            array.sort(key=functools.cmp_to_key(lambda x, y: spec * compare(x, y)))
        else:
            array.sort(key=functools.cmp_to_key(functools.partial(_compare_by_fields, spec)))
    if "$slice" in mods:
        n = mods["$slice"]
        keep = array[:n] if n >= 0 else array[n:] if n else []
        array[:] = keep


def _compare_by_fields(spec, x, y) -> int:
    for parts, direction in spec:
        a = _get(x, parts) if isinstance(x, dict) else MISSING
        b = _get(y, parts) if isinstance(y, dict) else MISSING
        c = compare(None if a is MISSING else a, None if b is MISSING else b)
        if c:
            return c * direction
    return 0


#: Above this many element-value comparisons, $addToSet and $pullAll key the elements
#: instead (encode_key: equal values, equal bytes), in time linear in the two lists.
_KEYED_ABOVE = 4096


def _op_add_to_set(root, step, now) -> None:
    array = _array_at(root, step, create=True)
    if len(array) * len(step.extra) <= _KEYED_ABOVE:
        for item in step.extra:
            if not any(values_equal(e, item) for e in array):
                array.append(_copy(item))
        return
    # Regression: 2,000 values added to an array of 200,000 compared every pair, 70 s in
    # the group commit, every other client's write waiting.
    have = {encode_key(e) for e in array}
    for item in step.extra:
        key = encode_key(item)
        if key not in have:
            have.add(key)
            array.append(_copy(item))


def _op_pull(root, step, now) -> None:
    array = _array_at(root, step, create=False)
    if array is not None:
        pred = step.extra
        array[:] = [e for e in array if not pred(e)]


def _op_pull_all(root, step, now) -> None:
    array = _array_at(root, step, create=False)
    if array is None:
        return
    if len(array) * len(step.arg) <= _KEYED_ABOVE:
        array[:] = [e for e in array if not any(values_equal(e, v) for v in step.arg)]
    else:
        drop = {encode_key(v) for v in step.arg}
        array[:] = [e for e in array if encode_key(e) not in drop]


def _op_pop(root, step, now) -> None:
    array = _array_at(root, step, create=False)
    if array:
        array.pop(-1 if step.extra == 1 else 0)


def _dict_only(root, parts, op: str, path: str):
    """The value at ``parts`` reached through documents only ($rename does not go through arrays)."""
    value = root
    for i, part in enumerate(parts):
        if isinstance(value, list):
            raise BadValueError(
                f"{op} {path!r}: cannot rename through the array {_describe(parts, i)!r}; "
                "$rename works on document fields only"
            )
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def _op_rename(root, step, now) -> None:
    value = _dict_only(root, step.parts, step.op, step.path)
    if value is MISSING:
        return
    target = step.extra
    if isinstance(_dict_only(root, target[:-1], step.op, step.arg), list):
        raise BadValueError(f"$rename {step.path!r}: the target {step.arg!r} lies in an array; rename into documents only")
    _unset(root, step.parts)
    _set(root, target, value, step.op)


def _op_current_date(root, step, now) -> None:
    if now is None:
        now = datetime.datetime.now(datetime.timezone.utc)
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)
    if step.extra == "timestamp":
        _set(root, step.parts, Timestamp(int(now.timestamp()), 1), step.op)
    else:
        _set(root, step.parts, now, step.op)


_APPLY = {
    "$set": _op_set,
    "$setOnInsert": _op_set,
    "$unset": _op_unset,
    "$inc": _op_arith,
    "$mul": _op_arith,
    "$min": _op_minmax,
    "$max": _op_minmax,
    "$push": _op_push,
    "$pull": _op_pull,
    "$pullAll": _op_pull_all,
    "$pop": _op_pop,
    "$addToSet": _op_add_to_set,
    "$rename": _op_rename,
    "$currentDate": _op_current_date,
}
