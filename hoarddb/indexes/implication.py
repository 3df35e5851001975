"""Whether a filter implies what a sparse or partial index asks of the documents it holds.

A sparse or partial index has no entry for some documents, so it may serve a search only
when every document the filter matches has an entry: the filter must show that a
document holds one of a sparse index's fields, or imply the whole partialFilterExpression.
The proof reads only conditions every match meets — the filter's own fields and those of
a top-level ``$and`` — and proves each condition of the expression from one condition on
the same field:

    expression                  implied by a filter condition on that field
    {f: v}, {f: {$eq: v}}       {f: v} or {f: {$eq: v}} with an equal value
    {f: {$exists: true}}        any condition no missing field meets: an equality to a
                                value other than null, $exists: true, $gt/$gte/$lt/$lte with
                                a bound other than null, MinKey or MaxKey, $in without null,
                                $type, $size, $all, $elemMatch, $regex
    {f: {$gt: b}} (and the      a range of the same type on the same side at least as
    other three bounds)         tight ({f: {$gte: c}} with c > b), or an equality (or every
                                value of an $in) meeting the bound
    {f: {$type: t}}             the same $type, or an equality to a string, boolean,
                                ObjectId or date of that type

Anything else proves nothing, and the index is not used (the search is still answered,
by another index or a full scan). Each proof holds element by element, so a field
holding an array changes nothing: the element that meets the filter's condition meets
the expression's too.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any

from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex

from ..values.filter import compile_filter
from ..values.keys import encode_key
from ..values.literal import literal
from ..values.order import NUMBER, compare, is_nan, type_rank

RANGES = ("$gt", "$gte", "$lt", "$lte")
#: Operators no missing field (and no null-only field) meets.
_PRESENT = ("$type", "$size", "$all", "$elemMatch", "$regex")
#: Types of one representation each: an equality to one of them fixes the field's BSON type.
_ONE_TYPE = (str, bool, ObjectId, datetime.datetime)


def conditions(filter: Mapping) -> dict[str, list[tuple[str, Any]]]:
    """``{field: [(operator, argument), ...]}`` for the conditions every match of ``filter``
    meets (top level and top-level ``$and``), an equality as ``("$eq", value)``."""
    out: dict[str, list] = {}
    _collect(filter, out)
    return out


def _collect(flt: Mapping, out: dict) -> None:
    for key, value in flt.items():
        if key == "$and":
            for member in value:
                if isinstance(member, Mapping):
                    _collect(member, out)
            continue
        if not isinstance(key, str) or key.startswith("$"):
            continue
        if isinstance(value, Mapping) and value and all(isinstance(k, str) and k.startswith("$") for k in value):
            out.setdefault(key, []).extend(value.items())
        else:
            out.setdefault(key, []).append(("$eq", value))


def holds_field(conds: list) -> bool:
    """Whether each document meeting these conditions on a field holds that field (not missing)."""
    for op, arg in conds:
        if op == "$eq" and arg is not None:
            return True
        if op == "$exists" and isinstance(arg, (bool, int, float)) and bool(arg):
            return True
        if op in RANGES and arg is not None and not isinstance(arg, (MinKey, MaxKey)):
            return True
        if op == "$in" and isinstance(arg, (list, tuple)) and all(v is not None for v in arg):
            return True
        if op in _PRESENT:
            return True
    return False


def sparse_refusal(fields: list[str], conds: dict) -> str | None:
    """Why a sparse index on ``fields`` cannot serve a filter of these conditions, or None if it can."""
    if any(holds_field(conds.get(f, [])) for f in fields):
        return None
    shown = ", ".join(fields)
    return (f"it is sparse, and the filter does not show that a document it matches holds {shown} "
            f"(a document without {'any of them' if len(fields) > 1 else 'it'} has no entry); a condition such as "
            f"{{{fields[0]}: {{$exists: true}}}} or an equality to a value other than null lets it serve")


def partial_refusal(expression: Mapping, conds: dict) -> str | None:
    """Why a partial index with this expression cannot serve a filter of these conditions, or None if it can."""
    for field, need in conditions(expression).items():
        for op, arg in need:
            if not _implied(op, arg, conds.get(field, [])):
                return (f"it is partial, and the filter does not imply its partialFilterExpression "
                        f"{literal(dict(expression))}: nothing in it implies {literal({field: {op: arg}})}; "
                        "it serves a search only when every document the filter matches is one it holds")
    return None


def _implied(op: str, arg: Any, conds: list) -> bool:
    """Whether one of ``conds`` (conditions on one field) implies the condition ``{op: arg}`` on it."""
    if op == "$exists":
        return holds_field(conds)
    for have, value in conds:
        if op == "$eq":
            if have == "$eq" and not _is_regex(value) and encode_key(value) == encode_key(arg):
                return True
        elif have == "$eq" and _value_meets(op, arg, value):
            return True
        elif have == "$in" and isinstance(value, (list, tuple)) and value and \
                all(_value_meets(op, arg, v) for v in value):
            return True
        elif op == "$type" and have == "$type" and value == arg:
            return True
        elif op in RANGES and have in RANGES and _range_implies(have, value, op, arg):
            return True
    return False


def _value_meets(op: str, arg: Any, value: Any) -> bool:
    """Whether a field equal to ``value`` (or an array holding it) meets ``{op: arg}``: for a range,
    any plain value; for $type, a value of one representation."""
    if _is_regex(value) or isinstance(value, (list, tuple, Mapping)) or value is None:
        return False
    if op == "$type" and not isinstance(value, _ONE_TYPE):
        return False
    if op not in RANGES and op != "$type":
        return False
    try:
        return compile_filter({"v": {op: arg}})({"v": value})
    except Exception:  # an operator this version's filters refuse proves nothing
        return False


def _range_implies(have: str, c: Any, need: str, b: Any) -> bool:
    """Whether ``{have: c}`` implies ``{need: b}`` (both bounds of one type, neither NaN)."""
    for bound in (b, c):
        if bound is None or isinstance(bound, (MinKey, MaxKey, list, tuple)) or _is_regex(bound):
            return False
    if type_rank(b) != type_rank(c) or (type_rank(b) == NUMBER and (is_nan(b) or is_nan(c))):
        return False
    r = compare(c, b)
    if need in ("$gt", "$gte"):
        if have == "$gt":
            return r >= 0
        if have == "$gte":
            return r > 0 or (r == 0 and need == "$gte")
        return False
    if have == "$lt":
        return r <= 0
    if have == "$lte":
        return r < 0 or (r == 0 and need == "$lte")
    return False


def _is_regex(value: Any) -> bool:
    return isinstance(value, (Regex, re.Pattern))
