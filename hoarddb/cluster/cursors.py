"""Cluster cursors: a read over a spread bucket a batch at a time, its owners' cursors merged in one node's order; an owner's cursor relayed by the node asked.

The node a client asks (the entry node) sends the read to every node owning some of the
bucket's partitions, each told which (``_parts``, as every gather does), with a
``batch_size``: each owner opens a cursor of its own and answers its first batch. The
entry node keeps a cursor of its own in its engine's cursors (hoarddb/cursors.py: the id
the client sees, its idle timeout, ``max_cursors``, the ``hoarddb_cursors_open`` gauge,
its connection's ownership), whose source is a :class:`MergedSource`: each owner's cursor
id and the batch it last answered (at most one batch per owner held here), merged lazily
in the order one node gives — the sort's order when the read has ``sort``, then the
documents' encoded keys (``_id_``), exactly the order ``ClusterNode._gather`` gives when it
merges whole answers. ``skip``, ``limit`` and ``projection`` apply to the merged stream
(each owner is asked for its first ``skip + limit`` and whole documents, as in ``_gather``).

The source is read on a thread (the engine's cursors are synchronous); when an owner's
batch is used up it asks that owner's ``more`` on the event loop and waits
(``run_coroutine_threadsafe``). The entry node runs ``more`` of its cluster cursors off its
event loop (:meth:`ClusterNode.run`), so the loop is free to carry those requests.

When the cursor is dropped (read to its end, ``close_cursor``, its idle timeout, its
connection closed), every owner cursor still open is closed with ``close_cursor``; an
owner's own ``cursor_timeout`` is the backstop. An owner that cannot be reached when its
next batch is needed answers PARTITION_UNAVAILABLE naming it.

Partitions that move while the cursor is open are seen here by the map (a partition of a
part whose owner changed), and by the owner itself, whose part cursor ends at a move to or
from it (``Mover.part_shifted``: refused with ``shifted``). A read merged in key order
(:data:`RESUMED`: find, search and list of a hash bucket, list of a blob bucket, without
``sort``) then reads on (:meth:`MergedSource._resumed`): that part's partitions are asked
again of their owners by the map read anew, the read narrowed to the keys after the last
one the part gave (:func:`_past`), and the new parts merged in its place; tried
:data:`RESUMES` times, then refused. Other reads (a sort, a btree's, a search's explain, a distinct's or
an aggregate's documents, a partitioned queue's list) refuse the next batch: run them again.

A part that an owner must cut to its partitions (while a partition moves to or from it)
is answered whole by that owner, as today's gather answers it, and merged the same way.

The reads merged so: find, search and list of a spread hash bucket, range and list of a
spread btree, list of a spread blob bucket (:func:`open_cursor`); the documents a
distinct or an aggregate reads (:func:`matching`, for hoarddb/cluster/gathers.py), and an
aggregate's output (:func:`opened` over the pipeline). A read of one partition forwarded to
its owner (a whole bucket's) whose answer opened a cursor there is relayed (:func:`relay`):
a source of that one owner, its batches handed on as they come.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from .. import operations
from ..cursors import FIRST_BATCH, check_batch_size
from ..errors import CursorNotFoundError, HoardError, PartitionUnavailableError, error_from_answer
from ..values.keys import encode_key
from ..values.order import BINARY, BOOL, DATE, NUMBER, OBJECTID, STRING, is_nan, type_rank
from ..values.projection import compile_projection
from ..values.sort import compile_sort
from .partitions import partition_of

if TYPE_CHECKING:
    from .node import ClusterNode

#: The reads a cluster cursor serves, by bucket type: a spread hash bucket's documents merged by key (or
#: sort), a spread btree's entries by sort value, a spread blob bucket's by id.
STREAMED = {kind: frozenset(n for n, op in operations.VERBS.items()
                            if op.cursor and op.gather == "documents" and kind in op.types)
            for kind in ("hash", "btree", "blob")}  # find, search and list; range and list; list
#: A partitioned queue's read a cluster cursor serves: list (partition after partition; a heap's in pop order).
QUEUE_LISTED = frozenset(n for n, op in operations.VERBS.items()
                         if op.cursor and op.gather == "documents" and "fifo" in op.types)
_MORE = operations.MORE.name
_CLOSE = operations.CLOSE_CURSOR.name
#: The reads in key order whose part goes on from its partitions' owners now after they moved (:meth:`MergedSource.
#: _resumed`), by bucket type: find, search and list of a hash bucket, list of a blob bucket (not with ``sort``, nor
#: a search with ``explain``).
RESUMED = {kind: STREAMED[kind] for kind in ("hash", "blob")}
#: Those that page by an ``after`` key (list), not by a filter (find, search)
_PAGED = frozenset(n for n, op in operations.VERBS.items() if op.cursor == "batches")
#: How many times a part is opened again after its partitions moved (each open tried as many times while a
#: hand-over is under way) before its cursor is refused
RESUMES = 5
#: A document key's type rank -> the ``$type`` name of its values (the types a key may be, in key order)
_KEY_TYPES = {NUMBER: "number", STRING: "string", BINARY: "binData", OBJECTID: "objectId", BOOL: "bool", DATE: "date"}


def streams(op: operations.Operation, doc: dict, place: dict, pinned: bool) -> bool:
    """Whether a read asked with ``batch_size`` is answered by a cluster cursor (else whole, as before):
    find, search (an explain's too) or list over a spread hash bucket, range or list over a spread btree, list
    over a spread blob bucket or a partitioned queue; not pinned to one partition."""
    args = doc.get("args")
    if not (not pinned and place["partitions"] > 1 and isinstance(args, dict)
            and args.get("batch_size") is not None):
        return False
    if place.get("group") is not None:
        return op.name in QUEUE_LISTED and place["type"] in op.types
    return op.name in STREAMED.get(place["type"], ())


class _Part:
    """One owner's part of a cluster cursor: its node, its partitions, its cursor id, the batch it answered last."""

    __slots__ = ("node", "parts", "place", "cursor", "head", "asked", "cut", "opener", "request", "given", "last",
                 "shifted", "resumes")

    def __init__(self, node: str, parts: set[int], place: dict, answer: dict, cut: bool = True, opener=None):
        self.node = node
        self.parts = parts
        self.place = place
        self.cut = cut  # False: the owner holds exactly its partition (a relay), and its output may be no documents
        #: a coroutine function giving ``(owner, its first answer)``: the part is opened when the merge first needs
        #: it (a partitioned queue's list, partition after partition); None once opened
        self.opener = opener
        self.cursor = answer.get("cursor")
        self.head: deque = deque()
        self.asked = time.monotonic()  # when its owner last heard of its cursor (its idle clock started)
        #: the request its owner's cursor was opened with (without ``_parts``) when the read can go on from the
        #: partitions' new owners after a move (:data:`RESUMED`), else None
        self.request: dict | None = None
        self.given = 0  # how many documents the part has handed to the merge
        self.last: dict | None = None  # the last of them
        #: the refusal that ended its owner's cursor because partitions moved, seen by a keep-alive (or None)
        self.shifted: HoardError | None = None
        self.resumes = 0  # how many times this part's documents were opened again after a move
        self.take(answer)

    def take(self, answer: dict) -> None:
        """An owner's batch, kept to the partitions asked of it: a node may hold copies of others while they
        move to it, which its own cursor reads as it goes."""
        from .node import _NONE, route_value  # noqa: PLC0415

        if not self.cut:
            self.head.extend(answer.get("result") or [])
            return
        parts, place, partitions = self.parts, self.place, self.place["partitions"]
        for d in answer.get("result") or []:
            value = route_value(d, place)
            if value is _NONE or partition_of(value, partitions) in parts:
                self.head.append(d)


class MergedSource:
    """MergedSource is a cluster cursor's documents: its owners' batches merged, skip, limit and projection applied."""

    def __init__(self, node: "ClusterNode", loop: asyncio.AbstractEventLoop, db: str, bucket: str, place: dict,
                 parts: list[_Part], args: dict):
        self.node = node
        self.loop = loop
        self.db, self.bucket = db, bucket
        self.place = place  # (the node's live map: a partition whose owner changes is noticed at the next pull)
        self.parts = parts
        self.id: int | None = None
        #: the batch size the next pulls ask of an owner (a client's more's own, or about 1 MiB: the owner's default)
        self.size: int | None = None
        #: whether a client's ``more`` sets :attr:`size` (False when a pipeline or distinct reads this source: the
        #: client's batches are of their output, not of these documents)
        self.follows = True
        self._lock = threading.Lock()
        self._released = False
        skip, limit = args.get("skip") or 0, args.get("limit")
        self.skip = skip if isinstance(skip, int) and skip > 0 else 0
        self.limit = limit if isinstance(limit, int) and limit > 0 else None
        sort = args.get("sort")
        self.reverse = False
        if place["type"] == "btree":  # (equal sort values share a partition: their owner's order is kept)
            from .node import _btree_order  # noqa: PLC0415

            self.key = _btree_order(place, bucket)
            self.reverse = args.get("reverse") is True
        elif sort is not None:
            by_sort = compile_sort(sort)
            self.key = lambda d: (by_sort(d), encode_key(d["_id_"]))
        else:
            self.key = lambda d: encode_key(d["_id_"])
        self.project = compile_projection(args["projection"]) if args.get("projection") is not None else None
        #: whether the parts are read one after the other (a partitioned fifo's list) rather than merged by key
        self.chained = False

    def __iter__(self):
        try:
            if len(self.parts) == 1:  # (one owner: its order, and nothing to compare; a relay's may not be documents)
                merged = self._docs(self.parts[0])
            elif self.chained:  # (each part opened once the one before is read to its end)
                merged = itertools.chain.from_iterable(self._docs(p) for p in self.parts)
            else:
                merged = heapq.merge(*(self._docs(p) for p in self.parts), key=self.key, reverse=self.reverse)
            stop = None if self.limit is None else self.skip + self.limit
            for doc in itertools.islice(merged, self.skip, stop):
                yield doc if self.project is None else self.project(doc)
        finally:
            self.release()  # (a limit reached: the owners' cursors still open are closed)

    def _docs(self, part: _Part):
        while True:
            while part.head:
                doc = part.head.popleft()
                part.given += 1
                part.last = doc
                yield doc
            if part.shifted is not None:
                if part.request is None:
                    part.cursor = None
                    raise part.shifted
                break
            if part.cursor is None:
                if part.opener is None:
                    return
                self._open(part)
                continue
            try:
                self._pull(part)
            except PartitionUnavailableError as e:
                if part.request is None or not e.details.get("shifted"):
                    raise
                part.shifted = e
                break
        yield from self._resumed(part)

    def _resumed(self, part: _Part):
        """The rest of ``part``'s documents once its partitions moved (a read in key order): the read opened again
        on those partitions' owners now, its filter narrowed to the keys after the last one the part gave (a
        list: ``after`` it), their parts merged by key in its place. Refused after :data:`RESUMES` times."""
        _close_parts(self.node, self.loop, [part])
        why, part.shifted = part.shifted, None
        request = part.request
        if part.last is not None:
            request = _past(request, part.last["_id_"], part.given)
            if request is None:  # (a list's part that gave all it was asked for: nothing to read on)
                return
        if part.resumes >= RESUMES:
            raise PartitionUnavailableError(
                f"{why}; reading on from the partitions' new owners was tried {RESUMES} times (partitions kept "
                "moving)", node=part.node)
        subs = asyncio.run_coroutine_threadsafe(self._reopen(part, request, why), self.loop).result()
        self.parts = [p for p in self.parts if p is not part] + subs
        if self._released:  # (dropped while they opened: their cursors are closed too)
            _close_parts(self.node, self.loop, subs)
            return
        streams = [self._docs(s) for s in subs]
        if streams:
            yield from streams[0] if len(streams) == 1 else heapq.merge(*streams, key=self.key)

    async def _reopen(self, part: _Part, request: dict, why: HoardError) -> list[_Part]:
        """``request`` sent to the owners of ``part``'s partitions by the map read anew, tried again while a
        hand-over is under way. A find or search is marked ``_cuts``: an owner holding other partitions too (none
        moving) reads its local bucket with a cursor of its own, as at the open, without the limit, and
        :meth:`_Part.take` keeps the part's partitions (a list is at most ``max_peek`` documents: an owner cuts
        it, paging)."""
        from .moves import CUTS_FIELD  # noqa: PLC0415

        op = operations.OPERATIONS[request["op"]]
        sent = request if op.name in _PAGED else {**request, CUTS_FIELD: True}
        answers: list = []
        for attempt in range(RESUMES):
            await self.node.refresh_placement(self.db, self.bucket)
            place = self.node.placements.get((self.db, self.bucket), self.place)
            answers = await self.node._each_part(sent, place, op, partitions=part.parts)
            subs: list[_Part] = []
            for n, parts, a in answers:
                if a.get("ok") == 1:
                    sub = _Part(n, parts, place, a)
                    sub.request, sub.resumes = request, part.resumes + 1
                    subs.append(sub)
            bad = next((a for _n, _p, a in answers if a.get("ok") != 1), None)
            if bad is None:
                return subs
            _close_parts(self.node, self.loop, subs)
            details = bad.get("details") or {}
            if bad.get("codeName") != "PARTITION_UNAVAILABLE" or not (details.get("moved") or details.get("shifted")):
                break
            await asyncio.sleep(0.2 * (attempt + 1))
        raise PartitionUnavailableError(
            f"{why}; reading on from the partitions' owners now failed: {bad.get('message')}", node=part.node)

    def _open(self, part: _Part) -> None:
        """Open a part that was left to be opened when first needed (on a thread, never the event loop's)."""
        opener, part.opener = part.opener, None
        part.asked = time.monotonic()
        part.node, answer = asyncio.run_coroutine_threadsafe(opener(), self.loop).result()
        if answer.get("ok") != 1:
            raise error_from_answer(answer)
        part.cursor = answer.get("cursor")
        part.take(answer)
        if self._released:  # (dropped while it opened: its cursor is closed too)
            _close_parts(self.node, self.loop, [part])

    def _pull(self, part: _Part) -> None:
        """The next batch of ``part``'s owner (on a thread, never the event loop's)."""
        place = self.node.placements.get((self.db, self.bucket), self.place)  # (kept up by the catalog's watch)
        for p in part.parts:
            owner = place["owners"][p]
            if owner != part.node:
                raise PartitionUnavailableError(
                    f"partition {p} of {self.db}.{self.bucket} moved from node {part.node} to node {owner} while "
                    "this cursor was open; run the read again (with a filter past the last document you had, to "
                    "go on from there)", node=part.node, shifted=True)
        request: dict = {"op": _MORE, "cursor": part.cursor}
        if self.size is not None:
            request["batch_size"] = self.size
        part.asked = time.monotonic()
        if part.node == self.node.node_id:
            try:
                answer = self.node.server.engine.execute(request)
            except HoardError as e:
                answer = e.to_answer()
            why = self.node.mover.part_shifted(request["cursor"])  # (a move to or from here since it opened)
            if why is not None:
                answer = PartitionUnavailableError(why, node=part.node, shifted=True).to_answer()
        else:
            answer = asyncio.run_coroutine_threadsafe(_ask(self.node, part.node, request), self.loop).result()
        if answer.get("ok") != 1:
            part.cursor = None
            if answer.get("codeName") == "CURSOR_NOT_FOUND":
                raise CursorNotFoundError(
                    f"this cursor's part on node {part.node} is no longer open there (unread longer than that node's "
                    "cursor_timeout, or the node restarted); run the read again", cursor=self.id)
            raise error_from_answer(answer)
        part.cursor = answer.get("cursor")
        part.take(answer)

    def release(self) -> None:
        """Close every owner cursor still open (once; on any thread)."""
        with self._lock:
            if self._released:
                return
            self._released = True
        if self.id is not None:
            self.node.cursor_sources.pop(self.id, None)
        _close_parts(self.node, self.loop, self.parts)


def _close_parts(node: "ClusterNode", loop: asyncio.AbstractEventLoop, parts: list[_Part]) -> None:
    """Close the owner cursors of ``parts`` still open (on any thread): this node's at once, others' by close_cursor."""
    for part in parts:  # (its head is left to the collector: a pull on another thread may be reading it)
        cursor_id, part.cursor = part.cursor, None
        if cursor_id is None:
            continue
        if part.node == node.node_id:
            node.server.engine.cursors.close(cursor_id)
            continue
        try:
            loop.call_soon_threadsafe(lambda n=part.node, c=cursor_id: loop.create_task(
                _ask(node, n, {"op": _CLOSE, "cursor": [c]})))
        except RuntimeError:  # the loop is closed (the node stopping): the owner's timeout frees it
            pass


async def _ask(node: "ClusterNode", name: str, request: dict) -> dict:
    try:
        return await node._forward(name, request)
    except HoardError as e:
        return e.to_answer()


async def open_cursor(node: "ClusterNode", op: operations.Operation, doc: dict, place: dict) -> dict:
    """The first batch of a find, search, list or range over a spread bucket, and a cluster cursor when more
    remain."""
    from .node import _default_of  # noqa: PLC0415

    if place.get("group") is not None:
        return await open_queue_list(node, op, doc, place)
    args = doc["args"]
    size = check_batch_size(args["batch_size"])
    limit = args.get("limit")
    if limit is None and op.param("limit") is not None:
        limit = _default_of(place["type"], op.name, "limit")
    skip = args.get("skip") or 0
    merged_args = {**args, "limit": limit, "skip": skip}
    part = {k: v for k, v in args.items() if k not in ("skip", "projection", "batch_size")}
    if isinstance(limit, int) and isinstance(skip, int) and limit > 0:
        part["limit"] = limit + skip
    part["batch_size"] = FIRST_BATCH if size is None else size
    source, answers = await open_source(node, op, {**doc, "args": part}, place, merged_args)
    if op.name in RESUMED.get(place["type"], ()) and args.get("sort") is None and not args.get("explain"):
        # (merged in key order: read on after a move)
        for p in source.parts:
            p.request = {**doc, "args": part}
    out = await opened(node, source, f"{op.name} on {doc['db']}.{doc['bucket']}", source, size)
    used = {n: a.get("index_used") for n, _p, a in answers if "index_used" in a}
    if used and out.get("ok") == 1:  # a search: the index each node used, as a whole gather says
        out["index_used"] = next(iter(used.values()))
        out["index_used_by_node"] = used
    if out.get("ok") == 1 and any("explain" in a for _n, _p, a in answers):  # in the first batch, as one node's
        out["explain"] = merged_explain([(n, a) for n, _p, a in answers], skip, limit)
    return out


def merged_explain(answers: list[tuple[str, dict]], skip, limit) -> dict:
    """The ``explain`` of a search over a spread bucket from its owners' answers (each owner plans once for the
    partitions it holds, which share one local bucket there): the first owner's plan, the keys and documents
    every owner examined added up, what the merged answer returns (the owners were asked for ``skip + limit``
    each, without skip), and each owner's own explain in ``by_node``."""
    by_node = {n: a["explain"] for n, a in answers if isinstance(a.get("explain"), dict)}
    out = dict(next(iter(by_node.values()), {}))
    for field in ("keys_examined", "docs_examined"):
        out[field] = sum(e.get(field) or 0 for e in by_node.values())
    returned = sum(e.get("returned") or 0 for e in by_node.values())
    skip = skip if isinstance(skip, int) and not isinstance(skip, bool) and skip > 0 else 0
    returned = max(0, returned - skip)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        returned = min(returned, limit)
    out["returned"] = returned
    out["by_node"] = by_node
    return out


async def open_queue_list(node: "ClusterNode", op: operations.Operation, doc: dict, place: dict) -> dict:
    """The first batch of a partitioned queue's ``list``, and a cluster cursor when more remain: one part per
    partition, each its owner's own cursor over the partition's hidden bucket (hoarddb/cluster/queues.py), in the
    order the whole answer gives (the owners by name, each one's partitions in turn). A fifo's or lifo's parts
    are read one after the other, each opened when the one before is read to its end (so at most one batch is
    held here); a heap's are all opened at once and merged in pop order (highest priority first, ties in that
    order: heaps.merged_list's). ``after`` and ``limit`` count over the whole, as in the whole answer."""
    from .heaps import element_priority  # noqa: PLC0415
    from .node import NODE_FIELD, _default_of  # noqa: PLC0415

    args = doc["args"]
    size = check_batch_size(args["batch_size"])
    after, limit = args.get("after", 0), args.get("limit", _default_of("fifo", op.name, "limit"))
    if not (isinstance(after, int) and isinstance(limit, int)) or isinstance(after, bool) or after < 0:
        whole = {k: v for k, v in args.items() if k != "batch_size"}
        return await node._here_or_there(sorted(set(place["owners"]))[0], {**doc, "args": whole})  # refused there
    part_args = {**{k: v for k, v in args.items() if k != "batch_size"}, "after": 0, "limit": after + limit,
                 "batch_size": FIRST_BATCH if size is None else size}
    request = {k: v for k, v in doc.items() if k not in ("id", NODE_FIELD)} | {"args": part_args}
    order = sorted(range(place["partitions"]), key=lambda p: (place["owners"][p], p))
    db, bucket = doc["db"], doc["bucket"]
    source = MergedSource(node, asyncio.get_running_loop(), db, bucket, node.placements.get((db, bucket), place),
                          [], {"skip": after, "limit": limit})
    if place["type"] == "heap":
        answers = await asyncio.gather(*(_open_partition(node, request, p) for p in order))
        source.parts = [_Part(n, {p}, place, a, cut=False) for p, (n, a) in zip(order, answers) if a.get("ok") == 1]
        bad = next((a for _n, a in answers if a.get("ok") != 1), None)
        if bad is not None:
            source.release()
            raise error_from_answer(bad)
        source.key, source.reverse = element_priority, True  # (heapq.merge is stable: ties in the parts' order)
    else:
        source.parts = [_Part(place["owners"][p], {p}, place, {}, cut=False,
                              opener=lambda p=p: _open_partition(node, request, p)) for p in order]
        source.chained = True
    return await opened(node, source, f"{op.name} on {db}.{bucket}", source, size)


async def _open_partition(node: "ClusterNode", request: dict, p: int) -> tuple[str, dict]:
    """``request`` (a list with ``batch_size``) run on partition ``p`` of a partitioned queue by its owner (this
    node, or another over the node link), which opens a cursor of its own over the partition's hidden bucket:
    ``(owner, its first answer)``. Sent again to the new owner when the partition moved meanwhile."""
    from .node import NODE_FIELD  # noqa: PLC0415
    from .queues import PART_FIELD  # noqa: PLC0415

    db, bucket = request["db"], request["bucket"]
    request = {**request, PART_FIELD: p}
    attempts = 0
    while True:
        place = node.placements[(db, bucket)]
        owner = place["owners"][p]
        if owner == node.node_id:
            try:  # (marked as a node's: run here, never forwarded, or refused as moved)
                answer = await node._one_try({**request, NODE_FIELD: node.node_id}, place, p)
            except HoardError as e:
                answer = e.to_answer()
        else:
            answer = await _ask(node, owner, request)
        attempts += 1
        moved = answer.get("codeName") == "PARTITION_UNAVAILABLE" and (answer.get("details") or {}).get("moved")
        if not moved or attempts == 4:  # (as ClusterNode._one: the map read again three times at most)
            return owner, answer
        await node.refresh_placement(db, bucket)


def _past(request: dict, key, given: int) -> dict | None:
    """``request`` (a part's find, search or list) narrowed to the documents whose keys come after ``key`` in key
    order (``encode_key``'s), its limit to what is left once its part handed out ``given`` documents; None when
    the part gave all it was asked for. A find's or search's filter gets ``$gt`` on ``_id_``, which matches keys
    of the same type only (as MongoDB's), so the key types after ``key``'s are added by ``$type``."""
    args = dict(request["args"])
    limit = args.get("limit")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        if limit <= given:
            return None
        args["limit"] = limit - given
    if request["op"] in _PAGED:  # (by key, and its after is strict: exactly the merge's order)
        args["after"] = key
        return {**request, "args": args}
    rank = type_rank(key)
    if rank not in _KEY_TYPES:
        raise PartitionUnavailableError(f"a document key of type {type(key).__name__} cannot be read on from; "
                                        "run the read again")
    above = {"$gte": float("-inf")} if rank == NUMBER and is_nan(key) else {"$gt": key}  # (NaN: first of numbers)
    later = [name for r, name in _KEY_TYPES.items() if r > rank]
    past = {"$or": [{"_id_": above}, {"_id_": {"$type": later}}]} if later else {"_id_": above}
    filter_ = args.get("filter")
    args["filter"] = {"$and": [filter_, past]} if filter_ else past
    return {**request, "args": args}


async def open_source(node: "ClusterNode", op: operations.Operation, doc: dict, place: dict,
                      merged_args: dict) -> tuple[MergedSource, list[tuple[str, set[int], dict]]]:
    """``doc`` (its args those of each part, with a ``batch_size``) sent to every owner of the bucket's partitions,
    each opening a cursor of its own; the :class:`MergedSource` of their batches (``merged_args``: the skip,
    limit, projection and sort it applies), and each owner's first answer. Raises the first refusal (after
    closing the cursors the others opened)."""
    db, bucket = doc["db"], doc["bucket"]
    source = MergedSource(node, asyncio.get_running_loop(), db, bucket, node.placements.get((db, bucket), place),
                          [], merged_args)
    answers = await node._each_part(doc, place, op)  # (a part read whole here opens its cursor: Mover.part)
    source.parts = [_Part(n, p, place, a) for n, p, a in answers if a.get("ok") == 1]
    bad = next((a for _n, _p, a in answers if a.get("ok") != 1), None)
    if bad is not None:
        source.release()
        raise error_from_answer(bad)
    return source, answers


async def opened(node: "ClusterNode", source: MergedSource, what: str, documents, size: int | None,
                 extras: dict | None = None) -> dict:
    """The answer of a read whose ``documents`` come from ``source`` (the source itself, or a pipeline over it):
    its first batch, and the id of a cursor of this node's engine when more remain, whose ``more`` runs off
    the event loop (:meth:`ClusterNode.takes` claims it) and whose close closes the owners' cursors."""
    cursors = node.server.engine.cursors

    def closed() -> None:
        if source.id is not None:
            node.cursor_sources.pop(source.id, None)
        source.release()
    try:
        answer = await asyncio.get_running_loop().run_in_executor(
            None, lambda: cursors.open(what, documents, size, on_close=closed))
    except HoardError as e:
        source.release()
        return e.to_answer()
    except BaseException:
        source.release()
        raise
    if "cursor" in answer:
        source.id = answer["cursor"]
        node.cursor_sources[source.id] = source
    else:
        source.release()  # (a pipeline may end before the documents it read)
    return {"ok": 1, **answer, **(extras or {})}


async def relay(node: "ClusterNode", doc: dict, place: dict, p: int, owner: str, answer: dict) -> dict:
    """The answer of a read forwarded to the owner of its partition ``p`` (a whole bucket's, or one partition's of a
    spread one) that opened a cursor there: a cursor of this node relays it, each ``more`` pulling the owner's
    batches over the node link, its close (the end, close_cursor, its timeout, the client's connection closed)
    closing the owner's cursor. The owner applied skip, limit and projection; its batches are handed on as
    they come (an aggregate's may not be documents)."""
    size = check_batch_size(doc["args"].get("batch_size"))
    db, bucket = doc["db"], doc["bucket"]
    source = MergedSource(node, asyncio.get_running_loop(), db, bucket, node.placements.get((db, bucket), place),
                          [], {})
    source.parts = [_Part(owner, {p}, place, answer, cut=False)]
    extras = {k: v for k, v in answer.items() if k not in ("ok", "result", "cursor")}
    return await opened(node, source, f"{doc['op']} on {db}.{bucket} (owned by node {owner})", source, size, extras)


async def matching(node: "ClusterNode", doc: dict, place: dict, filter_) -> tuple[MergedSource, dict]:
    """The documents of a spread hash bucket matching ``filter_``, in key order, read a page at a time from each
    owner's search cursor as they are consumed (on a thread: each pull waits for the event loop), each owner's
    pages cut to the partitions asked of it; and ``index_used`` / ``index_used_by_node``. Its ``more`` batch
    size is the owners' default (about 1 MiB), whatever a client asks of the output read from it."""
    from .node import _SEARCH  # noqa: PLC0415

    search = {"op": _SEARCH.name, "db": doc["db"], "bucket": doc["bucket"],
              "args": {"filter": filter_ if filter_ is not None else {}, "batch_size": FIRST_BATCH}}
    source, answers = await open_source(node, _SEARCH, search, place, {})
    source.follows = False
    used: dict = {}
    for n, _parts, a in answers:
        used.setdefault(n, a.get("index_used"))
    return source, {"index_used": next(iter(used.values()), None), "index_used_by_node": used}


async def more(node: "ClusterNode", doc: dict) -> dict:
    """``more`` of a cluster cursor: run by the engine's cursors on a thread, its source asking owners as it goes."""
    source = node.cursor_sources.get(doc.get("cursor"))
    engine = node.server.engine
    if source is not None:
        try:
            size = check_batch_size(doc.get("batch_size"), "more's batch_size")
        except HoardError as e:
            return e.to_answer()
        if source.follows:
            source.size = size
        await _keep_alive(node, source, engine.cursors.timeout)

    def run() -> dict:
        try:
            return engine.execute({k: v for k, v in doc.items() if k != "id"})
        except HoardError as e:
            return e.to_answer()
    return await asyncio.get_running_loop().run_in_executor(None, run)


async def _keep_alive(node: "ClusterNode", source: MergedSource, timeout: float) -> None:
    """Ask ``more`` with batch_size 0 of each owner cursor not asked for half a cursor_timeout (this node's; the
    nodes of a cluster share their settings): a part whose documents all sort after the others' is not read
    for as long as those are, and must not time out on its owner meanwhile. A batch of 0 hands nothing out;
    an owner with nothing left ends its cursor, and the part keeps what it holds. Errors wait for the pull."""
    if not timeout:
        return
    now = time.monotonic()
    stale = [p for p in source.parts if p.cursor is not None and now - p.asked > timeout / 2]
    if not stale:
        return

    async def touch(part: _Part) -> None:
        part.asked = time.monotonic()
        request = {"op": _MORE, "cursor": part.cursor, "batch_size": 0}
        if part.node == node.node_id:
            try:
                answer = await asyncio.get_running_loop().run_in_executor(None, node.server.engine.execute, request)
            except HoardError as e:
                answer = e.to_answer()
        else:
            answer = await _ask(node, part.node, request)
        if answer.get("ok") == 1 and not answer.get("cursor"):
            part.cursor = None  # read to its end there (nothing was handed out)
        elif (answer.get("details") or {}).get("shifted"):
            part.shifted = error_from_answer(answer)  # (its owner closed it: the pull reads on, or refuses)
    await asyncio.gather(*(touch(p) for p in stale))
