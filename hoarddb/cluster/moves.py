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

While a node's local bucket holds documents of partitions it does not hold (B's incoming
copy, A's copy not yet deleted), its parts of requests over the whole bucket are cut to
the partitions the asking node's map gives it (``_parts``), so every document is counted
once; and a node asked for a partition it no longer holds refuses with ``moved: true``,
the asking node reading the map again and asking the new owner.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from .. import operations
from ..values.codec import encode as bson_encode
from ..values.keys import encode_key
from ..errors import HoardError, PartitionUnavailableError
from .coord import OwnedElsewhere
from .partitions import balance, partition_of

log = logging.getLogger("hoarddb.cluster.moves")

#: The request field of a move's own requests (from the old owner to the new one).
MOVE_FIELD = "_move"
#: The request field that lists the partitions a node's part of a request covers.
PARTS_FIELD = "_parts"
#: Documents a move sends in one batch.
MOVE_BATCH = int(os.environ.get("HOARDDB_MOVE_BATCH", "500"))
#: Bytes a second a move sends at most (0: as fast as it can).
MOVE_RATE = float(os.environ.get("HOARDDB_MOVE_RATE", str(32 << 20)))
#: Seconds a request to a fenced partition waits for the hand-over before it is refused (retryable).
FENCE_WAIT = float(os.environ.get("HOARDDB_MOVE_FENCE_WAIT", "5"))
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
        self.moves_done = 0
        self.docs_moved = 0
        self.bytes_moved = 0
        self._task: asyncio.Task | None = None
        #: parts of requests running on the slow path with no move of their bucket under way here, per
        #: bucket (a move that begins waits for them: they note no key)
        self._running: dict[tuple[str, str], int] = {}

    # -- life cycle

    async def start(self) -> None:
        """Learn what this node's local buckets hold that is not its own (a copy being received, a copy
        handed over and not yet deleted), and start looking at etcd for moves to run."""
        for (db, bucket, p), move in (await self.coord.moves()).items():
            if move.get("to") == self.node.node_id:
                self.foreign.setdefault((db, bucket), set()).add(p)
        for key, parts in (await self.coord.cleanups()).items():
            self.foreign.setdefault(key, set()).update(parts)
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

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
        for (db, bucket, p), move in moves.items():
            if move.get("to") == self.node.node_id:
                foreign.setdefault((db, bucket), set()).add(p)
        for key, parts in cleanups.items():
            foreign.setdefault(key, set()).update(parts)
        self.foreign = foreign

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
            from .node import _NONE, _key_of
            key = _key_of(op, doc)
            if key is not _NONE:
                out.note(key)
        return False

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
        return parts is not None and not self._exactly(db, bucket, parts)

    def _exactly(self, db: str, bucket: str, parts) -> bool:
        """Whether this node holds the partitions ``parts`` of the bucket and no other."""
        if not self.coord.lease_fresh():
            return False
        held = self.coord.held
        return all((db, bucket, p) in held for p in parts) and \
            sum(1 for k in held if k[0] == db and k[1] == bucket) == len(set(parts))

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
        local = {k: v for k, v in doc.items() if k not in ("_node", PARTS_FIELD)}
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
        if out is None and not self.foreign.get((db, bucket)) and self._exactly(db, bucket, parts):
            return await self.node.server.run_here(local)
        if out is not None:
            out.inflight += 1
            out.idle.clear()
        if out is None:
            self._running[(db, bucket)] = self._running.get((db, bucket), 0) + 1
        try:
            return await self._part(op, local, set(parts), place["partitions"], out)
        finally:
            if out is None:
                self._running[(db, bucket)] -= 1
            else:
                out.inflight -= 1
                if not out.inflight:
                    out.idle.set()

    async def _part(self, op, local: dict, keep: set[int], partitions: int, out: Outgoing | None) -> dict:
        """A part run on a bucket that holds documents of other partitions, or whose partitions are moving:
        cut to ``keep``, and the keys it writes recorded."""
        run_here = self.node.server.run_here
        args = dict(local.get("args") or {})

        def mine(key) -> bool:
            return partition_of(key, partitions) in keep

        def moving(key) -> bool:
            return out is not None and partition_of(key, partitions) in out.parts

        if op.gather == "split":
            docs = args.get("docs")
            if isinstance(docs, list):
                for d in docs:
                    key = d.get("_id_") if isinstance(d, dict) else None
                    if key is not None and not mine(key):
                        raise PartitionUnavailableError(
                            f"a batch part for {local['db']}.{local['bucket']} holds a document of partition "
                            f"{partition_of(key, partitions)}, which node {self.node.node_id} does not hold",
                            node=self.node.node_id, moved=True)
                    if key is not None and moving(key):
                        out.note(key)
            return await run_here(local)
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
        if kind == "put":
            self.foreign.setdefault((db, bucket), set()).update(p for p in parts
                                                                if self.coord.holds(db, bucket, p) is None)
            return await self.node.server.run_here({"op": "batch_put", "db": db, "bucket": bucket,
                                                    "args": {"docs": doc["args"]["docs"]}})
        if kind == "delete":
            return await self.node.server.run_here({"op": "delete", "db": db, "bucket": bucket,
                                                    "args": {"target": {"_id_": {"$in": move["keys"]}}}})
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
        self.sending[(db, bucket)] = out
        handed = False
        try:
            while self._running.get((db, bucket)):  # parts that began before the move (they note nothing)
                await asyncio.sleep(0.005)
            await self._durable()  # the writes submitted before tracking began are in the local bucket
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
            out.open.clear()
            await out.idle.wait()  # parts of requests under way on these partitions
            await self._durable()  # the single writes let in before the fence
            keys, out.dirty = out.dirty, {}
            await self._ship(out, list(keys.values()))
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
            out.open.set()  # the waiting requests go on: to the new owner, or here if the move failed
        if handed:
            await self._clean_up(await self.coord.cleanups())

    async def _durable(self) -> None:
        committer = self.node.server.committer
        if committer is None:
            return
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        committer.after_durable(lambda error: done.done() or done.set_result(error))
        await done

    async def _snapshot(self, out: Outgoing) -> None:
        """Every document of the moving partitions, in key order, to the new owner, throttled."""
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
        started = time.monotonic()
        size = sum(len(bson_encode(d)) for d in docs)
        await self._send(out, {"kind": "put"}, {"docs": docs})
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
        op = "batch_put" if move["kind"] == "put" else "delete"
        answer = await self.node._forward(out.to, {"op": op, "db": out.db, "bucket": out.bucket,
                                                   "args": args or {"docs": []} if op == "batch_put" else {},
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
    if node not in nodes:
        what = ("it must be up to receive its partitions: start it with --cluster and --node-id "
                f"{node}" if add else "it must be up to hand its partitions over (one copy of each: a node "
                "that is down has the only one)")
        raise HoardError(f"node {node} is not up; {what}")
    pending = await coord.moves()
    if pending:
        raise HoardError(f"{len(pending)} partition move(s) are under way; wait for them to end "
                         "(hoarddb cluster status) before changing the nodes again")
    drained = await coord.drained()
    if add:
        drained.discard(add)
    else:
        drained.add(remove)
    planned: dict[tuple[str, str, int], dict] = {}
    declarations = await coord.buckets()
    assignments = await coord.assignments()
    # the nodes the maps share the partitions among: those holding some now, and the one added
    members = ({n for a in assignments.values() for n in a["owners"]} | ({add} if add else set())) - drained
    if not members:
        raise HoardError(f"removing node {remove} would leave the buckets no node; add another node first")
    down = sorted(members - set(nodes))
    if down:
        raise HoardError(f"node(s) {', '.join(down)} of the cluster are down; a move needs every node that gives or "
                         "takes partitions up: start them again first")
    for (db, bucket), assignment in sorted(assignments.items()):
        owners = assignment["owners"]
        decl = declarations.get((db, bucket)) or {}
        options = decl.get("options") or {}
        if options.get("type", "hash") != "hash" or options.get("store_fields"):
            if set(owners) - members:  # moves carry a hash bucket's documents, nothing else yet
                raise HoardError(f"{db}.{bucket} ({options.get('type', 'hash')}"
                                 f"{' with store fields' if options.get('store_fields') else ''}) cannot be moved "
                                 f"yet, and node {remove} holds some of it; drop or empty it first")
            continue
        new = balance(len(owners), sorted(members), owners)
        for p, (old, owner) in enumerate(zip(owners, new)):
            if old != owner:
                planned[(db, bucket, p)] = {"from": old, "to": owner, "state": "planned", "planned": time.time()}
    if not await coord.plan_moves(planned, {node: bool(remove)}):
        raise HoardError("another change of the nodes was recorded meanwhile; look at hoarddb cluster status")
    return {"moves": [{"bucket": f"{db}.{b}", "partition": p, **m} for (db, b, p), m in sorted(planned.items())],
            "node": node, "added" if add else "removed": node}


def _refusal(answer: dict) -> HoardError:
    from ..errors import error_from_answer
    return error_from_answer(answer)
