"""Aggregation pipelines with MongoDB's meaning, as pure functions over an iterator of documents.

``compile_pipeline(stages)`` validates a pipeline once; ``.run(docs)`` gives its output
lazily, one document at a time, so a pipeline of ``$match``, ``$project``, ``$unwind``,
``$skip`` and ``$limit`` holds one document at a time. Two stages must see every document
before they give the first: ``$group`` (it holds its groups) and ``$sort`` (it holds the
documents, or only the first ``n`` when a ``$limit`` follows). Each counts what it holds;
past :class:`Limits` it refuses with LIMIT_EXCEEDED naming the stage and the limit. They
do not spill to disk.

Stages: ``$match $project $addFields $set $unset $group $sort $skip $limit $unwind $count
$sortByCount``, and ``$lookup`` when the caller gives a way to read another bucket.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from bson.int64 import Int64

from hoarddb.errors import BadValueError, LimitExceededError

from .codec import encode
from .expression import arith, compile_evaluator, is_number, number_kind  # one arithmetic for $sum and $add
from .filter import compile_filter
from .keys import encode_key
from .order import NUMBER, compare, number_value, type_rank
from .paths import MISSING, split_path
from .projection import compile_projection
from .sort import compile_sort

#: Every stage, in the order the docs list them.
STAGES = ("$match", "$project", "$addFields", "$set", "$unset", "$group", "$sort", "$skip", "$limit",
          "$unwind", "$count", "$sortByCount", "$lookup")
#: Every $group accumulator.
ACCUMULATORS = ("$sum", "$avg", "$min", "$max", "$count", "$push", "$addToSet", "$first", "$last")


@dataclass(frozen=True)
class Limits:
    """What one ``$group`` or ``$sort`` may hold in memory before it refuses.

    ``max_bytes`` counts the BSON size of what the stage keeps (a ``$sort``'s documents, a
    ``$group``'s keys and the values its ``$push``/``$addToSet`` gather); ``max_documents``
    the documents a ``$sort`` keeps or the groups a ``$group`` makes (None: no count).
    """

    max_bytes: int = 100 * 1024 * 1024
    max_documents: int | None = None


DEFAULT_LIMITS = Limits()


def _size(value) -> int:
    """The BSON size of a value (of a document holding it, for a value that is not a document)."""
    return len(encode(value if isinstance(value, Mapping) else {"v": value}))


def _over(stage: str, limits: Limits, held_bytes: int, held_docs: int) -> None:
    if held_bytes > limits.max_bytes:
        raise LimitExceededError(
            f"{stage} holds more than its memory limit of {limits.max_bytes} bytes; it refuses rather than "
            "spill to disk. Narrow the documents first with $match (or a filter an index serves), "
            f"add a $limit after a $sort, or raise the limit ({stage} max_bytes)")
    if limits.max_documents is not None and held_docs > limits.max_documents:
        what = "groups" if stage == "$group" else "documents"
        raise LimitExceededError(
            f"{stage} holds more than its limit of {limits.max_documents} {what}; it refuses rather than "
            f"spill to disk. Narrow the documents first with $match, or raise the limit ({stage} max_documents)")


Stage = Callable[[Iterator], Iterator]


class Pipeline:
    """A validated pipeline: :meth:`run` it over documents, as many times as wanted."""

    def __init__(self, stages: list[Stage], leading_match: Mapping | None, leading_sort: Mapping | None = None):
        self._stages = stages
        #: The filter of a first ``$match``, which a bucket may serve from an index (then
        #: it is still applied: the stage stays in the pipeline).
        self.leading_match = leading_match
        #: The specification of a ``$sort`` first or right after the first ``$match``, which a
        #: bucket may serve from an index's order (then it runs :meth:`run` with ``sorted=True``).
        self.leading_sort = leading_sort
        self._sort_at = 1 if leading_match is not None else 0

    def run(self, docs: Iterable, sorted: bool = False) -> Iterator[dict]:
        """The pipeline's output over ``docs``; ``sorted``: they come in ``leading_sort``'s
        order already, and that stage is left out."""
        it: Iterator = iter(docs)
        for i, stage in enumerate(self._stages):
            if sorted and i == self._sort_at:
                continue
            it = stage(it)
        return it


def compile_pipeline(pipeline, *, limits: Limits = DEFAULT_LIMITS,
                     lookup: Callable[[str], Iterable] | None = None) -> Pipeline:
    """Validate ``pipeline`` (a list of one-stage documents) up front; BadValueError saying what is wrong.

    ``lookup(bucket)`` gives the documents of another bucket of the same database, for
    ``$lookup`` (None: ``$lookup`` is refused).
    """
    if not isinstance(pipeline, (list, tuple)):
        raise BadValueError("a pipeline is a list of stages, such as [{'$match': {'a': 1}}, {'$count': 'n'}]")
    stages: list[Stage] = []
    specs = []
    for i, stage in enumerate(pipeline):
        if not isinstance(stage, Mapping) or len(stage) != 1:
            raise BadValueError(f"stage {i} of the pipeline must be a document with exactly one field, "
                                f"such as {{'$match': {{...}}}}")
        name, arg = next(iter(stage.items()))
        if name not in STAGES:
            raise BadValueError(f"stage {i}: unknown pipeline stage {name!r}; accepted: {', '.join(STAGES)}")
        specs.append((name, arg))
    for i, (name, arg) in enumerate(specs):
        where = f"stage {i} ({name})"
        if name == "$sort":
            following = specs[i + 1] if i + 1 < len(specs) else None
            keep = None
            if following is not None and following[0] == "$limit":
                keep = _count_arg("$limit", following[1], f"stage {i + 1} ($limit)", minimum=1)
            stages.append(_sort_stage(arg, keep, limits, where))
        elif name == "$lookup":
            stages.append(_lookup_stage(arg, lookup, where))
        else:
            stages.append(_BUILDERS[name](arg, limits, where))
    leading = specs[0][1] if specs and specs[0][0] == "$match" else None
    at = 1 if leading is not None else 0
    sort = specs[at][1] if len(specs) > at and specs[at][0] == "$sort" else None
    return Pipeline(stages, leading, sort)


def run_pipeline(docs: Iterable, pipeline, *, limits: Limits = DEFAULT_LIMITS, lookup=None) -> Iterator[dict]:
    """The output of ``pipeline`` over ``docs``, lazily (:func:`compile_pipeline`, then run)."""
    return compile_pipeline(pipeline, limits=limits, lookup=lookup).run(docs)


# ---------------------------------------------------------------------------
# stages that hold one document at a time


def _match_stage(arg, limits, where) -> Stage:
    if not isinstance(arg, Mapping):
        raise BadValueError(f"{where} takes a filter document, such as {{'status': 'A'}}")
    match = compile_filter(arg)
    return lambda it: (d for d in it if match(d))


def _project_stage(arg, limits, where) -> Stage:
    project = compile_projection(arg, what=f"{where}")
    return lambda it: (project(d) for d in it)


def _unset_stage(arg, limits, where) -> Stage:
    names = [arg] if isinstance(arg, str) else arg
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise BadValueError(f"{where} takes a field name or a list of them, such as ['notes', 'a.b']")
    project = compile_projection({n: 0 for n in names}, what=where)
    return lambda it: (project(d) for d in it)


def _add_fields_stage(arg, limits, where) -> Stage:
    if not isinstance(arg, Mapping) or not arg:
        raise BadValueError(f"{where} takes a document of fields and expressions, such as {{'total': "
                            "{'$add': ['$price', '$tax']}}")
    fields = []
    for name, expr in arg.items():
        parts = split_path(name, what=f"{where} field")
        if any(p.startswith("$") for p in parts):
            raise BadValueError(f"{where}: field {name!r} may not begin with '$'")
        fields.append((parts, _field_value(expr, where, name)))

    def add_fields(it):
        for doc in it:
            ctx = {"ROOT": doc, "CURRENT": doc}
            out = dict(doc)
            for parts, ev in fields:
                out = _set_field(out, parts, ev, ctx)
            yield out
    return add_fields


def _field_value(expr, where, name):
    """The value an $addFields field gets: an expression, or for a document of fields, each merged in."""
    if isinstance(expr, Mapping) and expr and not any(isinstance(k, str) and k.startswith("$") for k in expr):
        subs = [(split_path(k, what=f"{where} field"), _field_value(v, where, f"{name}.{k}"))
                for k, v in expr.items()]
        return ("merge", subs)
    return ("value", compile_evaluator(expr, where=f"{where} of {name!r}"))


def _set_field(doc, parts, spec, ctx):
    """``doc`` with ``spec`` written at ``parts`` (into each document of an array on the way)."""
    kind, body = spec
    head = parts[0]
    if len(parts) == 1:
        if kind == "value":
            v = body(ctx)
            if v is MISSING:
                return {k: x for k, x in doc.items() if k != head}
            doc = dict(doc)
            doc[head] = v
            return doc
        current = doc.get(head, MISSING)
        doc = dict(doc)
        doc[head] = _merge_into(current, body, ctx)
        return doc
    current = doc.get(head, MISSING)
    doc = dict(doc)
    if isinstance(current, (list, tuple)):
        doc[head] = [_set_field(e if isinstance(e, Mapping) else {}, parts[1:], spec, ctx) for e in current]
    else:
        doc[head] = _set_field(current if isinstance(current, Mapping) else {}, parts[1:], spec, ctx)
    return doc


def _merge_into(current, subs, ctx):
    if isinstance(current, (list, tuple)):
        return [_merge_into(e, subs, ctx) for e in current]
    base = dict(current) if isinstance(current, Mapping) else {}
    for parts, spec in subs:
        base = _set_field(base, parts, spec, ctx)
    return base


def _count_arg(stage, arg, where, minimum=0) -> int:
    if isinstance(arg, bool) or type_rank(arg) != NUMBER:
        raise BadValueError(f"{where} takes a whole number, got {arg!r:.40}")
    n = number_value(arg)
    if n != n or n != int(n) or int(n) < minimum or int(n) >= 1 << 63:
        raise BadValueError(f"{where} takes a whole number >= {minimum}, got {arg!r}")
    return int(n)


def _skip_stage(arg, limits, where) -> Stage:
    n = _count_arg("$skip", arg, where)
    return lambda it: itertools.islice(it, n, None)


def _limit_stage(arg, limits, where) -> Stage:
    n = _count_arg("$limit", arg, where, minimum=1)
    return lambda it: itertools.islice(it, n)


def _unwind_stage(arg, limits, where) -> Stage:
    if isinstance(arg, str):
        arg = {"path": arg}
    if not isinstance(arg, Mapping) or not isinstance(arg.get("path"), str):
        raise BadValueError(f"{where} takes a field path such as '$sizes', or {{path, includeArrayIndex, "
                            "preserveNullAndEmptyArrays}}")
    unknown = [k for k in arg if k not in ("path", "includeArrayIndex", "preserveNullAndEmptyArrays")]
    if unknown:
        raise BadValueError(f"{where} does not take {unknown[0]!r}; accepted: path, includeArrayIndex, "
                            "preserveNullAndEmptyArrays")
    path = arg["path"]
    if not path.startswith("$") or path.startswith("$$"):
        raise BadValueError(f"{where}: the path must be a field path beginning with '$', such as '$sizes'")
    parts = split_path(path[1:], what=f"{where} path")
    index_name = arg.get("includeArrayIndex")
    if index_name is not None and (not isinstance(index_name, str) or not index_name
                                   or index_name.startswith("$") or "." in index_name):
        raise BadValueError(f"{where}: includeArrayIndex is a field name (no '$', no '.')")
    preserve = arg.get("preserveNullAndEmptyArrays", False)
    if not isinstance(preserve, bool):
        raise BadValueError(f"{where}: preserveNullAndEmptyArrays is true or false")

    def unwind(it):
        for doc in it:
            value = _get(doc, parts)
            if isinstance(value, (list, tuple)):
                if not value:
                    if preserve:
                        out = _without(doc, parts)
                        if index_name:
                            out[index_name] = None
                        yield out
                    continue
                for i, element in enumerate(value):
                    out = _with(doc, parts, element)
                    if index_name:
                        out[index_name] = Int64(i)
                    yield out
            elif value is MISSING or value is None:
                if preserve:
                    out = dict(doc)
                    if index_name:
                        out[index_name] = None
                    yield out
            else:
                out = dict(doc)
                if index_name:
                    out[index_name] = None
                yield out
    return unwind


def _get(doc, parts):
    value = doc
    for p in parts:
        if not isinstance(value, Mapping):
            return MISSING
        value = value.get(p, MISSING)
        if value is MISSING:
            return MISSING
    return value


def _with(doc, parts, value):
    out = dict(doc)
    if len(parts) == 1:
        out[parts[0]] = value
    else:
        out[parts[0]] = _with(doc[parts[0]], parts[1:], value)
    return out


def _without(doc, parts):
    out = dict(doc)
    if len(parts) == 1:
        out.pop(parts[0], None)
    else:
        out[parts[0]] = _without(doc[parts[0]], parts[1:])
    return out


def _count_stage(arg, limits, where) -> Stage:
    if not isinstance(arg, str) or not arg or arg.startswith("$") or "." in arg:
        raise BadValueError(f"{where} takes the name of the field to hold the count, such as 'total' "
                            "(not empty, no '$', no '.')")

    def count(it):
        n = sum(1 for _ in it)
        if n:
            yield {arg: n}
    return count


# ---------------------------------------------------------------------------
# $sort and $group: they see every document first


def _sort_stage(arg, keep: int | None, limits: Limits, where) -> Stage:
    key = compile_sort(arg, what=where)

    def sort(it):
        held_bytes = 0
        if keep is not None:
            # Only the first `keep` are kept: a heap of that size (ties keep their order).
            heap: list = []
            counter = itertools.count()
            for doc in it:
                entry = (_Neg(key(doc)), -next(counter), doc)
                if len(heap) < keep:
                    heapq.heappush(heap, entry)
                    held_bytes += _size(doc)
                    _over("$sort", limits, held_bytes, len(heap))
                elif entry[0] > heap[0][0]:  # before the last kept (a tie comes later, so after it)
                    gone = heapq.heapreplace(heap, entry)
                    held_bytes += _size(doc) - _size(gone[2])
                    _over("$sort", limits, held_bytes, len(heap))
            yield from (e[2] for e in sorted(heap, key=lambda e: (e[0], e[1]), reverse=True))
            return
        held: list = []
        for doc in it:
            held.append(doc)
            held_bytes += _size(doc)
            _over("$sort", limits, held_bytes, len(held))
        held.sort(key=key)
        yield from held
    return sort


class _Neg:
    """A sort key reversed, so that a min-heap keeps the greatest keys on top (the ones to drop)."""

    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k

    def __lt__(self, other):
        return other.k < self.k

    def __gt__(self, other):
        return self.k < other.k

    def __eq__(self, other):
        return self.k == other.k


def _group_stage(arg, limits: Limits, where) -> Stage:
    if not isinstance(arg, Mapping) or "_id" not in arg:
        raise BadValueError(f"{where} needs an _id: the expression to group by (null for one group), such as "
                            "{'_id': '$category', 'total': {'$sum': '$amount'}}")
    key_ev = compile_evaluator(arg["_id"], where=f"{where} _id")
    accs = []
    for name, spec in arg.items():
        if name == "_id":
            continue
        if not isinstance(name, str) or not name or name.startswith("$") or "." in name:
            raise BadValueError(f"{where}: the field name {name!r} may not be empty, begin with '$' or hold a '.'")
        if not isinstance(spec, Mapping) or len(spec) != 1:
            raise BadValueError(f"{where}: the field {name!r} must be an accumulator such as {{'$sum': '$amount'}}; "
                                f"accepted: {', '.join(ACCUMULATORS)}")
        op, expr = next(iter(spec.items()))
        if op not in ACCUMULATORS:
            raise BadValueError(f"{where}: unknown accumulator {op!r} for {name!r}; accepted: {', '.join(ACCUMULATORS)}")
        if op == "$count":
            if expr != {}:
                raise BadValueError(f"{where}: $count takes an empty document, {{'$count': {{}}}}")
            op, expr = "$sum", 1
        accs.append((name, op, compile_evaluator(expr, where=f"{where} {op} of {name!r}")))

    def group(it):
        groups: dict = {}
        held_bytes = 0
        texts: dict = {}  # a string key's encoding, made once (strings are most keys)
        for doc in it:
            ctx = {"ROOT": doc, "CURRENT": doc}
            key = key_ev(ctx)
            if key is MISSING:
                key = None
            if type(key) is str:
                k = texts.get(key)
                if k is None:
                    k = texts[key] = encode_key(key)
            else:
                k = encode_key(key)
            state = groups.get(k)
            if state is None:
                state = groups[k] = [key] + [_start(op) for _name, op, _ev in accs]
                held_bytes += _size(key) + 16 * len(accs)
                _over("$group", limits, held_bytes, len(groups))
            for i, (_name, op, ev) in enumerate(accs, 1):
                grown = _accumulate(op, state, i, ev(ctx))
                if grown:
                    held_bytes += grown
                    _over("$group", limits, held_bytes, len(groups))
        for state in groups.values():
            out = {"_id": state[0]}
            for i, (name, op, _ev) in enumerate(accs, 1):
                out[name] = _finish(op, state[i])
            yield out
    return group


_INT32 = 1 << 31
_INT63 = 1 << 63


def _start(op):
    if op == "$sum":
        return [0, 0]  # total, kind (int)
    if op == "$avg":
        return [0, 0, 0]  # total, count, kind
    if op in ("$min", "$max", "$first", "$last"):
        return [MISSING, False]  # value, seen
    if op == "$push":
        return []
    return [[], set()]  # $addToSet: values, keys


def _accumulate(op, state, i, value) -> int:
    """Add ``value`` to accumulator ``i`` of a group; how many bytes it now holds more."""
    acc = state[i]
    if op == "$sum" or op == "$avg":
        # the common cases first: a double, or a small int into an int total, exactly as below
        t = type(value)
        if t is float and acc[-1] <= 2 and type(acc[0]) in (int, float):
            acc[0] = float(acc[0]) + value
            acc[-1] = 2
        elif t is int and acc[-1] == 0 and type(acc[0]) is int and -_INT32 <= value < _INT32 \
                and -_INT63 <= acc[0] + value < _INT63:
            acc[0] += value
        elif is_number(value):
            kind = max(acc[-1], number_kind(value))
            acc[0] = arith(kind, lambda a, b: a + b, acc[0], value)
            acc[-1] = max(kind, 2) if isinstance(acc[0], float) else kind  # a long past int64 became a double
        else:
            return 0
        if op == "$avg":
            acc[1] += 1
        return 0
    if op == "$first":
        if not acc[1]:
            acc[0], acc[1] = value, True
        return 0
    if op == "$last":
        acc[0], acc[1] = value, True
        return 0
    if op in ("$min", "$max"):
        if value is MISSING or value is None:
            return 0
        if acc[0] is MISSING or (compare(value, acc[0]) < 0 if op == "$min" else compare(value, acc[0]) > 0):
            acc[0] = value
        return 0
    if value is MISSING:
        return 0
    if op == "$push":
        acc.append(value)
        return _size(value)
    k = encode_key(value)
    if k in acc[1]:
        return 0
    acc[1].add(k)
    acc[0].append(value)
    return _size(value)


def _finish(op, acc):
    if op == "$sum":
        return acc[0]
    if op == "$avg":
        if not acc[1]:
            return None
        if acc[2] == 3:
            return arith(3, lambda a, b: a / b, acc[0], acc[1])
        return float(number_value(acc[0])) / acc[1]
    if op in ("$min", "$max"):
        return None if acc[0] is MISSING else acc[0]
    if op in ("$first", "$last"):
        return None if acc[0] is MISSING else acc[0]
    if op == "$push":
        return acc
    return acc[0]


def _sort_by_count_stage(arg, limits, where) -> Stage:
    group = _group_stage({"_id": arg, "count": {"$sum": 1}}, limits, where)
    sort = _sort_stage({"count": -1}, None, limits, where)
    return lambda it: sort(group(it))


# ---------------------------------------------------------------------------
# $lookup


def _lookup_stage(arg, lookup, where) -> Stage:
    fields = ("from", "localField", "foreignField", "as")
    if not isinstance(arg, Mapping) or set(arg) != set(fields) or not all(isinstance(arg[f], str) for f in fields):
        raise BadValueError(f"{where} takes {{from: bucket, localField, foreignField, as}} (all strings); "
                            "the pipeline form of $lookup is not supported")
    if lookup is None:
        raise BadValueError(f"{where}: $lookup is not available here; it joins buckets of one database")
    local = split_path(arg["localField"], what=f"{where} localField")
    foreign = arg["foreignField"]
    split_path(foreign, what=f"{where} foreignField")
    as_parts = split_path(arg["as"], what=f"{where} as")
    source = arg["from"]

    def join(it):
        for doc in it:
            values = _local_values(doc, local)
            match = compile_filter({foreign: {"$in": values}})
            found = [d for d in lookup(source) if match(d)]
            yield _with_path(doc, as_parts, found)
    return join


def _local_values(doc, parts) -> list:
    from .paths import resolve  # noqa: PLC0415

    values = [None if v is MISSING else v for v in resolve(doc, parts)]
    plain = [v for v in values if not isinstance(v, (list, tuple))] or [None]
    return plain


def _with_path(doc, parts, value):
    out = dict(doc)
    if len(parts) == 1:
        out[parts[0]] = value
    else:
        inner = doc.get(parts[0])
        out[parts[0]] = _with_path(inner if isinstance(inner, Mapping) else {}, parts[1:], value)
    return out


_BUILDERS = {
    "$match": _match_stage, "$project": _project_stage, "$addFields": _add_fields_stage, "$set": _add_fields_stage,
    "$unset": _unset_stage, "$group": _group_stage, "$skip": _skip_stage, "$limit": _limit_stage,
    "$unwind": _unwind_stage, "$count": _count_stage, "$sortByCount": _sort_by_count_stage,
}

__all__ = ["compile_pipeline", "run_pipeline", "Pipeline", "Limits", "DEFAULT_LIMITS", "STAGES", "ACCUMULATORS"]
