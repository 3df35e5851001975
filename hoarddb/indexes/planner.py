"""The planner: which index serves a search, why the others lost, and the refusal of a not-ready index.

An index serves a search when its first fields are fixed by equality in the filter (a
prefix, in declaration order). Among those, the one covering more fields wins, then a
unique one, then the one declared first — so the choice is the same every time. A sparse
or partial index competes only when every document the filter matches has an entry in
it (hoarddb.indexes.implication); when it cannot, explain's ``considered`` says why.
Nothing fits: a full scan. Either way ``search`` returns what ``find`` returns: every predicate is
checked on every document fetched, unless the entry read already proves it (``Shape.exact``).

The index is read at each key a document matching the pinned values may have: one per
value, or two for an array (:func:`lookups`: array fields are indexed by their elements),
so a filter pinning arrays reads the union of a few key ranges.

The choice depends on which fields the filter pins, never on their values, so the
common filter, ``{Email: "a@b"}`` or ``{CustomerID: "c1", Status: "open"}``, a flat
document of plain values, is planned once per *shape* (its field names, in order) and
kept by :class:`Shapes`; each search then only encodes its values into the index key.

A sort is served by the index when its first key is the index field right after the
equality prefix (the field a range reads, if any), read forward or backward so that the
direction matches (``desc`` fields are stored inverted): :func:`plan` then sets
``Plan.order`` and :meth:`Plan.walk` yields the document keys in that order, lazily, so
a limit stops the read early (the store takes a document holding an array in the sorted
field at its first entry met). A filter no index serves may still be read in the order
of an index whose first field is the sort's. Documents tie on that field within one run
of equal entries (read in key order, as find's stable sort leaves ties); later sort keys
are sorted in memory within each run. An index entry is where a document sorts in memory
(a missing field is null, an array sits at its least element going up and its greatest
going down, at its first entry met), except an empty array, which sorts before null but
is indexed as ``[]`` among arrays: a read that finds such an entry in its range sorts in
memory instead (:meth:`Plan.ordered`).
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from itertools import product
from typing import Any

from bson.objectid import ObjectId
from bson.regex import Regex

from ..errors import IndexNotReadyError
from ..values.filter import equality_fields
from bson.max_key import MaxKey
from bson.min_key import MinKey

from ..values.keys import encode_key
from ..values.literal import literal
from ..values.sort import check_sort
from ..values.order import NUMBER, is_nan, type_rank
from .implication import conditions, partial_refusal, sparse_refusal
from .maintenance import ARRAY_TYPES, Index, descending

FULL_SCAN = "none — full scan"
#: The most key prefixes one search reads: each array a filter pins in a compound index
#: doubles them, so past this the prefix stops short of the field that would exceed it.
MAX_PREFIXES = 16

#: The value types of a flat filter a :class:`Shape` serves. For each, two values have
#: one index key (hoarddb.values.keys) exactly when find's equality says they are equal,
#: and an index entry is written for every value (and array element) find's equality
#: looks at, a missing field as null: so an entry found for such a value is a match.
#: Not here, and so planned and checked the general way: regexes (patterns), documents
#: (operators, or literal documents), arrays (read under two keys, see :func:`lookups`),
#: and the other types (dates, Int64, Decimal128, binary...), rarer in lookups and with
#: more cases to their equality.
EXACT_TYPES = frozenset({str, int, float, bool, ObjectId, type(None)})


@dataclass
class Plan:
    """Plan is the chosen index (or None for a full scan), the key ranges to read, and the explanation.

    ``prefixes`` are one or more index key prefixes (several when the filter pins arrays,
    see :func:`lookups`); ``ranges`` the ``[start, stop)`` key ranges read, one per prefix:
    all of its entries, or those whose next field meets ``range`` (``(field, operator,
    bound)``). The documents to check are those their entries point to, each once.
    """

    index: Index | None
    prefixes: tuple = ()
    covered: int = 0
    considered: list = field(default_factory=list)
    ranges: tuple = ()
    range: tuple | None = None
    #: How the index serves the sort (None: it does not, the sort is done in memory), and
    #: why not when a sort was asked for.
    order: "Order | None" = None
    unsorted: str | None = None
    #: The index was taken for the sort alone (no index serves the filter).
    for_sort: bool = False

    @property
    def index_used(self) -> str:
        return self.index.name if self.index else FULL_SCAN

    def ordered(self, txn) -> bool:
        """Whether the index order is the sort's for this read: False (and ``order`` dropped,
        ``unsorted`` saying why) when the range holds an entry ``[]`` for the sorted field, an
        empty array (sorting before null) or an array holding one, which the index keeps among
        the arrays."""
        if self.order is None:
            return False
        (start, stop), = self.ranges
        empty = self.prefixes[0] + self.index.encoders[self.covered]([])
        if start <= empty < stop:
            cursor = txn.cursor()
            if cursor.set_range(empty) and cursor.key().startswith(empty):
                self.unsorted = (f"a document holds an empty array in {self.index.fields[self.covered]!r}, which "
                                 "sorts before null, and the index keeps it among the arrays")
                self.order = None
                if self.for_sort:  # then the index serves nothing: a full scan
                    self.index, self.prefixes, self.ranges = None, (), ()
                return False
        return True

    def walk(self, txn, counted: dict):
        """``(first of its run, document key)`` in the order of ``order``; a run is the entries
        of one value of the sorted field, and its documents come in key order whichever way
        the index is read (as find's stable sort leaves ties). A document whose sorted field
        holds an array has an entry per element, and the caller takes it at the first met
        (its least element going forward, its greatest going backward). Counts the entries
        read in ``counted["keys"]``. Lazy: stop iterating and nothing more is read; where the
        index has fields after the sorted one, a run's entries are in their order, so its
        document keys are read whole and sorted (each once) first."""
        if self.covered + 1 == len(self.index.fields):  # a run's entries end with the document key, in key order
            yield from self._entries(txn, counted)
            return
        run: set = set()
        for first, dk in self._entries(txn, counted):
            if first and run:
                yield from _run(sorted(run))
                run = set()
            run.add(dk)
        if run:
            yield from _run(sorted(run))

    @property
    def sorted_field(self) -> str:
        """The index field whose order serves the sort."""
        return self.index.fields[self.covered]

    def _entries(self, txn, counted: dict):
        """``(first of its run, document key)`` of each entry in ``ranges``, runs in the sort's
        order, each run read forward (see :meth:`walk`)."""
        (start, stop), = self.ranges
        ix = self.index
        upto = self.covered + 1
        doc_key_of = ix.doc_key_of
        # where a run's prefix is every value of a plain index's entry, the document key follows it
        tail = upto == len(ix.fields) and not ix.unique
        cursor = txn.cursor()
        if not self.order.backward:
            ok = cursor.set_range(start)
            run = None
            while ok:
                key = cursor.key()
                if key >= stop:
                    return
                counted["keys"] += 1
                first = run is None or not key.startswith(run)
                if first:
                    run = key[:ix.values_end(key, upto)]
                yield first, key[len(run):] if tail else doc_key_of(key, cursor.value())
                ok = cursor.next()
            return
        # backward: from the last entry below stop, one run at a time, each read forward
        ok = cursor.prev() if cursor.set_range(stop) else cursor.last()
        while ok:
            key = cursor.key()
            if key < start:
                return
            run = key[:ix.values_end(key, upto)]
            low = max(run, start)
            cursor.set_range(low)
            first = True
            while True:
                key = cursor.key()
                if key >= stop or not key.startswith(run):
                    break
                counted["keys"] += 1
                yield first, key[len(run):] if tail else doc_key_of(key, cursor.value())
                first = False
                if not cursor.next():
                    break
            cursor.set_range(low)
            ok = cursor.prev()

    def read(self, txn) -> tuple[set, int]:
        """``(encoded keys of the documents the entries in range point to, entries read)``."""
        doc_keys: set = set()
        examined = 0
        cursor = txn.cursor()
        doc_key_of = self.index.doc_key_of
        for start, stop in self.ranges:
            if cursor.set_range(start):
                for key, value in cursor:
                    if key >= stop:
                        break
                    examined += 1
                    doc_keys.add(doc_key_of(key, value))
        return doc_keys, examined

    def served(self) -> dict:
        """What explain says served the filter: the fields fixed by equality, and the range read."""
        if self.index is None:
            return {}
        out: dict = {"equality": list(self.index.fields[:self.covered])}
        if self.range is not None:
            f, op, bound = self.range
            out["range"] = {f: {op: bound}}
        if self.order is not None:
            out["sort"] = self.order.served(self.index, self.covered)
        return out


def _run(doc_keys: list):
    """A run's document keys as :meth:`Plan.walk` yields them."""
    for i, dk in enumerate(doc_keys):
        yield i == 0, dk


@dataclass(frozen=True)
class Order:
    """Order is how an index serves a sort: read ``backward`` or forward, it orders the
    sort's first key (the index field after the equality prefix); ``ties`` is the rest of
    the sort, done in memory among documents equal on that key (empty: none)."""

    backward: bool
    ties: tuple = ()

    def served(self, ix: Index, covered: int) -> dict:
        out = {"index": ix.fields[covered], "read": "backward" if self.backward else "forward"}
        if self.ties:
            out["ties"] = "memory"
        return out


def plan(filter: dict, indexes: list[Index], sort: Any = None) -> Plan:
    """The plan for ``search(filter)`` (a filter compile_filter accepted), and for its ``sort``
    if one is given (a specification check_sort accepts); raises IndexNotReadyError if the
    winner cannot serve."""
    sort_keys = check_sort(sort) if sort is not None else None
    if not indexes:
        return Plan(None, unsorted="the bucket has no index" if sort_keys else None)
    conds = conditions(filter)
    pinned = {k: v for k, v in equality_fields(filter, check=False).items() if not _is_pattern(v)}
    ranged = {f: r for f, c in conds.items() if (r := range_of(c)) is not None}
    refused = unusable(filter, indexes, conds)
    leading = sort_keys[0][0][0] if sort_keys and len(sort_keys[0][0]) == 1 else None
    best, covered, considered = choose(pinned, indexes, refused, ranged, leading)
    if best is None:
        return sorted_by(Plan(None, considered=considered), sort_keys, indexes, refused)
    if best.state != "ready":
        raise not_ready(best)
    keys: list[list[bytes]] = []
    count = 1
    for i, f in enumerate(best.fields[:covered]):
        options = lookups(pinned[f], best.encoders[i])
        if count * len(options) > MAX_PREFIXES:
            break  # a shorter prefix: the documents are checked against the whole filter anyway
        count *= len(options)
        keys.append(options)
    prefixes = tuple(best.prefix + b"".join(combo) for combo in product(*keys))
    served = None
    if len(keys) == covered < len(best.fields) and best.fields[covered] in ranged:
        op, bound = ranged[best.fields[covered]]
        served = (best.fields[covered], op, bound)
        start, stop = bounds(op, bound, best.descending[covered])
        ranges = tuple((p + start, p + stop) for p in prefixes)
    else:
        ranges = tuple((p, after(p)) for p in prefixes)
    chosen = Plan(best, prefixes=prefixes, covered=len(keys), considered=considered, ranges=ranges, range=served)
    return sorted_by(chosen, sort_keys, indexes, refused)


def sorted_by(p: Plan, keys: list | None, indexes: list[Index], refused: dict) -> Plan:
    """``p`` with the index order serving the sort ``keys`` (check_sort's pairs) where it can
    (see the module's docstring), else with ``unsorted`` saying why not. A plan with no index
    takes the first ready index whose first field is the sort's first key, and that
    ``refused`` (:func:`unusable`) does not name: it reads every entry, in order."""
    if not keys:
        return p
    parts, direction = keys[0]
    field = parts[0] if len(parts) == 1 else None
    if p.index is None:
        for ix in indexes:
            if ix.fields[0] == field and ix.state == "ready" and ix.name not in refused:
                considered = [{"index": ix.name, "covered": 0, "reason": f"chosen: it is ordered by {field!r}, the "
                               "sort's first key, and no index serves the filter"}]
                considered += [c for c in p.considered if c["index"] != ix.name]
                p = Plan(ix, prefixes=(ix.prefix,), considered=considered, ranges=((ix.prefix, after(ix.prefix)),),
                         for_sort=True)
                break
        else:
            p.unsorted = f"no index that may serve this filter has {'.'.join(parts)!r} as its first field"
            return p
    ix = p.index
    if len(p.ranges) != 1:
        p.unsorted = f"the filter pins an array, so {ix.name!r} is read at several places"
    elif p.covered >= len(ix.fields) or ix.fields[p.covered] != field:
        fixed = " after the fields the filter fixes" if p.covered else ""
        p.unsorted = f"the index read, {ix.name!r}, is not ordered by {'.'.join(parts)!r}{fixed}"
    else:
        p.order = Order(backward=(direction < 0) != ix.descending[p.covered], ties=tuple(keys[1:]))
    return p


def range_of(conds: list) -> tuple[str, Any] | None:
    """The range condition ``(operator, bound)`` an index may read for a field with these
    conditions: a lower bound if there is one, else an upper one; None when none fits.

    Only one bound is read, the other side running to the end of the bound's type: a
    field holding an array meets ``{$gt: 2, $lt: 4}`` with two elements (``[1, 7]``), and
    neither of its entries lies between 2 and 4. Every condition is checked on each
    document read. A bound that every type meets or none does (null, MinKey, MaxKey,
    NaN), an array or a pattern reads no range.
    """
    lower = upper = None
    for op, bound in conds:
        if op not in ("$gt", "$gte", "$lt", "$lte") or not _range_bound(bound):
            continue
        if op in ("$gt", "$gte"):
            lower = lower or (op, bound)
        else:
            upper = upper or (op, bound)
    return lower or upper


def _range_bound(bound: Any) -> bool:
    if bound is None or isinstance(bound, (MinKey, MaxKey, list, tuple)) or _is_pattern(bound):
        return False
    try:
        rank = type_rank(bound)
    except Exception:
        return False
    return not (rank == NUMBER and is_nan(bound))


def bounds(op: str, bound: Any, down: bool) -> tuple[bytes, bytes]:
    """``(start, stop)``: the bytes after an entry's prefix between which the next field's
    encoded value meets ``{op: bound}``, the other side at the end of the bound's type
    (its tag byte, hoarddb.values.keys). For a descending field the encodings are inverted,
    so the range is turned around."""
    e = encode_key(bound)
    tag = e[0]
    if op in ("$gt", "$gte"):
        lower, upper = (op, e), ("$tag_lt", bytes([tag + 1]))
    elif type_rank(bound) == NUMBER:  # from -inf: NaN sorts below it, and meets no range
        lower, upper = ("$gte", _MINUS_INFINITY), (op, e)
    else:
        lower, upper = ("$tag_ge", bytes([tag])), (op, e)
    if not down:
        start = {"$gte": lower[1], "$gt": after(lower[1]), "$tag_ge": lower[1]}[lower[0]]
        stop = {"$lt": upper[1], "$lte": after(upper[1]), "$tag_lt": upper[1]}[upper[0]]
        return start, stop
    # inverted: value >= e  <=>  inverted <= ~e;  value > e  <=>  inverted < ~e;  tag >= t  <=>  ~tag <= 255 - t
    start = {"$lt": after(descending(upper[1])), "$lte": descending(upper[1]),
             "$tag_lt": bytes([256 - upper[1][0]])}[upper[0]]
    stop = {"$gte": after(descending(lower[1])), "$gt": descending(lower[1]),
            "$tag_ge": bytes([256 - lower[1][0]])}[lower[0]]
    return start, stop


_MINUS_INFINITY = encode_key(float("-inf"))


def after(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes([stripped[-1] + 1])


def lookups(value: Any, encode=encode_key) -> list[bytes]:
    """The index values under which every document matching ``{field: value}`` has an entry.

    A plain value: its own key. A non-empty array ``v`` is matched by a field holding ``v``
    as an element (an entry ``v``) or equal to ``v`` (an array holding, among others, the
    element ``v[0]``): both keys, and the documents found are checked against the filter,
    as the second key finds more than ``v``'s matches. An empty array is one key: a field
    equal to ``[]`` and one holding the element ``[]`` both have the entry ``[]``.
    """
    if isinstance(value, ARRAY_TYPES) and value:
        return [encode(value), encode(value[0])]
    return [encode(value)]


def unusable(filter: dict, indexes: list[Index], conds: dict | None = None) -> dict[str, str]:
    """``{index name: why}`` for each sparse or partial index that cannot serve ``filter``: a
    document the filter matches might have no entry in it (hoarddb.indexes.implication)."""
    out: dict[str, str] = {}
    for ix in indexes:
        if not ix.filtered:
            continue
        if conds is None:
            conds = conditions(filter)
        why = sparse_refusal(ix.fields, conds) if ix.sparse else partial_refusal(ix.partial, conds)
        if why is not None:
            out[ix.name] = why
    return out


def choose(pinned, indexes: list[Index], unusable: dict | None = None,
           ranged=(), sorted_on: str | None = None) -> tuple[Index | None, int, list]:
    """``(index, fields covered, considered)`` for the fields ``pinned`` fixes by equality and
    those ``ranged`` bounds by a range (any containers of field names), leaving out the indexes
    ``unusable`` names (with its reason): the choice among the others depends on the names
    alone, never on the values. Between indexes covering as much, one whose next field is
    ``sorted_on`` (a sort's first field) wins: it serves the sort too."""
    candidates = []
    considered: list = []
    for position, ix in enumerate(indexes):
        covered = 0
        while covered < len(ix.fields) and ix.fields[covered] in pinned:
            covered += 1
        ranges = covered < len(ix.fields) and ix.fields[covered] in ranged
        if covered == 0 and not ranges:
            considered.append({"index": ix.name, "covered": 0,
                               "reason": f"its first field {ix.fields[0]!r} is not fixed by equality in the filter, "
                                         "nor bounded by $gt, $gte, $lt or $lte"})
            continue
        if unusable and ix.name in unusable:
            considered.append({"index": ix.name, "covered": covered, "reason": unusable[ix.name]})
            continue
        sorts = sorted_on is not None and covered < len(ix.fields) and ix.fields[covered] == sorted_on
        candidates.append((covered, ranges, sorts, ix.unique, -position, ix))
    if not candidates:
        return None, 0, considered
    candidates.sort(key=lambda c: c[:5], reverse=True)
    covered, ranges, sorts, _, _, best = candidates[0]
    for c_covered, c_ranges, c_sorts, c_unique, _, ix in candidates[1:]:
        if c_covered < covered:
            why = f"covers {c_covered} field(s) of the filter by equality; {best.name!r} covers {covered}"
        elif ranges and not c_ranges:
            why = (f"covers as many fields by equality as {best.name!r}, which also reads a range of "
                   f"{best.fields[covered]!r}")
        elif sorts and not c_sorts:
            why = f"covers as many fields as {best.name!r}, which also serves the sort on {sorted_on!r}"
        elif best.unique and not c_unique:
            why = f"covers as many fields as {best.name!r}, which is unique and this one is not"
        else:
            why = f"ties with {best.name!r}, which was declared first"
        considered.append({"index": ix.name, "covered": c_covered, "reason": why})
    considered.insert(0, {"index": best.name, "covered": covered, "reason": "chosen"})
    return best, covered, considered


def not_ready(ix: Index) -> IndexNotReadyError:
    """The refusal of a search on an index that is not ready, with its reason and what to do."""
    if ix.state == "building":
        done, total = ix.progress
        why = ("it is building: it is being rebuilt from the documents in the background, once after the "
               f"database opened (an index written by an older hoardDB, or conflicted), {done} of about {total} "
               "documents so far. Retry when describe shows it ready, or use find")
    elif ix.state == "conflicted":
        conflict = ix.decl.get("conflict") or {}
        docs = " and ".join(literal(d) for d in conflict.get("documents", []))
        values = ", ".join(f"{k} = {literal(v)}" for k, v in (conflict.get("values") or {}).items())
        why = (f"it is conflicted: documents {docs} both hold {values}. Nothing was deleted or chosen for you: "
               "change or delete one of them, then reopen the database; the index is rebuilt and becomes ready")
    else:
        why = ("it was declared by a newer version of hoardDB, and this version cannot keep its rules; "
               "it is kept unchanged. Use find, or run the newer version")
    return IndexNotReadyError(f"index {ix.name!r} cannot serve this search: {why}", index=ix.name, state=ix.state)


def _is_pattern(value: Any) -> bool:
    return isinstance(value, (Regex, re.Pattern))


@dataclass(frozen=True)
class Shape:
    """Shape is the plan of every flat filter with these field names: the index, and how to read it.

    ``fields`` are the covered fields in the index's order, whose values make the key
    prefix. ``whole``: a unique index with every field covered, so at most one entry,
    read by its key. ``in_order``: a plain index with every field covered, so the entries
    after the prefix are document keys in key order, one per document. ``exact``: the
    filter has no field but the covered ones, so every document an entry points to
    matches it and is not checked again.
    """

    index: Index | None
    fields: tuple = ()
    considered: tuple = ()
    whole: bool = False
    in_order: bool = False
    exact: bool = False
    #: A sparse or partial index could serve some filters of this shape: whether it may
    #: depends on the values, so each is planned by :func:`plan`.
    general: bool = False

    @property
    def index_used(self) -> str:
        return self.index.name if self.index else FULL_SCAN

    def served(self) -> dict:
        """What explain says served the filter (as :meth:`Plan.served`)."""
        return {"equality": list(self.fields)}

    def explained(self) -> list:
        """``considered`` for explain, as a list the caller may keep (and change)."""
        return [dict(c) for c in self.considered]


class Shapes:
    """Shapes keeps the :class:`Shape` of each flat filter shape seen on one bucket's indexes.

    A bucket's indexes are fixed when it is created; only their states change, and a
    search checks the chosen index's state every time. At most ``MAX`` shapes are kept
    (a caller inventing field names empties the cache, and is planned each time).
    """

    MAX = 512

    def __init__(self, indexes: list[Index]):
        self.indexes = indexes
        self._shapes: dict[tuple, Shape] = {}

    def of(self, filter: Any) -> Shape | None:
        """The shape of ``filter`` if it is a dict of top-level field names (no ``$``, no dots)
        to values of :data:`EXACT_TYPES`, else None (plan it with :func:`plan`)."""
        if type(filter) is not dict:
            return None
        for value in filter.values():
            if type(value) not in EXACT_TYPES:
                return None
        names = tuple(filter)
        shape = self._shapes.get(names)
        if shape is None:
            for name in names:
                if type(name) is not str or not name or name[0] == "$" or "." in name:
                    return None
            shape = self._plan(names)
            if len(self._shapes) >= self.MAX:
                self._shapes.clear()
            self._shapes[names] = shape
        return None if shape.general else shape

    def _plan(self, names: tuple) -> Shape:
        if not self.indexes:
            return Shape(None)
        if any(ix.filtered for ix in self.indexes):
            return Shape(None, general=True)
        best, covered, considered = choose(frozenset(names), self.indexes)
        if best is None:
            return Shape(None, considered=tuple(considered))
        return Shape(
            best, fields=tuple(best.fields[:covered]), considered=tuple(considered),
            whole=best.unique and covered == len(best.fields),
            in_order=not best.unique and covered == len(best.fields),
            exact=covered == len(names),
        )
