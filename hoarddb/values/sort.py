"""Sort specifications with MongoDB's meaning: several keys, values in the order of BSON types, arrays by an element.

A specification is ``{"Date": -1, "name": 1}`` (or a list of ``[field, direction]`` pairs):
documents are ordered by the first key, ties by the next. Values compare as
:func:`~hoarddb.values.order.compare` orders them (numbers < strings < objects < ... < dates,
numbers by value whatever their type, booleans apart). A missing field sorts as null. A field
holding an array sorts by its least element when ascending, its greatest when descending (an
empty array sorts before null); a dotted path through an array of documents looks at each
document's field, as MongoDB does. Documents that tie keep the order they came in.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Mapping

from hoarddb.errors import BadValueError

from .order import NUMBER, compare, number_value, type_rank
from .paths import is_index, split_path


class _Undefined:
    """What an empty array sorts as: after MinKey, before null."""

    __slots__ = ()


_UNDEFINED = _Undefined()


def _cmp(a, b) -> int:
    if a is _UNDEFINED or b is _UNDEFINED:
        if a is b:
            return 0
        other = b if a is _UNDEFINED else a
        below = type_rank(other) == 0  # MinKey
        sign = 1 if below else -1
        return sign if a is _UNDEFINED else -sign
    return compare(a, b)


def check_sort(spec, what: str = "sort") -> list[tuple[tuple[str, ...], int]]:
    """``[(path parts, 1 or -1)]`` of a sort specification; BadValueError saying what is accepted."""
    if isinstance(spec, Mapping):
        pairs = list(spec.items())
    elif isinstance(spec, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in spec):
        pairs = [tuple(p) for p in spec]
    else:
        raise BadValueError(
            f"{what} must be a document of fields and directions, such as {{'Date': -1, 'name': 1}}, "
            f"not {type(spec).__name__}")
    if not pairs:
        raise BadValueError(f"{what} needs at least one field, such as {{'Date': -1}}")
    keys = []
    for field, direction in pairs:
        parts = split_path(field, what=f"{what} field")
        if any(p.startswith("$") for p in parts):
            raise BadValueError(f"{what} field {field!r}: a field name may not begin with '$'")
        if isinstance(direction, bool) or type_rank(direction) != NUMBER or number_value(direction) not in (1, -1):
            raise BadValueError(
                f"{what} direction of {field!r} must be 1 (ascending) or -1 (descending), got {direction!r:.40}")
        keys.append((parts, int(number_value(direction))))
    return keys


def sort_values(doc, parts) -> list:
    """The values a document sorts by for a path: array elements one by one, null where missing."""
    out: list = []
    _collect(doc, parts, 0, out)
    return out


def _collect(value, parts, i, out) -> None:
    if i == len(parts):
        if isinstance(value, (list, tuple)):
            if value:
                out.extend(value)
            else:
                out.append(_UNDEFINED)
        else:
            out.append(value)
        return
    part = parts[i]
    if isinstance(value, Mapping):
        if part in value:
            _collect(value[part], parts, i + 1, out)
        else:
            out.append(None)
    elif isinstance(value, (list, tuple)):
        if is_index(part) and int(part) < len(value):
            _collect(value[int(part)], parts, i + 1, out)
            return
        before = len(out)
        for element in value:
            if isinstance(element, Mapping):
                _collect(element, parts, i, out)
        if len(out) == before:
            out.append(None)
    else:
        out.append(None)


def _extreme(values: list, direction: int):
    best = values[0]
    for v in values[1:]:
        c = _cmp(v, best)
        if (direction > 0 and c < 0) or (direction < 0 and c > 0):
            best = v
    return best


def compile_sort(spec, what: str = "sort") -> Callable[[Mapping], object]:
    """A key function for ``sorted``/``heapq`` that orders documents by ``spec`` (validated here)."""
    keys = check_sort(spec, what)

    def key(doc):
        return _Key([_extreme(sort_values(doc, parts), d) for parts, d in keys], keys)
    return key


@functools.total_ordering
class _Key:
    __slots__ = ("values", "keys")

    def __init__(self, values, keys):
        self.values = values
        self.keys = keys

    def _c(self, other) -> int:
        for a, b, (_parts, direction) in zip(self.values, other.values, self.keys):
            c = _cmp(a, b)
            if c:
                return c * direction
        return 0

    def __lt__(self, other):
        return self._c(other) < 0

    def __eq__(self, other):
        return self._c(other) == 0


def sort_documents(docs: Iterable, spec, limit: int | None = None) -> list:
    """``docs`` in the order of ``spec`` (stable); only the first ``limit`` when given, kept in a heap of that size."""
    key = compile_sort(spec)
    if limit is not None:
        return heapq.nsmallest(limit, docs, key=key)  # stable: ties keep their order
    return sorted(docs, key=key)
