"""Projections with MongoDB's meaning: keep some fields of a document (inclusion) or drop some (exclusion).

``{"name": 1, "address.city": 1}`` keeps those fields (nested paths go into documents, and
into each document of an array); ``{"notes": 0}`` keeps everything else. The document key,
``_id_``, is kept unless the projection says ``"_id_": 0`` (so is ``_id``, the key of a
``$group``'s output, for the habits of MongoDB users). Inclusion and exclusion cannot be
mixed, except for the key. In an inclusion, a field may also be computed by an aggregation
expression (``{"total": {"$add": ["$price", "$tax"]}}``); included fields keep the
document's order, computed ones follow in the projection's order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hoarddb.errors import BadValueError

from .expression import compile_evaluator
from .order import NUMBER, number_value, type_rank
from .paths import MISSING, split_path

#: Fields kept unless excluded by name: the document key, and the key of a $group's output.
KEY_FIELDS = ("_id_", "_id")


def compile_projection(spec, *, what: str = "projection", expressions: bool = True) -> Callable[[Mapping], dict]:
    """A function ``doc -> projected doc`` for ``spec``; BadValueError for a bad one, saying why.

    ``expressions`` (``$project``; find's projection too) lets a field be computed; find
    refuses its own projection operators (``$slice``, ``$elemMatch``, ``a.$``), which hoardDB
    does not implement, by name.
    """
    if not isinstance(spec, Mapping):
        raise BadValueError(f"{what} must be a document such as {{'name': 1}} or {{'notes': 0}}, "
                            f"not {type(spec).__name__}")
    tree: dict = {}
    mode = {"include": False, "exclude": False}
    keys: dict = {}
    _build(spec, (), tree, mode, keys, what, expressions)
    if mode["include"] and mode["exclude"]:
        raise BadValueError(
            f"{what} mixes inclusion and exclusion: name the fields to keep (1) or the fields to drop (0), "
            f"not both (only {', '.join(KEY_FIELDS)} may be dropped from an inclusion)")
    if mode["include"] or (not mode["exclude"] and any(keys.values())):  # {_id_: 1} alone keeps only the key
        for k in KEY_FIELDS:
            if keys.get(k, True) and k not in tree:
                tree[k] = True
        return lambda doc: _include(doc, tree, doc)
    for k, keep in keys.items():
        if not keep:
            tree[k] = False
    return lambda doc: _exclude(doc, tree)


def _build(spec: Mapping, prefix: tuple, tree: dict, mode: dict, keys: dict, what: str, expressions: bool) -> None:
    if not spec and not prefix:
        raise BadValueError(f"{what} must name at least one field")
    for field, value in spec.items():
        parts = split_path(field, what=f"{what} field")
        if any(p.startswith("$") for p in parts):
            if parts[-1] == "$":
                raise BadValueError(f"{what} field {field!r}: the positional projection 'a.$' is not supported; "
                                    "use aggregate with $project and $filter")
            raise BadValueError(f"{what} field {field!r}: a field name may not begin with '$'")
        full = prefix + parts
        if isinstance(value, Mapping) and value and not any(isinstance(k, str) and k.startswith("$") for k in value):
            _build(value, full, tree, mode, keys, what, expressions)  # {a: {b: 1}} is {"a.b": 1}
            continue
        if isinstance(value, Mapping) and value:
            op = next(iter(value))
            if op in ("$slice", "$elemMatch", "$meta") and not expressions:
                raise BadValueError(f"{what} of {field!r}: the projection operator {op} is not supported; "
                                    "use aggregate with $project ($slice, $filter)")
        if isinstance(value, bool) or (type_rank(value) == NUMBER and not isinstance(value, bool)):
            keep = bool(value) if isinstance(value, bool) else number_value(value) != 0
            node: object = keep
        elif expressions:
            node = _Computed(compile_evaluator(value, where=f"{what} of {field!r}"))
            keep = True
        else:
            raise BadValueError(f"{what} of {field!r} must be 1 (keep) or 0 (drop), got {value!r:.40}")
        if len(full) == 1 and full[0] in KEY_FIELDS and not isinstance(node, _Computed):
            keys[full[0]] = keep
            if keep:
                tree[full[0]] = True
            continue
        mode["include" if keep else "exclude"] = True
        _place(tree, full, node, what)


class _Computed:
    __slots__ = ("evaluate",)

    def __init__(self, evaluate):
        self.evaluate = evaluate


def _place(tree: dict, parts: tuple, node, what: str) -> None:
    at = tree
    for i, part in enumerate(parts[:-1]):
        nxt = at.get(part)
        if nxt is None:
            nxt = at[part] = {}
        elif not isinstance(nxt, dict):
            raise BadValueError(f"{what}: path collision at {'.'.join(parts)!r}: {'.'.join(parts[:i + 1])!r} "
                                "is named on its own too")
        at = nxt
    if parts[-1] in at:
        raise BadValueError(f"{what}: path collision at {'.'.join(parts)!r}: it is named twice, or with a path "
                            "inside it")
    at[parts[-1]] = node


def _include(value, tree: dict, root) -> dict:
    out = {}
    for name, v in value.items():
        node = tree.get(name)
        if node is True:
            out[name] = v
        elif isinstance(node, dict):
            sub = _include_value(v, node, root)
            if sub is not MISSING:
                out[name] = sub
    for name, node in tree.items():
        if isinstance(node, _Computed):
            v = node.evaluate({"ROOT": root, "CURRENT": root})
            if v is not MISSING:
                out[name] = v
        elif isinstance(node, dict) and _has_computed(node) and name not in out:
            out[name] = _include({}, node, root)
    return out


def _include_value(v, node: dict, root):
    if isinstance(v, Mapping):
        return _include(v, node, root)
    if isinstance(v, (list, tuple)):
        return [_include_value(e, node, root) for e in v if isinstance(e, (Mapping, list, tuple))]
    if _has_computed(node):
        return _include({}, node, root)
    return MISSING


def _has_computed(node: dict) -> bool:
    return any(isinstance(n, _Computed) or (isinstance(n, dict) and _has_computed(n)) for n in node.values())


def _exclude(value, tree: dict) -> dict:
    out = {}
    for name, v in value.items():
        node = tree.get(name)
        if node is False:
            continue
        if isinstance(node, dict):
            out[name] = _exclude_value(v, node)
        else:
            out[name] = v
    return out


def _exclude_value(v, node: dict):
    if isinstance(v, Mapping):
        return _exclude(v, node)
    if isinstance(v, (list, tuple)):
        return [_exclude_value(e, node) for e in v]
    return v
