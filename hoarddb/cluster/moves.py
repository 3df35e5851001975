"""Moving partitions between nodes: the plan of ``cluster add-node`` / ``remove-node``, and each node's mover, which copies a partition it holds to its new owner while serving it, then hands it over under a fence.

A move of partitions ``ps`` of one bucket from node A (which holds them) to node B, run by
A's :class:`Mover` (docs/dev/cluster.md draws it, and what a crash leaves):

1. **Track.** A records the key of every write to a partition of ``ps`` from now on (the
   one-document requests in ``ClusterNode.takes``, a node's part of a batch or of an update
   or delete by filter in :meth:`Mover.part`), then waits for the writes already submitted
   to be durable, so that none escapes both the record and the snapshot.
2. **Snapshot.** A asks B to delete whatever it has of ``ps`` (an earlier attempt's), then
   pages through its local bucket in key order and sends B the documents of ``ps`` as
   ``batch_put`` parts marked ``_move`` (B writes them through its normal write path, so
   its indexes get their entries), throttled: ``HOARDDB_MOVE_BATCH`` documents a batch,
   at most ``HOARDDB_MOVE_RATE`` bytes a second.
3. **Catch up.** A takes the keys recorded so far, waits until the writes noted are
   applied (a key is noted when its write is submitted, just before it is applied), and
   sends those documents again (or deletes them on B when they are gone), round after
   round, until a round has few keys.
4. **Fence.** A stops taking writes to ``ps``: such requests wait (up to FENCE_WAIT
   seconds) in ``ClusterNode._one`` or :meth:`part`; A waits for the writes under way, then
   sends the last recorded keys.
5. **Hand over.** One etcd transaction (``Coordinator.hand_over``) raises each partition's
   epoch, puts its owner key under B's lease, changes the assignment and deletes the moves,
   provided A still holds each partition at its epoch and B is live. A then lifts the
   fence: the waiting requests see B as the owner (forwarded there, or refused to the node
   that sent them, which reads the map again and sends them to B).
6. **Clean up.** A deletes its copy of ``ps`` and then its ``cleanup/`` key.

What is sent, by type: a hash bucket's documents each with its store fields' whole tree
(``FieldStores.read_trees`` / ``write_trees``: raw records, every level, blob bytes too); a
btree's entries grouped by sort value (a write notes its sort value, and the catch-up sends all
of that value's entries); a blob bucket's blobs by id with their bytes (the catch-up finds the
blobs put and deleted by difference: blobs never change). Uploads and spread blob puts run
inside :meth:`Mover.writing`. A whole queue (fifo, lifo, heap) moves as its bucket's files, copied under the
fence (hoarddb/cluster/queue_moves.py); a partitioned queue's partitions likewise, each its hidden local bucket's
(hoarddb/cluster/queues.py).

While a node's local bucket holds documents of partitions it does not hold (B's incoming
copy, A's copy not yet deleted), its parts of requests over the whole bucket are cut to
the partitions the asking node's map gives it (``_parts``), so every document is counted
once; and a node asked for a partition it no longer holds refuses with ``moved: true``,
the asking node reading the map again and asking the new owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from .. import operations
from ..values.codec import encode as bson_encode
from ..values.keys import encode_key
from ..errors import HoardError, PartitionUnavailableError
from .coord import OwnedElsewhere
from . import queue_moves, queues
from .partitions import balance, partition_of
from .members import current as members_of
from .tasks import cancel_and_wait

log = logging.getLogger("hoarddb.cluster.moves")

#: The request field of a move's own requests (from the old owner to the new one).
MOVE_FIELD = "_move"
#: The request field that lists the partitions a node's part of a request covers.
PARTS_FIELD = "_parts"
#: A request field saying that the asking node keeps of the answer only the documents of ``_parts`` (a cluster
#: cursor's part opened again after a move): a node holding those partitions and others, none moving, reads its
#: local bucket with no cut, as it reads exactly its partitions
CUTS_FIELD = "_cuts"
#: Documents a move sends in one batch.
MOVE_BATCH = int(os.environ.get("HOARDDB_MOVE_BATCH", "500"))
#: Bytes a second a move sends at most (0: as fast as it can).
MOVE_RATE = float(os.environ.get("HOARDDB_MOVE_RATE", str(32 << 20)))
#: Seconds a request to a fenced partition waits for the hand-over before it is refused (retryable).
FENCE_WAIT = float(os.environ.get("HOARDDB_MOVE_FENCE_WAIT", "5"))
#: Bytes of documents and their store fields a move sends in one request at most (a document's own stores
#: are never cut: one larger than this goes alone, within the wire's message size).
TREE_BYTES = int(os.environ.get("HOARDDB_MOVE_TREE_BYTES", str(4 << 20)))
#: A blob larger than this moves in requests of this many bytes each.
CHUNK = 1 << 20
#: The bucket types whose partitions move (with their documents' store fields; a queue's, whole or partitioned,
#: as its local buckets' files: ``queue_moves``). Every type a bucket can have.
MOVABLE = ("hash", "btree", "blob", "fifo", "lifo", "heap")
#: A catch-up round with at most this many keys is the last before the fence.
SMALL = 64
#: Seconds between two looks at etcd's moves and assignments.
POLL = 0.5


class Outgoing:
    """Outgoing is a move under way from this node: its partitions, its target, the keys written since it began, its fence."""

    def __init__(self, db: str, bucket: str, parts: set[int], to: str, partitions: int):
        self.db, self.bucket, self.parts, self.to, self.partitions = db, bucket, parts, to, partitions
        #: the keys written since the move began, by their encoding: {encoded key: key}
        self.dirty: dict[bytes, Any] = {}
        self.fenced = False
        self.open = asyncio.Event()
        self.open.set()
        self.inflight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.docs = self.bytes = 0
        self.state = "tracking"
        self.started = time.time()
        self.noted = 0.0
        #: whether the bucket declares store fields: each document's stores go with it
        self.fields = False
        #: the bucket's placement (its type; a btree's key field)
        self.place: dict = {}
        #: a blob bucket's ids of the moving partitions sent so far (their deletes found by difference)
        self.sent: set[str] = set()
        #: set when the move ends (handed over or given up): the uploads held meanwhile go on
        self.ended = asyncio.Event()

    def note(self, key) -> None:
        self.dirty[encode_key(key)] = key


class Mover:
    """Mover is one node's part in moves: the moves it runs as old owner, the copies it receives, its counters."""

    def __init__(self, node):
        self.node = node
        self.coord = node.coord
        #: moves under way from this node: {(db, bucket): Outgoing}
        self.sending: dict[tuple[str, str], Outgoing] = {}
        #: partitions whose documents this node's local bucket has without holding them: {(db, bucket): {p}}
        self.foreign: dict[tuple[str, str], set[int]] = {}
        #: partitions a move is planned or under way for, wherever they go: {(db, bucket): {p}}
        self.moving: dict[tuple[str, str], set[int]] = {}
        self.moves_done = 0
        self.docs_moved = 0
        self.bytes_moved = 0
        self._task: asyncio.Task | None = None
        #: parts of requests running on the slow path with no move of their bucket under way here, per
        #: bucket (a move that begins waits for them: they note no key)
        self._running: dict[tuple[str, str], int] = {}
        #: uploads (and spread blob puts) running here, per bucket (a move that begins waits for them)
        self._uploads: dict[tuple[str, str], int] = {}
        #: per bucket, how many times the partitions its local bucket holds may have changed under a reader: bumped
        #: when a move out fences, when a copy arrives, when handed-over documents are purged
        self.shifts: dict[tuple[str, str], int] = {}
        #: the cursors this node opened for its part of a cluster cursor over its local bucket read whole (exactly
        #: its partitions then): {cursor id: ((db, bucket), shifts then)}. Such a cursor reads on with no cut, so
        #: a shift since makes its next batch refused (more_part)
        self.part_cursors: dict[int, tuple[tuple[str, str], int]] = {}

    # -- life cycle

    async def start(self) -> None:
        """Learn what this node's local buckets hold that is not its own (a copy being received, a copy
        handed over and not yet deleted), and start looking at etcd for moves to run."""
        for (db, bucket, p), move in (await self.coord.moves()).items():
            if move.get("to") == self.node.node_id:
                self.foreign.setdefault((db, bucket), set()).add(p)
        for key, parts in (await self.coord.cleanups()).items():
            self.foreign.setdefault(key, set()).update(parts)
        shutil.rmtree(self._incoming(), ignore_errors=True)  # blobs half received before a stop
        queue_moves.recover(self.node)  # a queue's copy half received or half installed before a stop
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _loop(self) -> None:
        while True:
            try:  # three etcd ranges a round
                moves = await self.coord.moves()
                cleanups = await self.coord.cleanups()
                await self._refresh_maps(moves, cleanups)
                await self._clean_up(cleanups)
                await self._run_moves(moves)
            except asyncio.CancelledError:
                raise
            except HoardError as e:
                log.warning("moves: %s", e.message)
            except Exception:
                log.exception("moves: unexpected failure (retried)")
            await asyncio.sleep(POLL)

    async def _refresh_maps(self, moves: dict, cleanups: dict) -> None:
        """Every known bucket's owners as etcd has them now; which local documents are not this node's
        (partitions moving here, partitions handed over and not yet deleted)."""
        for key, assignment in (await self.coord.assignments()).items():
            place = self.node.placements.get(key)
            if place is not None and assignment.get("version", 1) != place.get("version", 1):
                place["owners"], place["version"] = assignment["owners"], assignment.get("version", 1)
        foreign: dict[tuple[str, str], set[int]] = {}
        moving: dict[tuple[str, str], set[int]] = {}
        for (db, bucket, p), move in moves.items():
            moving.setdefault((db, bucket), set()).add(p)
            if move.get("to") == self.node.node_id:
                foreign.setdefault((db, bucket), set()).add(p)
        for key, parts in cleanups.items():
            foreign.setdefault(key, set()).update(parts)
        self.foreign, self.moving = foreign, moving

    def settled(self, db: str, bucket: str) -> set[int]:
        """The partitions of a bucket no move is planned for or under way for, as this node last read etcd
        (a new blob's id is made in one of them: a partition moving away would have to catch it up)."""
        place = self.node.placements.get((db, bucket)) or {}
        out = self.sending.get((db, bucket))
        moving = self.moving.get((db, bucket), set()) | (out.parts if out is not None else set())
        return set(range(place.get("partitions", 1))) - moving

    # -- hooks of ClusterNode

    def note(self, db: str, bucket: str, p: int, op: operations.Operation, doc: dict) -> bool:
        """A request for partition ``p`` seen by ``takes``: a write's key is recorded when the partition is
        moving away; True when the partition is fenced (the request must wait in ``ClusterNode._one``)."""
        out = self.sending.get((db, bucket))
        if out is None or p not in out.parts:
            return False
        if out.fenced:
            return True
        if op.write:
            from ..routing import NONE as _NONE
            from ..routing import key_of as _key_of
            from .node import _blob_key_of, _btree_key_of
            place = self.node.placements.get((db, bucket)) or {}
            kind = place.get("type")
            key = _btree_key_of(op, doc, place) if kind == "btree" else \
                _blob_key_of(op, doc) if kind == "blob" else _key_of(op, doc)
            if key is not _NONE:
                out.note(key)
        return False

    def guards(self, doc: dict, upload) -> bool:
        """Whether a request ``ClusterNode.run`` is given must run inside :meth:`writing`: a write whose bytes
        arrive in chunks (it runs on the write pool, outside the group commit a move waits for), or a spread
        blob bucket's put (its id, so its partition, is made only as it runs)."""
        if upload is not None:
            return True
        from .node import _BLOB_PUT, NODE_FIELD
        place = self.node.placements.get((doc.get("db"), doc.get("bucket")))
        return place is not None and place["type"] == "blob" and place["partitions"] > 1 and "field" not in doc \
            and NODE_FIELD not in doc and operations.OPERATIONS.get(doc.get("op")) is _BLOB_PUT

    @contextlib.asynccontextmanager
    async def writing(self, doc: dict):
        """Around an upload or a spread blob put run here: held while its partition (any of the bucket's, when
        not known yet) is moving away from this node — up to FENCE_WAIT, then refused PARTITION_UNAVAILABLE
        (``moved``: try again) — and counted while it runs, so that a move that begins waits for it.

        A blob bucket's are held only while the move is fenced: its catch-up finds the blobs put meanwhile by
        difference, and the fence waits for those running. Any other bucket's are held for the whole move (an
        upload's key is noted before its bytes arrive, so a catch-up round could read it before it is written)."""
        db, bucket = doc.get("db"), doc.get("bucket")
        key = (db, bucket)
        place = self.node.placements.get(key)
        op = operations.OPERATIONS.get(doc.get("op"))
        p = self.node._partition(place, doc, op) if place is not None and op is not None else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FENCE_WAIT
        while True:
            out = self.sending.get(key)
            if out is None or (p is not None and p not in out.parts):
                break
            blobs = out.place.get("type") == "blob"
            if blobs and not out.fenced:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise PartitionUnavailableError(
                    f"{'partition ' + str(p) if p is not None else 'part'} of {db}.{bucket} is moving to node "
                    f"{out.to}; an upload waits for the move's end; try again in a moment", node=out.to, moved=True)
            try:
                await asyncio.wait_for((out.open if blobs else out.ended).wait(), remaining)
            except TimeoutError:
                pass
        self._uploads[key] = self._uploads.get(key, 0) + 1
        try:
            yield
        finally:
            self._uploads[key] -= 1

    def busy(self, db: str, bucket: str) -> bool:
        """Whether a node's part of a request over this bucket needs :meth:`part` (a move, or documents not held)."""
        return (db, bucket) in self.sending or bool(self.foreign.get((db, bucket)))

    def takes_part(self, doc: dict) -> bool:
        """``takes`` of a node's part of a request over many partitions: True when :meth:`part` must run it
        (False: the local bucket holds exactly the partitions asked for, so the engine runs it as it is)."""
        db, bucket = doc.get("db"), doc.get("bucket")
        if self.busy(db, bucket):
            return True
        parts = doc.get(PARTS_FIELD)
        return parts is not None and not self._exactly(db, bucket, parts, doc.get(CUTS_FIELD) is True)

    def _exactly(self, db: str, bucket: str, parts, cuts: bool = False) -> bool:
        """Whether this node holds the partitions ``parts`` of the bucket and no other (``cuts``: and maybe others,
        the asker cutting the answer to ``parts``)."""
        if not self.coord.lease_fresh():
            return False
        held = self.coord.held
        return all((db, bucket, p) in held for p in parts) and (
            cuts or sum(1 for k in held if k[0] == db and k[1] == bucket) == len(set(parts)))

    async def wait_fence(self, db: str, bucket: str, p: int) -> None:
        """Wait while partition ``p`` is fenced here (its hand-over under way); refused after FENCE_WAIT."""
        out = self.sending.get((db, bucket))
        if out is None or p not in out.parts or not out.fenced:
            return
        try:
            await asyncio.wait_for(out.open.wait(), FENCE_WAIT)
        except TimeoutError:
            raise PartitionUnavailableError(
                f"partition {p} of {db}.{bucket} is being handed over to node {out.to}; try again in a moment",
                node=out.to, moved=True) from None

    async def part(self, op: operations.Operation, doc: dict, place: dict | None) -> dict:
        """This node's part of a request over many partitions (``doc`` carries ``_node``, and ``_parts``:
        the partitions the asking node's map gives this node)."""
        db, bucket = doc["db"], doc["bucket"]
        place = place or self.node.placements[(db, bucket)]
        local = {k: v for k, v in doc.items() if k not in ("_node", PARTS_FIELD, CUTS_FIELD)}
        parts = doc.get(PARTS_FIELD)
        if parts is None:
            return await self.node.server.run_here(local)
        while True:
            for p in parts:
                await self.wait_fence(db, bucket, p)
            missing = [p for p in parts if self.coord.holds(db, bucket, p) is None]
            if missing:
                await self.node.refresh_placement(db, bucket)
                place = self.node.placements.get((db, bucket), place)
                for p in missing:
                    owner = place["owners"][p]
                    if owner == self.node.node_id:
                        try:
                            await self.coord.claim(db, bucket, p)
                            continue
                        except OwnedElsewhere as e:
                            owner = e.node
                    raise PartitionUnavailableError(
                        f"partition {p} of {db}.{bucket} is owned by node {owner}, not {self.node.node_id}; "
                        "send it there", node=owner, moved=True)
            out = self.sending.get((db, bucket))
            if out is None or not out.fenced or not out.parts.intersection(parts):
                break  # (no await from here until the part is counted among those under way)
        cuts = doc.get(CUTS_FIELD) is True
        if out is None and not self.foreign.get((db, bucket)) and self._exactly(db, bucket, parts, cuts):
            if cuts and type(local.get("args")) is dict and not self._exactly(db, bucket, parts):
                # (other partitions' documents too, which the asker cuts: its limit counts after the cut)
                local = {**local, "args": {k: v for k, v in local["args"].items() if k != "limit"}}
            shift = self.shifts.get((db, bucket), 0)
            answer = await self.node.server.run_here(local)
            if answer.get("cursor"):
                self._keep_part_cursor(answer["cursor"], (db, bucket), shift)
            return answer
        if type(local.get("args")) is dict and "batch_size" in local["args"]:  # cut: answered whole
            local = {**local, "args": {k: v for k, v in local["args"].items() if k != "batch_size"}}
        if out is not None:
            out.inflight += 1
            out.idle.clear()
        if out is None:
            self._running[(db, bucket)] = self._running.get((db, bucket), 0) + 1
        try:
            return await self._part(op, local, set(parts), place, out)
        finally:
            if out is None:
                self._running[(db, bucket)] -= 1
            else:
                out.inflight -= 1
                if not out.inflight:
                    out.idle.set()

    def _keep_part_cursor(self, cursor_id: int, key: tuple[str, str], shift: int) -> None:
        cursors = self.node.server.engine.cursors
        for gone in [c for c in self.part_cursors if c not in cursors]:  # (read to the end, closed, timed out)
            del self.part_cursors[gone]
        self.part_cursors[cursor_id] = (key, shift)

    def _shift(self, db: str, bucket: str) -> None:
        """The partitions this node's local bucket holds may change from now on: its open part cursors end."""
        self.shifts[(db, bucket)] = self.shifts.get((db, bucket), 0) + 1

    def part_shifted(self, cursor_id) -> str | None:
        """Why the part cursor ``cursor_id`` may no longer read exactly its partitions (a move to or from this
        node since it opened), else None. Asked after each batch is read: a shift before the read is seen."""
        kept = self.part_cursors.get(cursor_id)
        if kept is None or self.shifts.get(kept[0], 0) == kept[1]:
            return None
        self.part_cursors.pop(cursor_id, None)
        self.node.server.engine.cursors.close([cursor_id])
        db, bucket = kept[0]
        return (f"partitions of {db}.{bucket} moved to or from node {self.node.node_id} while this cursor was open; "
                "run the read again (with a filter past the last document you had, to go on from there)")

    async def more_part(self, doc: dict) -> dict:
        """``more`` of a part cursor (``part_cursors``): its next batch, refused if a move shifted its bucket."""
        answer = await self.node.server.run_here(doc)
        why = self.part_shifted(doc.get("cursor"))
        if why is not None:  # (shifted: the entry node reads on from the partitions' owners now, cluster/cursors.py)
            return PartitionUnavailableError(why, node=self.node.node_id, shifted=True).to_answer()
        return answer

    async def _part(self, op, local: dict, keep: set[int], place: dict, out: Outgoing | None) -> dict:
        """A part run on a bucket that holds documents of other partitions, or whose partitions are moving:
        cut to ``keep``, and the keys it writes recorded (a key: what ``route_value`` gives, a btree
        entry's sort value)."""
        run_here = self.node.server.run_here
        args = dict(local.get("args") or {})
        partitions = place["partitions"]
        from .node import _NONE, route_value

        def mine(key) -> bool:
            return partition_of(key, partitions) in keep

        def routed(item):
            value = route_value(item, place)
            return None if value is _NONE else value

        def ours(item) -> bool:
            value = route_value(item, place)
            return value is not _NONE and mine(value)

        def moving(key) -> bool:
            return out is not None and partition_of(key, partitions) in out.parts

        if op.gather == "split":
            docs = args.get("docs")
            if isinstance(docs, list):
                for d in docs:
                    key = routed(d)
                    if key is not None and not mine(key):
                        raise PartitionUnavailableError(
                            f"a batch part for {local['db']}.{local['bucket']} holds a document of partition "
                            f"{partition_of(key, partitions)}, which node {self.node.node_id} does not hold",
                            node=self.node.node_id, moved=True)
                    if key is not None and moving(key):
                        out.note(key)
            return await run_here(local)
        if place["type"] == "btree":
            return await self._btree_part(op, local, args, ours)
        if place["type"] == "blob" and op.gather == "sum":  # length: the ids of these partitions, counted
            return {"ok": 1, "result": len(await self._blob_ids(local["db"], local["bucket"], keep, partitions))}
        if op.gather == "counts":  # an update or delete by filter: the keys first, then those alone
            name = op.key_param
            target = args.get(name)
            if isinstance(target, list):
                keys = [k for k in target if mine(k)]
            else:
                keys = [k for k in await self._keys(local, target if isinstance(target, dict) else
                                                    {"_id_": target}) if mine(k)]
            for k in keys:
                if moving(k):
                    out.note(k)
            narrowed = {"_id_": {"$in": keys}}
            args[name] = {"$and": [target, narrowed]} if isinstance(target, dict) and target else narrowed
            return await run_here({**local, "args": args})
        if op.gather == "sum":  # count, length: the matching documents' keys, counted
            filter_ = args.get("filter") if op.param("filter") is not None else None
            keys = await self._keys(local, filter_ or {})
            return {"ok": 1, "result": sum(1 for k in keys if mine(k))}
        if op.gather == "documents":
            limit = args.get("limit")
            if op.param("after") is not None:  # a paged read (list): page on until enough documents of these partitions
                want = limit if isinstance(limit, int) else 100
                found: list = []
                after = args.get("after")
                while len(found) < want:
                    page = await run_here({**local, "args": {**args, "after": after, "limit": 1000}})
                    if page.get("ok") != 1:
                        return page
                    docs = page["result"]
                    found += [d for d in docs if mine(d["_id_"])]
                    if len(docs) < 1000:
                        break
                    after = docs[-1]["_id_"]
                return {"ok": 1, "result": found[:want]}
            answer = await run_here({**local, "args": {k: v for k, v in args.items() if k != "limit"}})
            if answer.get("ok") == 1:
                docs = [d for d in answer["result"] if mine(d["_id_"])]
                answer["result"] = docs[:limit] if isinstance(limit, int) and limit > 0 else docs
            return answer
        return await run_here(local)

    async def _btree_part(self, op, local: dict, args: dict, ours) -> dict:
        """A btree bucket's part (its reads: ``length``, ``list``, ``range``, ``first``, ``last``) cut to
        the entries ``ours`` keeps: read whole here, then cut (only while a move is near)."""
        run_here = self.node.server.run_here
        if op.gather in ("sum", "documents", "least", "greatest"):
            if op.gather == "documents" and op.param("bounds") is not None:  # range: read whole, then cut
                answer = await run_here({**local, "args": {k: v for k, v in args.items() if k != "limit"}})
                if answer.get("ok") == 1:
                    docs = [d for d in answer["result"] if ours(d)]
                    limit = args.get("limit")
                    answer["result"] = docs[:limit] if isinstance(limit, int) and limit > 0 else docs
                return answer
            if op.gather == "greatest":
                answer = await run_here({**local, "op": "range", "args": {"reverse": True}})
                if answer.get("ok") == 1:
                    answer["result"] = next((d for d in answer["result"] if ours(d)), None)
                return answer
            want = args.get("limit") if op.gather == "documents" else None
            want = (want if isinstance(want, int) else 100) if op.gather == "documents" else None
            found, count = [], 0
            async for d in self._btree_entries(local["db"], local["bucket"], args.get("after")):
                if ours(d):
                    if op.gather == "sum":
                        count += 1
                        continue
                    found.append(d)
                    if op.gather == "least" or len(found) >= want:
                        break
            if op.gather == "sum":
                return {"ok": 1, "result": count}
            if op.gather == "least":
                return {"ok": 1, "result": found[0] if found else None}
            return {"ok": 1, "result": found}
        return await run_here(local)

    async def _btree_entries(self, db: str, bucket: str, after=None):
        """Every entry of this node's local btree bucket in key order (after the entries keyed ``after``), read
        a page at a time; entries with equal keys never split between two pages."""
        while True:
            page = await self.node.server.run_here({"op": "list", "db": db, "bucket": bucket,
                                                    "args": {"limit": 1000, **({"after": after} if after is not None
                                                                               else {})}})
            if page.get("ok") != 1:
                raise _refusal(page)
            docs = page["result"]
            if len(docs) < 1000:
                for d in docs:
                    yield d
                return
            place = self.node.placements[(db, bucket)]
            from .node import route_value
            last = route_value(docs[-1], place)
            for d in docs:  # the keys before the last are whole in this page ...
                if encode_key(route_value(d, place)) == encode_key(last):
                    break
                yield d
            for d in await self._btree_read(db, bucket, last):  # ... the last one's may go on: read whole
                yield d
            after = last

    async def _btree_read(self, db: str, bucket: str, value) -> list:
        """Every entry of this node's local btree bucket whose sort key is ``value``, in insertion order."""
        answer = await self.node.server.run_here({"op": "range", "db": db, "bucket": bucket,
                                                  "args": {"bounds": {"$eq": value}}})
        if answer.get("ok") != 1:
            raise _refusal(answer)
        return answer["result"]

    async def _keys(self, local: dict, filter_: dict) -> list:
        """The keys of this node's local documents matching ``filter_``."""
        answer = await self.node.server.run_here({"op": "find", "db": local["db"], "bucket": local["bucket"],
                                                  "args": {"filter": filter_, "projection": {"_id_": 1}}})
        if answer.get("ok") != 1:
            raise _refusal(answer)
        return [d["_id_"] for d in answer["result"]]

    async def receive(self, doc: dict) -> dict:
        """A move's request from the old owner: documents of partitions coming here, or their deletion."""
        move = doc[MOVE_FIELD]
        db, bucket = doc["db"], doc["bucket"]
        parts = set(move.get("parts") or [])
        kind = move.get("kind")
        self._shift(db, bucket)  # (what the local bucket holds changes now: its part cursors end)
        if kind == "put":
            self.foreign.setdefault((db, bucket), set()).update(p for p in parts
                                                                if self.coord.holds(db, bucket, p) is None)
            answer = await self.node.server.run_here({"op": "batch_put", "db": db, "bucket": bucket,
                                                      "args": {"docs": doc["args"]["docs"]}})
            if answer.get("ok") == 1 and move.get("trees"):  # the documents first: their stores hang from them
                await self._write_trees(db, bucket, move["trees"])
            return answer
        if kind == "entries":  # a btree's entries of some sort keys: exactly these, in this order
            self.foreign.setdefault((db, bucket), set()).update(p for p in parts
                                                                if self.coord.holds(db, bucket, p) is None)
            values = move["values"]
            if not move.get("fresh"):  # (a snapshot's: the purge that began the move left none of them here)
                await self._btree_delete(db, bucket, [v for v, _ in values])
            docs = [d for _, entries in values for d in entries]
            answer = {"ok": 1, "result": []}
            if docs:
                answer = await self.node.server.run_here({"op": "batch_insert", "db": db, "bucket": bucket,
                                                          "args": {"docs": docs}})
            if answer.get("ok") == 1 and move.get("trees"):
                await self._write_trees(db, bucket, move["trees"])
            return answer
        if kind == "blob":
            self.foreign.setdefault((db, bucket), set()).update(p for p in parts
                                                                if self.coord.holds(db, bucket, p) is None)
            await self._receive_blob(db, bucket, move)
            return {"ok": 1, "result": True}
        if kind == "delete" and (self.node.placements.get((db, bucket)) or {}).get("type") == "blob":
            await self._blob_delete(db, bucket, move["keys"])
            return {"ok": 1, "result": True}
        if kind == "delete":
            await self._clear_trees(db, bucket, move["keys"])  # (a delete's cascade would refuse big stores)
            return await self.node.server.run_here({"op": "delete", "db": db, "bucket": bucket,
                                                    "args": {"target": {"_id_": {"$in": move["keys"]}}}})
        if kind in ("qbegin", "qfile", "qinstall"):  # a whole queue's files (hoarddb/cluster/queue_moves.py)
            self.foreign.setdefault((db, bucket), set()).update(p for p in parts
                                                                if self.coord.holds(db, bucket, p) is None)
            return await queue_moves.receive(self, db, bucket, move)
        if kind == "purge":  # an earlier attempt's copy, or a move given up: gone
            place = self.node.placements.get((db, bucket))
            if place is not None:
                held = {p for p in parts if self.coord.holds(db, bucket, p) is not None}
                await self._purge(db, bucket, parts - held, place["partitions"])
            return {"ok": 1, "result": True}
        return {"ok": 0, "code": 2, "codeName": "BAD_VALUE", "message": f"unknown move request {kind!r}"}

    # -- running the moves whose old owner is this node

    async def _run_moves(self, moves: dict) -> None:
        me = self.node.node_id
        groups: dict[tuple[str, str, str], list[int]] = {}
        for (db, bucket, p), move in sorted(moves.items()):
            if move.get("from") == me:
                groups.setdefault((db, bucket, move["to"]), []).append(p)
        for (db, bucket, to), parts in groups.items():
            await self._move(db, bucket, set(parts), to)

    async def _move(self, db: str, bucket: str, parts: set[int], to: str) -> None:
        place = await self.node._placement(db, bucket)
        if place is None:
            return
        if to not in self.node.nodes:
            self.node.nodes = await self.coord.nodes()
            if to not in self.node.nodes:
                await self._note(db, bucket, parts, to, "waiting: the new owner is not up")
                return
        # every partition held here at a known epoch, or the move cannot start
        epochs = {}
        for p in parts:
            try:
                epochs[p] = self.coord.holds(db, bucket, p) or await self.coord.claim(db, bucket, p)
            except OwnedElsewhere as e:
                await self._note(db, bucket, parts, to, f"waiting: node {e.node} holds partition {p}")
                return
        out = Outgoing(db, bucket, parts, to, place["partitions"])
        out.fields = self._fields(db, bucket) is not None
        out.place = place
        self.sending[(db, bucket)] = out
        handed = False
        try:
            while self._running.get((db, bucket)) or self._uploads.get((db, bucket)):
                await asyncio.sleep(0.005)  # parts and uploads that began before the move (they note nothing)
            await self._durable()  # the writes submitted before tracking began are in the local bucket
            if place["type"] in queue_moves.QUEUES:
                await self._copy_queue(out)
            else:
                await self._copy(out)
            try:
                result = await self.coord.hand_over(db, bucket, epochs, to)
            except HoardError:
                # the transaction's outcome is unknown (etcd may have committed it): this node holds
                # ps again only once it has read its owner keys back (claim, on the next request)
                for p in parts:
                    self.coord.held.pop((db, bucket, p), None)
                raise
            if result is None:
                raise HoardError(f"hand-over of {db}.{bucket} partitions {sorted(parts)} to {to}: the map, an "
                                 "owner key or the new owner changed; the move starts again")
            handed = True
            place["owners"], place["version"] = result
            self.foreign.setdefault((db, bucket), set()).update(parts)
            self.moves_done += len(parts)
            log.info("moved partitions %s of %s.%s to node %s: %d documents, %d bytes", sorted(parts), db, bucket,
                     to, out.docs, out.bytes)
        finally:
            del self.sending[(db, bucket)]
            out.ended.set()
            out.open.set()  # the waiting requests go on: to the new owner, or here if the move failed
        if handed:
            await self._clean_up(await self.coord.cleanups())

    async def _copy_queue(self, out: Outgoing) -> None:
        """A whole queue (fifo, lifo, heap): its files copied and installed on the new owner, under the fence (a
        fifo's: most of them before it); hoarddb/cluster/queue_moves.py says why, and what a crash leaves."""
        if out.partitions == 1:
            await queue_moves.copy(self, out)
            return
        # a partitioned queue: each partition's hidden local bucket (hoarddb/cluster/queues.py), moved as a whole
        # queue, all under the move's one fence (made here first when nothing was pushed to it yet)
        names = [await queues.ensure(self.node, out.db, out.bucket, p) for p in sorted(out.parts)]
        await queue_moves.copy(self, out, names)

    async def _fence(self, out: Outgoing) -> None:
        """Fence a move's partitions: requests for them wait from now on; returns once the parts of requests under
        way and the single writes let in before are done and durable."""
        out.state = "copying (fenced)" if out.place.get("type") in queue_moves.QUEUES else "handing over"
        out.fenced = True
        self._shift(out.db, out.bucket)
        out.open.clear()
        await out.idle.wait()
        await self._durable()

    async def _copy(self, out: Outgoing) -> None:
        """Steps 2 to 4 of a move of documents, entries or blobs: purge there, snapshot, catch up, fence, the last keys."""
        db, bucket, parts, to = out.db, out.bucket, out.parts, out.to
        await self._send(out, {"kind": "purge"})
        out.state = "copying"
        await self._note(db, bucket, parts, to, "copying", out)
        await self._snapshot(out)
        out.state = "catching up"
        for _round in range(20):
            keys, out.dirty = out.dirty, {}
            await self._durable()  # the writes of these keys, noted before they were applied, applied
            await self._ship(out, list(keys.values()))
            if len(out.dirty) <= SMALL:
                break
        out.state = "handing over"
        out.fenced = True
        self._shift(out.db, out.bucket)
        out.open.clear()
        await out.idle.wait()  # parts of requests under way on these partitions
        while out.place.get("type") == "blob" and self._uploads.get((db, bucket)):
            await asyncio.sleep(0.005)  # a blob bucket's puts let in before the fence
        await self._durable()  # the single writes let in before the fence
        keys, out.dirty = out.dirty, {}
        await self._ship(out, list(keys.values()))

    async def _durable(self) -> None:
        committer = self.node.server.committer
        if committer is None:
            return
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        committer.after_durable(lambda error: done.done() or done.set_result(error))
        await done

    async def _snapshot(self, out: Outgoing) -> None:
        """Every document of the moving partitions, in key order, to the new owner, throttled."""
        if out.place.get("type") == "blob":
            ids = await self._blob_ids(out.db, out.bucket, out.parts, out.partitions)
            await self._send_blobs(out, ids)
            out.sent = set(ids)
            return
        if out.place.get("type") == "btree":
            from .node import route_value
            groups: list = []  # [[sort value, its entries in insertion order], ...]
            count = 0
            async for d in self._btree_entries(out.db, out.bucket):
                value = route_value(d, out.place)
                if partition_of(value, out.partitions) not in out.parts:
                    continue
                if groups and encode_key(groups[-1][0]) == encode_key(value):
                    groups[-1][1].append(d)
                else:
                    if count >= MOVE_BATCH:
                        await self._put_entries(out, groups, fresh=True)
                        groups, count = [], 0
                    groups.append([value, [d]])
                count += 1
            if groups:
                await self._put_entries(out, groups, fresh=True)
            return
        after = None
        while True:
            args: dict[str, Any] = {"limit": 1000}
            if after is not None:
                args["after"] = after
            page = await self.node.server.run_here({"op": "list", "db": out.db, "bucket": out.bucket, "args": args})
            if page.get("ok") != 1:
                raise _refusal(page)
            docs = page["result"]
            batch = [d for d in docs if partition_of(d["_id_"], out.partitions) in out.parts]
            for i in range(0, len(batch), MOVE_BATCH):
                await self._put(out, batch[i:i + MOVE_BATCH])
            if len(docs) < 1000:
                return
            after = docs[-1]["_id_"]

    async def _ship(self, out: Outgoing, keys: list) -> None:
        """The documents of ``keys`` as they are here now, to the new owner; those gone, deleted there."""
        if out.place.get("type") == "blob":  # blobs never change: the ids put and deleted since, by difference
            now = await self._blob_ids(out.db, out.bucket, out.parts, out.partitions)
            current = set(now)
            await self._send_blobs(out, [blob_id for blob_id in now if blob_id not in out.sent])
            gone = sorted(out.sent - current)
            if gone:
                await self._send(out, {"kind": "delete", "keys": gone})
            out.sent = current
            return
        if out.place.get("type") == "btree":  # each sort key's entries, all of them (none: deleted there)
            for i in range(0, len(keys), MOVE_BATCH):
                await self._put_entries(out, [[v, await self._btree_read(out.db, out.bucket, v)]
                                              for v in keys[i:i + MOVE_BATCH]])
            return
        for i in range(0, len(keys), MOVE_BATCH):
            chunk = keys[i:i + MOVE_BATCH]
            found = await self.node.server.run_here({"op": "find", "db": out.db, "bucket": out.bucket,
                                                     "args": {"filter": {"_id_": {"$in": chunk}}}})
            if found.get("ok") != 1:
                raise _refusal(found)
            docs = found["result"]
            present = {encode_key(d["_id_"]) for d in docs}
            gone = [k for k in chunk if encode_key(k) not in present]
            if docs:
                await self._put(out, docs)
            if gone:
                await self._send(out, {"kind": "delete", "keys": gone})

    async def _put(self, out: Outgoing, docs: list) -> None:
        if out.fields:  # each document with its stores, read now (a later write to them is noted: caught up)
            trees = await self._read_trees(out.db, out.bucket, [d["_id_"] for d in docs])
            sizes = [len(bson_encode(d)) + sum(len(k) + len(v) for k, v in t["pairs"]) +
                     sum(len(b or b"") for _, b in t["blobs"]) for d, t in zip(docs, trees)]
            start = total = 0
            for i, size in enumerate(sizes):  # sent in requests of at most TREE_BYTES (or one document)
                if i > start and total + size > TREE_BYTES:
                    await self._put_some(out, docs[start:i], trees[start:i], total)
                    start, total = i, 0
                total += size
            if start < len(docs):
                await self._put_some(out, docs[start:], trees[start:], total)
            return
        await self._put_some(out, docs, None, sum(len(bson_encode(d)) for d in docs))

    async def _put_entries(self, out: Outgoing, groups: list, fresh: bool = False) -> None:
        """A btree's sort keys with their entries (and their stores), to the new owner."""
        trees = await self._read_trees(out.db, out.bucket, [v for v, _ in groups]) if out.fields else None
        size = sum(len(bson_encode(d)) for _, entries in groups for d in entries)
        if trees is not None:
            size += sum(len(k) + len(v) for t in trees for k, v in t["pairs"]) + \
                sum(len(b or b"") for t in trees for _, b in t["blobs"])
        await self._put_some(out, [d for _, entries in groups for d in entries], trees, size,
                             {"kind": "entries", "values": groups, "fresh": fresh})

    async def _put_some(self, out: Outgoing, docs: list, trees: list | None, size: int,
                        move: dict | None = None) -> None:
        started = time.monotonic()
        move = dict(move or {"kind": "put"})
        if trees is not None:
            move["trees"] = trees
        await self._send(out, move, {"docs": docs if move["kind"] == "put" else []})
        out.docs += len(docs)
        out.bytes += size
        self.docs_moved += len(docs)
        self.bytes_moved += size
        if time.monotonic() - out.noted > 1.0:  # progress in etcd, for cluster status: once a second
            out.noted = time.monotonic()
            await self._note(out.db, out.bucket, out.parts, out.to, out.state, out)
        if MOVE_RATE > 0:  # throttled: this batch's bytes at MOVE_RATE bytes a second
            await asyncio.sleep(max(0.0, size / MOVE_RATE - (time.monotonic() - started)))

    async def _send(self, out: Outgoing, move: dict, args: dict | None = None) -> dict:
        op = {"put": "batch_put", "entries": "batch_insert", "blob": "load"}.get(move["kind"], "delete")
        answer = await self.node._forward(out.to, {"op": op, "db": out.db, "bucket": out.bucket,
                                                   "args": (args or {"docs": []}) if op != "delete" else {},
                                                   MOVE_FIELD: {**move, "parts": sorted(out.parts)}})
        if answer.get("ok") != 1:
            raise _refusal(answer)
        return answer

    async def _note(self, db, bucket, parts, to, state, out: Outgoing | None = None) -> None:
        for p in parts:
            record = {"from": self.node.node_id, "to": to, "state": state, "updated": time.time()}
            if out is not None:
                record.update(docs=out.docs, bytes=out.bytes, started=out.started)
            try:
                await self.coord.note_move(db, bucket, p, record)
            except HoardError:
                pass

    # -- a document's store fields (every level), read and written raw

    def _fields(self, db: str, bucket: str):
        """The store fields of this node's local bucket (``FieldStores``), or None when it declares none."""
        try:
            store = self.node.server.engine._store(db, bucket)
        except HoardError:
            return None
        fields = getattr(store, "fields", None)
        return fields if fields else None

    async def _read_trees(self, db: str, bucket: str, keys: list) -> list:
        """Each document's stores at every level, as this node keeps them (``FieldStores.read_trees``)."""
        fields = self._fields(db, bucket)
        if fields is None:
            return [{"key": k, "pairs": [], "blobs": []} for k in keys]
        server = self.node.server
        return await server.loop.run_in_executor(server._reads, fields.read_trees, keys)

    async def _write_trees(self, db: str, bucket: str, trees: list) -> None:
        """Make these documents' stores here exactly those given (``FieldStores.write_trees``), durably."""
        fields = self._fields(db, bucket)
        if fields is None or not trees:
            return
        server = self.node.server

        def write() -> None:
            fields.write_trees(trees)
            if not server.engine.options.sync:
                server.engine._mark_dirty(fields.owner)  # made durable by the next sync (awaited below)

        await server.loop.run_in_executor(server._writes, write)
        await self._durable()

    async def _clear_trees(self, db: str, bucket: str, keys: list) -> None:
        """Empty these documents' stores here, at every level, whatever they hold (before deleting them:
        a move or a clean-up deletes them whatever max_cascade_delete says)."""
        if keys and self._fields(db, bucket) is not None:
            await self._write_trees(db, bucket, [{"key": k, "pairs": [], "blobs": []} for k in keys])

    async def _btree_delete(self, db: str, bucket: str, values: list) -> None:
        """Delete every local entry of a btree bucket keyed by one of ``values``, and their stores."""
        await self._clear_trees(db, bucket, values)
        place = self.node.placements.get((db, bucket)) or {}
        for i in range(0, len(values), MOVE_BATCH):  # (together: the group commit makes them durable at once)
            answers = await asyncio.gather(*(self.node.server.run_here({
                "op": "delete", "db": db, "bucket": bucket,
                "args": {"target": {place.get("key") or "_id_": v} if isinstance(v, dict) else v}})
                for v in values[i:i + MOVE_BATCH]))
            for answer in answers:
                if answer.get("ok") != 1:
                    raise _refusal(answer)

    # -- a blob bucket's blobs (by id, bytes too)

    def _incoming(self) -> Path:
        """Where blobs arriving in several requests wait for their last bytes (emptied at start)."""
        return Path(self.node.server.config.data) / "_cluster" / "incoming"

    async def _blob_ids(self, db: str, bucket: str, parts: set[int], partitions: int) -> list[str]:
        """The ids of this node's local blobs in ``parts``, in id order."""
        ids, after = [], None
        while True:
            page = await self.node.server.run_here({"op": "list", "db": db, "bucket": bucket, "args": {
                "limit": 1000, **({"after": after} if after is not None else {})}})
            if page.get("ok") != 1:
                raise _refusal(page)
            infos = page["result"]
            ids += [i["_id_"] for i in infos if partition_of(i["_id_"], partitions) in parts]
            if len(infos) < 1000:
                return ids
            after = infos[-1]["_id_"]

    async def _send_blobs(self, out: Outgoing, ids: list) -> None:
        """Blobs, their records and their bytes (read with their SHA-256 checked), to the new owner, throttled:
        small ones together (up to MOVE_BATCH blobs, TREE_BYTES bytes a request), each larger than a chunk
        (1 MiB) alone in requests of a chunk each. One gone meanwhile is not sent (the next round deletes it)."""
        server = self.node.server
        store = server.engine._store(out.db, out.bucket)
        batch: list = []
        size = 0
        for blob_id in ids:
            try:
                info = await server.loop.run_in_executor(server._reads, store.info, blob_id)
            except HoardError as e:
                if e.codeName == "NOT_FOUND":
                    continue
                raise
            if info["size"] > CHUNK:
                await self._send_big_blob(out, store, info)
                continue
            try:
                data = await server.loop.run_in_executor(server._reads, lambda: b"".join(store.stream(blob_id)))
            except HoardError as e:
                if e.codeName == "NOT_FOUND":
                    continue
                raise
            batch.append({"record": info, "data": data})
            size += len(data)
            if len(batch) >= MOVE_BATCH or size >= TREE_BYTES:
                await self._send_blob_batch(out, batch, size)
                batch, size = [], 0
        if batch:
            await self._send_blob_batch(out, batch, size)

    async def _send_blob_batch(self, out: Outgoing, batch: list, size: int) -> None:
        started = time.monotonic()
        await self._send(out, {"kind": "blob", "blobs": batch})
        self._sent(out, len(batch), size)
        if MOVE_RATE > 0:
            await asyncio.sleep(max(0.0, size / MOVE_RATE - (time.monotonic() - started)))
        if time.monotonic() - out.noted > 1.0:
            out.noted = time.monotonic()
            await self._note(out.db, out.bucket, out.parts, out.to, out.state, out)

    def _sent(self, out: Outgoing, docs: int, size: int) -> None:
        out.docs += docs
        out.bytes += size
        self.docs_moved += docs
        self.bytes_moved += size

    async def _send_big_blob(self, out: Outgoing, store, info: dict) -> None:
        """A blob larger than a chunk: a request a chunk, the last one loading it there."""
        server = self.node.server
        try:
            chunks = await server.loop.run_in_executor(server._reads, store.stream, info["_id_"])
        except HoardError as e:
            if e.codeName == "NOT_FOUND":
                return
            raise
        offset = 0
        chunk = await server.loop.run_in_executor(server._reads, next, chunks, None)
        while chunk is not None:
            started = time.monotonic()
            following = await server.loop.run_in_executor(server._reads, next, chunks, None)
            await self._send(out, {"kind": "blob", "big": {"record": info, "offset": offset,
                                                           "final": following is None, "data": chunk}})
            offset += len(chunk)
            self._sent(out, 1 if following is None else 0, len(chunk))
            if MOVE_RATE > 0:
                await asyncio.sleep(max(0.0, len(chunk) / MOVE_RATE - (time.monotonic() - started)))
            chunk = following

    async def _receive_blob(self, db: str, bucket: str, move: dict) -> None:
        """Blobs from their old owner, loaded here under their own ids (one here already is kept: a blob never
        changes), durably; or a chunk of a big one, kept aside until its last."""
        server = self.node.server
        store = server.engine._store(db, bucket)
        big = move.get("big")
        if big is not None:
            staging = self._incoming() / f"{db}.{bucket}.{big['record']['_id_']}"
            data = bytes(big["data"])

            def write() -> None:
                staging.parent.mkdir(parents=True, exist_ok=True)
                with open(staging, "wb" if big["offset"] == 0 else "ab") as f:
                    f.write(data)

            await server.loop.run_in_executor(server._writes, write)
            if not big["final"]:
                return
            blobs = [{"record": big["record"], "file": staging}]
        else:
            blobs = move.get("blobs") or []

        def load_one(blob: dict) -> None:
            info = blob["record"]
            try:
                store.info(info["_id_"])
                return  # here already (sent again after a round that found it new)
            except HoardError:
                pass
            source = open(blob["file"], "rb") if "file" in blob else bytes(blob["data"])
            try:
                store.load([{"_id_": info["_id_"], "data": source, "name": info.get("name"),
                             "type": info.get("type"), "sha256": info.get("sha256"),
                             "created": info.get("created")}])
            finally:
                if "file" in blob:
                    source.close()

        def load() -> None:
            for blob in blobs:
                try:
                    load_one(blob)
                finally:  # the pieces put aside go, whether loaded now or here already
                    if "file" in blob:
                        blob["file"].unlink(missing_ok=True)
            if not server.engine.options.sync:
                server.engine._mark_dirty(store)

        await server.loop.run_in_executor(server._writes, load)
        await self._durable()

    async def _blob_delete(self, db: str, bucket: str, ids: list) -> None:
        """Delete these blobs here (those not here: nothing to do)."""
        for i in range(0, len(ids), MOVE_BATCH):  # (together: the group commit makes them durable at once)
            answers = await asyncio.gather(*(self.node.server.run_here({
                "op": "delete", "db": db, "bucket": bucket, "args": {"target": blob_id}})
                for blob_id in ids[i:i + MOVE_BATCH]))
            for answer in answers:
                if answer.get("ok") != 1 and answer.get("codeName") != "NOT_FOUND":
                    raise _refusal(answer)

    # -- deleting what was handed over

    async def _clean_up(self, cleanups: dict) -> None:
        for (db, bucket), parts in cleanups.items():
            if (db, bucket) in self.sending:
                continue
            place = self.node.placements.get((db, bucket))
            if place is not None:
                gone = {p for p in parts if self.coord.holds(db, bucket, p) is None}
                await self._purge(db, bucket, gone, place["partitions"])
                self.foreign.get((db, bucket), set()).difference_update(gone)
            await self.coord.cleaned(db, bucket, parts)

    async def _purge(self, db: str, bucket: str, parts: set[int], partitions: int) -> None:
        """Delete this node's local documents of ``parts`` (partitions it does not hold)."""
        if not parts:
            return
        self._shift(db, bucket)
        place = self.node.placements.get((db, bucket)) or {}
        if place.get("type") in queue_moves.QUEUES and partitions > 1:  # a partitioned queue: its partitions' buckets
            for p in sorted(parts):
                await queues.drop(self.node, db, bucket, p)
            return
        if place.get("type") in queue_moves.QUEUES:  # a whole queue: its one partition is all of the local bucket
            await queue_moves.empty(self, db, bucket)
            return
        if place.get("type") == "blob":
            await self._blob_delete(db, bucket, await self._blob_ids(db, bucket, parts, partitions))
            return
        if place.get("type") == "btree":
            from .node import route_value
            doomed: dict[bytes, Any] = {}
            async for d in self._btree_entries(db, bucket):
                value = route_value(d, place)
                if partition_of(value, partitions) in parts:
                    doomed[encode_key(value)] = value
            await self._btree_delete(db, bucket, list(doomed.values()))
            return
        after = None
        while True:
            args: dict[str, Any] = {"limit": 1000}
            if after is not None:
                args["after"] = after
            page = await self.node.server.run_here({"op": "list", "db": db, "bucket": bucket, "args": args})
            if page.get("ok") != 1:
                raise _refusal(page)
            docs = page["result"]
            doomed = [d["_id_"] for d in docs if partition_of(d["_id_"], partitions) in parts]
            if doomed:
                await self._clear_trees(db, bucket, doomed)
                answer = await self.node.server.run_here({"op": "delete", "db": db, "bucket": bucket,
                                                          "args": {"target": {"_id_": {"$in": doomed}}}})
                if answer.get("ok") != 1:
                    raise _refusal(answer)
            if len(docs) < 1000:
                return
            after = docs[-1]["_id_"]

    # -- what is shown

    def metrics(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        yield CounterMetricFamily("hoarddb_cluster_moves", "Partitions this node handed over to another",
                                  value=self.moves_done)
        yield CounterMetricFamily("hoarddb_cluster_moved_documents", "Documents this node sent in moves",
                                  value=self.docs_moved)
        yield CounterMetricFamily("hoarddb_cluster_moved_bytes", "Bytes (BSON) of the documents sent in moves",
                                  value=self.bytes_moved)
        yield GaugeMetricFamily("hoarddb_cluster_moving_partitions", "Partitions this node is moving away now",
                                value=sum(len(o.parts) for o in self.sending.values()))

    def status(self) -> dict:
        return {"moves_done": self.moves_done, "docs_moved": self.docs_moved, "bytes_moved": self.bytes_moved,
                "moving": [{"bucket": f"{o.db}.{o.bucket}", "partitions": sorted(o.parts), "to": o.to,
                            "state": o.state, "docs": o.docs, "bytes": o.bytes} for o in self.sending.values()],
                "foreign": {f"{db}.{b}": sorted(ps) for (db, b), ps in self.foreign.items() if ps}}


# -- planning (``hoarddb cluster add-node`` / ``remove-node``)


async def plan(coord, add: str | None = None, remove: str | None = None) -> dict:
    """The moves that add node ``add`` to every bucket's map, or take node ``remove`` out of them; recorded
    in etcd (``moves/``), where the old owners' movers find them. Returns ``{moves: [...], buckets: n}``."""
    nodes = await coord.nodes()
    node = add or remove
    assignments = await coord.assignments()
    holds = any(node in a["owners"] for a in assignments.values())
    if node not in nodes and (add or holds):
        what = ("it must be up to receive its partitions: start it with --cluster and --node-id "
                f"{node}" if add else "it must be up to hand its partitions over (one copy of each: a node "
                "that is down has the only one)")
        raise HoardError(f"node {node} is not up; {what}")
    pending = await coord.moves()
    if pending:
        raise HoardError(f"{len(pending)} partition move(s) are under way; wait for them to end "
                         "(hoarddb cluster status) before changing the nodes again")
    drained = await coord.drained()
    # the nodes the maps share the partitions among (hoarddb/cluster/members.py): etcd's members/, or, in a
    # cluster that records none yet, those holding partitions; this plan records them with its change
    before, recorded = await members_of(coord, nodes, assignments, drained)
    if add:
        drained.discard(add)
        members = before | {add}
    else:
        drained.add(remove)
        members = before - {remove}
    changed = {n: True for n in members if n not in before or not recorded}  # (members' records to put...)
    if remove:
        changed[remove] = False  # (... and the one to delete)
    planned: dict[tuple[str, str, int], dict] = {}
    if remove and not holds:  # it holds nothing: it leaves the members, nothing moves
        assignments = {}
    elif not members:
        raise HoardError(f"removing node {remove} would leave the buckets no node; add another node first")
    else:
        down = sorted(members - set(nodes))
        if down:
            raise HoardError(f"node(s) {', '.join(down)} of the cluster are down; a move needs every node that "
                             "gives or takes partitions up: start them again first")
    declarations = await coord.buckets()
    for (db, bucket), assignment in sorted(assignments.items()):
        owners = assignment["owners"]
        decl = declarations.get((db, bucket)) or {}
        options = decl.get("options") or {}
        kind = options.get("type", "hash")
        if kind not in MOVABLE:
            continue
        new = balance(len(owners), sorted(members), owners)
        for p, (old, owner) in enumerate(zip(owners, new)):
            if old != owner:
                planned[(db, bucket, p)] = {"from": old, "to": owner, "state": "planned", "planned": time.time()}
    if not await coord.plan_moves(planned, {node: bool(remove)}, changed):
        raise HoardError("another change of the nodes was recorded meanwhile; look at hoarddb cluster status")
    return {"moves": [{"bucket": f"{db}.{b}", "partition": p, **m} for (db, b, p), m in sorted(planned.items())],
            "node": node, "added" if add else "removed": node}


def _refusal(answer: dict) -> HoardError:
    from ..errors import error_from_answer
    return error_from_answer(answer)
