"""Dotted field paths (``a.b.0``): splitting, checking, and finding the values a path reaches in a document."""

from __future__ import annotations

from collections.abc import Mapping

from hoarddb.errors import BadValueError


class _Missing:
    """The marker for "no value here": a path that reaches nothing."""

    __slots__ = ()
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self):
        return (_Missing, ())


#: What :func:`resolve` and :func:`get_path` give for a path that reaches no value.
MISSING = _Missing()


def split_path(path, *, what: str = "field path") -> tuple[str, ...]:
    """The parts of a dotted path; refuses a non-string, an empty path or an empty part (``a..b``)."""
    if not isinstance(path, str):
        raise BadValueError(f"a {what} must be a string such as 'a' or 'a.b.0', not {type(path).__name__}")
    if path == "":
        raise BadValueError(f"a {what} must not be empty; accepted: a field name or a dotted path such as 'a.b.0'")
    parts = tuple(path.split("."))
    if "" in parts:
        raise BadValueError(
            f"{what} {path!r} has an empty part; accepted: names joined by single dots, such as 'a.b.0'"
        )
    return parts


def is_index(part: str) -> bool:
    """True when a path part names an array position (only ASCII digits, such as ``0`` or ``12``)."""
    return part.isascii() and part.isdigit()


def get_path(doc, parts, default=MISSING):
    """The one value at ``parts`` (from :func:`split_path`), descending documents by name and arrays by position.

    No array expansion: ``a.b`` on ``{a: [{b: 1}]}`` reaches nothing. ``default`` when absent.
    """
    value = doc
    for part in parts:
        if isinstance(value, Mapping):
            if part not in value:
                return default
            value = value[part]
        elif isinstance(value, (list, tuple)) and is_index(part):
            i = int(part)
            if i >= len(value):
                return default
            value = value[i]
        else:
            return default
    return value


def resolve(doc, parts, *, leaf_arrays: bool = True) -> list:
    """Every value a path reaches in ``doc`` as MongoDB's query matcher sees it, :data:`MISSING` for a dead end.

    Arrays met on the way are expanded: ``a.b`` on ``{a: [{b: 1}, {c: 2}, 3]}`` gives
    ``[1, MISSING]``: each document of the array gives its ``b`` (MISSING when it has
    none), other elements give nothing, and nested arrays are not expanded by a name part.
    A numeric part on an array takes that position, and also looks up the field of that
    name in the array's documents that have one. A name reaching a value that is neither
    a document nor an array before the path ends gives MISSING (``a.b`` on ``{a: 5}``); a
    position reaching one gives nothing (``a.0.b`` on ``{a: [5]}``), as MongoDB.

    An array at the end of the path reached by a name is given element by element and
    then whole (``[1, 2, [1, 2]]``), so a condition matches when an element or the whole
    array does; with ``leaf_arrays=False`` (for ``$size`` and ``$elemMatch``) it is given
    whole only. An array at the end reached by a position is always given whole only:
    ``a.0`` on ``{a: [[1, 2]]}`` gives ``[[1, 2]]``, never 1 or 2 (MongoDB's rule).

    A path that reaches nothing at all gives ``[MISSING]``. For a path through an array
    that reaches nothing (``a.b`` on ``{a: [1, 2]}`` or ``{a: []}``, ``a.5`` on a shorter
    array) MongoDB's matcher finds no value, not even a missing one, so there ``{"a.b":
    null}`` does not match; we count it as missing (docs/dev/values.md, "Where we depart").
    """
    out: list = []
    _walk(doc, parts, 0, out, leaf_arrays, False)
    if not out:
        out.append(MISSING)
    return out


def _walk(value, parts, i, out, leaf_arrays: bool, positional: bool) -> None:
    n = len(parts)
    while True:
        if i == n:
            if leaf_arrays and not positional and isinstance(value, (list, tuple)):
                out.extend(value)
            out.append(value)
            return
        part = parts[i]
        if isinstance(value, Mapping):
            if part not in value:
                out.append(MISSING)
                return
            value = value[part]
            i += 1
            positional = False
            continue
        if isinstance(value, (list, tuple)):
            if is_index(part):
                idx = int(part)
                if idx < len(value):
                    _walk(value[idx], parts, i + 1, out, leaf_arrays, True)
                for element in value:
                    if isinstance(element, Mapping) and part in element:
                        _walk(element, parts, i, out, leaf_arrays, False)
                return
            for element in value:
                if isinstance(element, Mapping):
                    _walk(element, parts, i, out, leaf_arrays, False)
            return
        if not positional:
            out.append(MISSING)  # a name reached a scalar and the path goes on: missing, as MongoDB
        return
