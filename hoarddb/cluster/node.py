"""A server as a cluster node: which requests it runs itself, which it forwards, and scatter-gather over a spread bucket.

The server asks :meth:`ClusterNode.takes` of every request (on the event loop, without
I/O): False means "run it here as a single server would" — an operation of the server or
the catalog that every node holds alike, or one whose partition this node owns, its lease
fresh. True hands the request to :meth:`ClusterNode.run`, which

- records a catalog change (create, drop, alter a bucket or a database) in etcd, then
  applies it on every live node;
- runs a request for one partition here once this node holds it (taking it in etcd if it is
  assigned here and free), or forwards it to the partition's owner over a kept connection
  (the same wire protocol; the request carries ``_node``, so the owner runs it without
  routing it again, after checking that it holds the partition);
- sends a request over a spread bucket to every node owning some of its partitions and
  merges the answers as one node would give them (key order, limits kept, counts summed).
- runs a write that picks one document by a filter over a spread bucket (find_and_modify,
  update with multi: false or upsert) in two phases: found everywhere, written at its owner
  (hoarddb/cluster/pick.py).

Where a request runs is read from the command table (hoarddb.operations): the operation's
``runs`` and ``catalog`` flags, and its route (``key``: a store field's document key; a
bucket verb's document key is in its arguments, see :func:`hoarddb.routing.key_of`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from typing import Any

from .. import operations
from ..catalog import part_name
from ..declaration import SPREADABLE, declare_bucket
from ..errors import (
    BucketExistsError,
    ConnectionError_,
    HoardError,
    PartitionUnavailableError,
    TimeoutError_,
    VerbNotSupportedError,
    error_from_answer,
)
from ..ids import uuid7
from ..routing import NONE as _NONE
from ..routing import TURN_FIELD, group_of, key_of, pushes
from ..stores import store_class
from ..values.keys import encode_key
from ..values.projection import compile_projection
from ..values.sort import compile_sort
from . import cursors as cluster_cursors
from . import gathers, heaps, members, pick, queues
from .coord import Coordinator, NotAssigned, OwnedElsewhere
from .membership import Membership
from .moves import MOVE_FIELD, PARTS_FIELD, Mover
from .partitions import DEFAULT_PARTITIONS, partition_of

log = logging.getLogger("hoarddb.cluster")

#: The request field that marks a request sent by another node (its id): run here, not routed again.
NODE_FIELD = "_node"
#: A spread btree's and a partitioned queue's ways of gathering (the table's ``gather``).
_LEAST, _GREATEST, _TURNS, _TURNS_CLAIMED, _BY_CLAIM = "least", "greatest", "turns", "turns_claimed", "by_claim"
#: A blob bucket's put (its bytes in ``doc``) and load (in ``docs``, with their ids), by what they upload.
_BLOB_PUT = next(o for o in operations.VERBS.values() if o.upload == "doc" and "blob" in o.types)
_BLOB_LOAD = next(o for o in operations.VERBS.values() if o.upload == "docs" and "blob" in o.types)
_POP = operations.VERBS["pop"]
#: The request field of a partitioned queue's pop that :meth:`ClusterNode.takes` sent a single server's way, to one
#: partition held here: the bucket it was for, so that an empty answer is run the cluster's way after all (again).
POPPED_FROM = "_popped_from"
#: An export's gather: pages with a cursor.
_PAGES = "pages"
#: How the answers of a spread bucket's partitions merge (an operation's ``gather``).
_DOCUMENTS, _SUM, _COUNTS, _SPLIT, _WINDOWS, _PIPELINE = "documents", "sum", "counts", "split", "windows", "pipeline"
#: A hash bucket's read of the documents matching a filter through the index that fits best (search): what
#: distinct and aggregate gather with (the table's cost "indexed").
_SEARCH = next(o for o in operations.VERBS.values() if o.cost == operations.INDEXED and "hash" in o.types
               and o.gather == _DOCUMENTS)
#: The catalog operations, found by what they change (the table's ``change`` and ``scope``).
_CREATE_BUCKET = next(n for n, o in operations.ADMIN.items() if o.change == "create" and o.scope == operations.BUCKET)
_DROPS = {o.scope: n for n, o in operations.ADMIN.items() if o.change == "drop"}


class ClusterNode:
    """ClusterNode is one server's part in a cluster: its coordinator, its links to the other nodes, the placements it knows."""

    def __init__(self, server, endpoints: list[str], node_id: str, advertise: str, ttl: int):
        self.server = server
        self.node_id = node_id
        self.coord = Coordinator(endpoints, node_id, advertise, ttl=ttl)
        self.coord.rejoined = self._take_back  # (after its lease ran out: the partitions assigned here)
        #: {(db, bucket): {"partitions": P, "owners": [node per partition]}}
        self.placements: dict[tuple[str, str], dict] = {}
        #: live nodes {id: {advertise, tls, fingerprint}}, refreshed every second
        self.nodes: dict[str, dict] = {}
        self._peers: dict[str, Any] = {}
        self._refresher: asyncio.Task | None = None
        self.forwarded = 0
        #: moves of partitions from and to this node (hoarddb/cluster/moves.py)
        self.mover = Mover(self)
        #: where the next pop or claim of each partitioned queue starts: {(db, bucket): turn}
        self._turns: dict[tuple[str, str], int] = {}
        #: the cluster's users, kept in this node's users file (hoarddb/cluster/users.py)
        self.users = None
        #: this node's copy of the cluster's catalog, watched (hoarddb/cluster/catalog.py)
        self.catalog = None
        #: the sources of the cluster cursors open here, by the id their client sees (hoarddb/cluster/cursors.py)
        self.cursor_sources: dict[int, Any] = {}
        #: this node's own join at start and drain at stop (hoarddb/cluster/membership.py)
        self.membership = Membership(self)
        #: writes picking one document over a spread bucket that looked again for it (hoarddb/cluster/pick.py)
        self.pick_retries = 0

    # -- life cycle

    async def start(self, info: dict) -> None:
        """Join (membership under this node's lease), learn the catalog, create what is missing here,
        and take the partitions assigned to this node."""
        await self.coord.start(info)
        await self._start_users()
        self.nodes = await self.coord.nodes()
        await self._start_catalog()
        self._refresher = asyncio.get_running_loop().create_task(self._refresh())
        await self.mover.start()
        self.membership.start(join=self.server.config.join)

    async def _start_users(self) -> None:
        """The cluster's users: in etcd, mirrored into this node's users file and watched (hoarddb/cluster/users.py)."""
        from .users import ClusterUsers  # noqa: PLC0415

        self.users = ClusterUsers(self.server, self.coord)
        await self.users.start()

    async def _start_catalog(self) -> None:
        """Catch up with the cluster's catalog (create what is missing here, drop what was dropped while this
        node was away), take the partitions assigned here, and watch it (hoarddb/cluster/catalog.py)."""
        from .catalog import CatalogWatch  # noqa: PLC0415

        self.catalog = CatalogWatch(self)
        await self.catalog.start()

    async def stop(self) -> None:
        await self.membership.stop()
        await self.mover.stop()
        if self.catalog is not None:
            await self.catalog.stop()
        if self.users is not None:
            await self.users.stop()
        if self._refresher is not None:
            self._refresher.cancel()
        for peer in self._peers.values():
            try:
                await peer.close()
            except Exception:
                pass
        self._peers.clear()
        await self.coord.stop()

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                self.nodes = await self.coord.nodes()
            except HoardError as e:
                log.warning("cannot refresh the cluster's nodes: %s", e.message)

    # -- what runs here

    def takes(self, doc: dict) -> bool:
        """Whether the request needs the cluster (:meth:`run`); False: run it here as a single server."""
        if MOVE_FIELD in doc and NODE_FIELD in doc:
            return True  # a move's copy, from the partition's old owner (Mover.receive)
        op = operations.OPERATIONS.get(doc.get("op"))
        if op is None:
            return False  # the engine refuses it, naming the operations
        if op.catalog:
            return True
        if op is operations.MORE:  # a cluster cursor's: read off the loop, which carries its owners' batches
            cursor_id = doc.get("cursor")
            return isinstance(cursor_id, int) and not isinstance(cursor_id, bool) and (
                cursor_id in self.cursor_sources or cursor_id in self.mover.part_cursors)
        if op is operations.CLUSTER_MAP:
            return True  # the map as clients see it (hoarddb/cluster/client_map.py)
        if op.runs != operations.STORE:
            return False  # the server's and the catalog's reads: every node answers alike
        if doc.get("upload"):
            return True  # bytes in chunks: run inside Mover.writing (a move waits for them, and holds them)
        place = self.placements.get((doc.get("db"), doc.get("bucket")))
        if place is None:
            return True  # not known here yet: etcd says
        if self._joins_elsewhere(op, doc, place):
            return True  # run here over what every node holds (cluster/gathers.py: aggregate)
        p = self._partition(place, doc, op)
        if queues.partitioned(place):  # (hoarddb/cluster/queues.py: a partition's own local bucket)
            db, bucket = doc["db"], doc["bucket"]
            if p is None and op is _POP and self._pops_here(doc, place):
                return False
            if p is None or self.mover.note(db, bucket, p, op, doc) or self.coord.holds(db, bucket, p) is None \
                    or not pushes(op) or "field" in doc or not queues.exists(self, db, bucket, p):
                return True
            doc["bucket"] = part_name(bucket, p)  # a push to a partition held here: a single server's path
            return False
        if p is None:  # sent by a node: this node's part of a scatter (Mover.part when a move is near)
            if NODE_FIELD not in doc or self.mover.takes_part(doc):
                return True
            args = doc.get("args")  # a part opening a cursor: Mover.part notes it (its next batches are checked)
            return type(args) is dict and args.get("batch_size") is not None
        if self.mover.note(doc["db"], doc["bucket"], p, op, doc):
            return True  # fenced: it waits for the hand-over (_one)
        return self.coord.holds(doc["db"], doc["bucket"], p) is None

    def _pops_here(self, doc: dict, place: dict) -> bool:
        """Whether a client's pop of one element from a partitioned fifo or lifo is sent a single server's way: its
        turn starts here (the ``_turn`` a routing client named, or this node's own turns: _gather_queue) and a
        partition held here has an element now, with no move of the bucket under way. Then the request is
        rewritten to that partition's local bucket, as a push to a partition held here is, and runs in the group
        commit without the cluster's coroutines (a pop costs about what a whole fifo's does). Marked with
        :data:`POPPED_FROM`: should the partition be empty by the time it runs (another pop took its last
        element), :meth:`again` runs it the cluster's way, which goes on to the other partitions and owners."""
        args = doc.get("args") or {}
        if place["type"] == "heap" or "field" in doc or NODE_FIELD in doc or type(args) is not dict \
                or set(args) - {"limit"} or args.get("limit") is not None:
            return False  # (a pop of several, or one the engine refuses: the cluster's way, as before)
        db, bucket = doc["db"], doc["bucket"]
        if self.mover.sending.get((db, bucket)) is not None:
            return False
        me = self.node_id
        if doc.get(TURN_FIELD) != me:
            owners = sorted(set(place["owners"]))
            if TURN_FIELD in doc or owners[self._turns.get((db, bucket), 0) % len(owners)] != me:
                return False
            advance = True  # (this node's own turns: the pop starts here)
        else:
            advance = False
        holds = self.coord.holds
        held = [p for p, owner in enumerate(place["owners"]) if owner == me and holds(db, bucket, p) is not None]
        if not held:
            return False
        key = (db, bucket, "parts")
        start = self._turns.get(key, 0) % len(held)
        for p in held[start:] + held[:start]:
            if queues._ready(self, db, bucket, p):
                self._turns[key] = start + 1
                if advance:
                    self._turns[(db, bucket)] = self._turns.get((db, bucket), 0) + 1
                doc[POPPED_FROM] = bucket
                doc["bucket"] = part_name(bucket, p)
                return True
        return False

    def again(self, doc: dict, answer: dict) -> dict | None:
        """The request to run the cluster's way (:meth:`run`) when a pop :meth:`_pops_here` sent to one partition
        found it empty; None when ``answer`` stands."""
        bucket = doc.get(POPPED_FROM)
        if bucket is None or answer.get("ok") != 1 or answer.get("result") is not None:
            return None
        return {**{k: v for k, v in doc.items() if k != POPPED_FROM}, "bucket": bucket}

    async def run(self, doc: dict, upload=None) -> dict:
        """The answer to a request :meth:`takes` handed over: run here, forwarded, or gathered
        (``upload``: the bytes of a blob put arriving in chunks, which a spread blob bucket's put takes).

        A find or search over a spread hash bucket, a range over a spread btree, or a list over either, a spread
        blob bucket or a partitioned queue, asked with ``batch_size`` opens a cluster cursor
        (hoarddb/cluster/cursors.py); other reads asked so are answered whole here, without a cursor
        (their parts' answers are merged as lists), unless run by a node holding the bucket's partition
        itself (docs/dev/cursors.md)."""
        if doc.get("op") == operations.CLUSTER_MAP.name:
            from .client_map import answer  # noqa: PLC0415

            try:
                return await answer(self, doc)
            except HoardError as e:
                return e.to_answer()
        try:
            streamed = await self._cursor(doc)
        except HoardError as e:
            return e.to_answer()
        if streamed is not None:
            return streamed
        args = doc.get("args")
        if type(args) is dict and args.get("batch_size") is not None and getattr(
                operations.OPERATIONS.get(doc.get("op")), "cursor", False) and not self._keeps_cursor(doc):
            doc = {**doc, "args": {k: v for k, v in args.items() if k != "batch_size"}}
        try:
            if self.mover.guards(doc, upload):  # (hoarddb/cluster/moves.py: held while its partition moves away)
                async with self.mover.writing(doc):
                    return await (self._run_upload(doc, upload) if upload is not None else self._run(doc))
            if upload is not None:
                return await self._run_upload(doc, upload)
            return await self._run(doc)
        except HoardError as e:
            return e.to_answer()

    async def _cursor(self, doc: dict) -> dict | None:
        """The answer of a cluster cursor's read or ``more`` (hoarddb/cluster/cursors.py), or None for other requests."""
        op = operations.OPERATIONS.get(doc.get("op"))
        if op is operations.MORE:
            if doc.get("cursor") in self.mover.part_cursors:  # this node's part of another node's cluster cursor
                return await self.mover.more_part(doc)
            return await cluster_cursors.more(self, doc)
        args = doc.get("args")
        if NODE_FIELD in doc or op is None or not op.cursor or type(args) is not dict or args.get("batch_size") is None:
            return None
        place = await self._placement(doc["db"], doc["bucket"])
        if place is None or self._joins_elsewhere(op, doc, place):
            return None
        if not cluster_cursors.streams(op, doc, place, self._partition(place, doc, op) is not None):
            return None
        if queues.deep_list(self, op, doc, place):  # past the cursor's reach: answered whole (cluster/queues.py)
            return None
        return await cluster_cursors.open_cursor(self, op, doc, place)

    def _keeps_cursor(self, doc: dict) -> bool:
        """Whether a read asked with ``batch_size`` that no cluster cursor merges keeps it on its way: one partition's
        (its owner's cursor, relayed when that is another node: cluster/cursors.py ``relay``) and an aggregate
        gathered here (cluster/gathers.py); the parts of other gathers answer whole."""
        op = operations.OPERATIONS[doc["op"]]
        place = self.placements.get((doc.get("db"), doc.get("bucket")))
        if place is None or op.gather == _PIPELINE:
            return True
        if NODE_FIELD in doc and self._partition(place, doc, op) is None:
            return not self.mover.takes_part(doc)  # a part of a node's cluster cursor, read whole here: Mover.part
        return self._partition(place, doc, op) is not None

    async def _run(self, doc: dict) -> dict:
        if MOVE_FIELD in doc and NODE_FIELD in doc:
            return await self.mover.receive(doc)
        op = operations.OPERATIONS[doc["op"]]
        if op.catalog:
            return await (self._apply_catalog(op, doc) if NODE_FIELD in doc else self._catalog(op, doc))
        db, bucket = doc["db"], doc["bucket"]
        place = await self._placement(db, bucket)
        if place is None:
            return await self.server.run_here(doc)  # no such bucket: the engine says so
        if self._joins_elsewhere(op, doc, place):
            return await gathers.aggregate(self, op, doc, place)
        if place["type"] == "blob" and place["partitions"] > 1 and op is _BLOB_PUT and "field" not in doc \
                and NODE_FIELD not in doc:
            return await self._blob_put(doc, place, None)
        p = self._partition(place, doc, op)
        if p is None and queues.partitioned(place) and NODE_FIELD in doc and place["type"] in op.types:
            return await queues.part(self, op, doc, place)  # this node's part, over the partitions it holds
        if p is None:
            if NODE_FIELD in doc or place["type"] not in op.types or (
                    not op.gather and op.key_param and op.param(op.key_param).kind != "filter"):
                # this node's part of a gather; or what the engine refuses wherever it runs (a verb the
                # type lacks, a document or key that names no document): refused here as on one server
                await self._claim_assigned(db, bucket)
                if NODE_FIELD in doc:
                    return await self.mover.part(op, doc, place)
                return await self.server.run_here({k: v for k, v in doc.items() if k != NODE_FIELD})
            if pick.picks(op, doc):  # one document chosen by a filter over every partition (cluster/pick.py)
                return await pick.run(self, op, doc, place)
            return await self._gather(op, doc, place)
        return await self._one(doc, place, p)

    async def _one(self, doc: dict, place: dict, p: int) -> dict:
        """A request for partition ``p``: run here if it is this node's, else sent to its owner (again,
        after reading the map, when the owner answers that the partition moved)."""
        for _attempt in range(4):
            answer = await self._one_try(doc, place, p)
            if answer.get("codeName") != "PARTITION_UNAVAILABLE" or not (answer.get("details") or {}).get("moved") \
                    or NODE_FIELD in doc:
                return answer
            await self.refresh_placement(doc["db"], doc["bucket"])
            place = self.placements.get((doc["db"], doc["bucket"]), place)
        return answer

    async def refresh_placement(self, db: str, bucket: str) -> None:
        """A bucket's owners as etcd has them now (after a move: hoarddb/cluster/moves.py)."""
        place = self.placements.get((db, bucket))
        assignment = await self.coord.assignment(db, bucket)
        if place is not None and assignment is not None:
            place["owners"], place["version"] = assignment["owners"], assignment.get("version", 1)

    async def _one_try(self, doc: dict, place: dict, p: int) -> dict:
        db, bucket = doc["db"], doc["bucket"]
        await self.mover.wait_fence(db, bucket, p)
        owner = place["owners"][p]
        if owner != self.node_id and NODE_FIELD in doc:  # our map may be older than the sender's
            await self.refresh_placement(db, bucket)
            owner = place["owners"][p]
        if owner == self.node_id:
            if self.coord.holds(db, bucket, p) is None:
                try:
                    await self.coord.claim(db, bucket, p)
                except OwnedElsewhere as e:
                    raise PartitionUnavailableError(
                        f"partition {p} of {db}.{bucket} is assigned to node {self.node_id} but node {e.node} "
                        "still holds it; try again in a moment", node=e.node) from None
                await self.mover.wait_fence(db, bucket, p)
                if place["owners"][p] != self.node_id:
                    return await self._one_try(doc, place, p)
            local = {k: v for k, v in doc.items() if k != NODE_FIELD}
            self.mover.note(db, bucket, p, operations.OPERATIONS[doc["op"]], doc)  # (its write submitted now)
            if queues.partitioned(place):
                return await queues.run_one(self, local, place, p)  # on the partition's own local bucket
            return await self.server.run_here(local)
        if NODE_FIELD in doc:  # sent here by a node whose map is older than ours
            raise PartitionUnavailableError(f"partition {p} of {db}.{bucket} is owned by node {owner}, not "
                                            f"{self.node_id}; send it there", node=owner, moved=True)
        answer = await self._forward(owner, doc)  # (a stream's answer: the owner's chunks, relayed as they come)
        if type(answer) is dict and "cursor" in answer:  # the owner's cursor, relayed by one of this node
            return await cluster_cursors.relay(self, doc, place, p, owner, answer)
        return answer

    # -- the map

    async def _placement(self, db: str, bucket: str) -> dict | None:
        place = self.placements.get((db, bucket))
        if place is None:
            decl = await self.coord.bucket(db, bucket)
            if decl is None:
                return None
            await self._apply_bucket(db, bucket, decl)
            place = self.placements.get((db, bucket))
        return place

    def _partition(self, place: dict, doc: dict, op: operations.Operation) -> int | None:
        """The partition a request acts on, or None when it acts on every partition."""
        if place["partitions"] == 1:
            return 0
        if place["type"] == "btree":
            key = _btree_key_of(op, doc, place)
            return None if key is _NONE else partition_of(key, place["partitions"])
        if place["type"] == "blob":
            key = _blob_key_of(op, doc)
            return None if key is _NONE else partition_of(key, place["partitions"])
        if place.get("group") is not None:
            if op.gather == _BY_CLAIM:  # a claimId names its partition: <p>/<id> (hoarddb/cluster/queues.py)
                return queues.claims_partition(doc.get("args"), place["partitions"])
            if NODE_FIELD in doc and queues.PART_FIELD in doc:  # a node's request for one partition (export's page)
                return queues.named_partition(doc, place["partitions"])
            key = group_of(op, doc, place["group"])
            return None if key is _NONE else partition_of(key, place["partitions"])
        key = key_of(op, doc)
        return None if key is _NONE else partition_of(key, place["partitions"])

    async def _apply_bucket(self, db: str, bucket: str, decl: dict) -> None:
        """Create a bucket of the cluster here (if it is not yet), and remember its placement."""
        assignment = await self.coord.assignment(db, bucket)
        if assignment is None:
            return
        answer = await self.server.run_here({"op": _CREATE_BUCKET, "db": db, "bucket": bucket,
                                             "options": decl["options"]})
        if answer.get("ok") != 1 and answer.get("codeName") != "BUCKET_EXISTS":
            raise error_from_answer(answer)
        self.placements[(db, bucket)] = {"partitions": decl["partitions"], "owners": assignment["owners"],
                                         "type": (decl["options"] or {}).get("type", "hash"),
                                         "key": (decl["options"] or {}).get("key"),  # (a btree's sort key field)
                                         "group": (decl["options"] or {}).get("group")}  # (a partitioned queue's)

    async def _claim_assigned(self, db: str, bucket: str) -> int:
        """Take the partitions of a bucket that the map assigns here and no node holds (each one transaction,
        the assignment compared: coord.claim); how many this node holds then."""
        place = self.placements.get((db, bucket))
        if place is None:
            return 0
        me, holds = self.node_id, self.coord.holds
        for p, owner in enumerate(place["owners"]):
            if owner == me and holds(db, bucket, p) is None:
                try:
                    await self.coord.claim(db, bucket, p, assigned=True)
                except OwnedElsewhere as e:
                    log.warning("partition %d of %s.%s is assigned here but node %s holds it", p, db, bucket, e.node)
                except NotAssigned as e:
                    log.info("partition %d of %s.%s: the map now gives it to node %s", p, db, bucket, e.node)
        held = self.coord.held
        return sum((db, bucket, p) in held for p in range(len(place["owners"])))

    async def _take_back(self) -> None:
        """After this node's lease ran out and it joined again under a new one (coord.py): take back, as at
        start, the partitions the map assigns here; a partition missed here is claimed at its first request."""
        held = 0
        for db, bucket in list(self.placements):
            try:
                await self.refresh_placement(db, bucket)
                held += await self._claim_assigned(db, bucket)
            except HoardError as e:
                log.warning("lease: cannot take back the partitions of %s.%s yet (%s); each is taken at its next "
                            "request", db, bucket, e.message)
            except Exception:
                log.exception("lease: taking back the partitions of %s.%s failed; each is taken at its next request",
                              db, bucket)
        log.info("lease: this node holds %d partition(s) again and serves them", held)

    # -- catalog changes

    async def _catalog(self, op: operations.Operation, doc: dict) -> dict:
        """A catalog change asked by a client: recorded in etcd, then applied on every live node."""
        db, bucket = doc.get("db"), doc.get("bucket")
        if op.change == "create" and op.scope == operations.BUCKET:
            raw = dict(doc.get("options") or {}) if isinstance(doc.get("options"), dict) else doc.get("options")
            if isinstance(raw, dict) and raw.get("type", "hash") == SPREADABLE[0] \
                    and "placement" not in raw and "partitions" not in raw:
                raw["partitions"] = DEFAULT_PARTITIONS  # a hash bucket is spread unless declared whole
            declare_bucket(bucket, raw)  # every refusal, before etcd hears of it
            if not isinstance(bucket, str):
                return await self.server.run_here(doc)
            partitions = raw.get("partitions", 1)
            self.nodes = await self.coord.nodes()  # as they are now: a node that just joined gets its share
            owners = await members.new_bucket_owners(self.coord, partitions, self.nodes, self.node_id)
            if not await self.coord.create_bucket(db, bucket, {"options": raw, "partitions": partitions}, owners):
                raise BucketExistsError(f"bucket {bucket!r} already exists in database {db!r}")
            doc = {**doc, "options": raw}
        altered = None  # an alter: recorded in etcd's declaration first (hoarddb/cluster/catalog.py)
        if op.change == "alter" and op.scope == operations.BUCKET and self.catalog is not None:
            altered = await self.catalog.record_alter(doc)
        if self.catalog is not None:
            self.catalog.expect(op, db, bucket)
        try:
            if op.change == "drop" and op.scope == operations.BUCKET:
                await self.coord.drop_bucket(db, bucket)
            elif op.change == "drop" and op.scope == operations.DATABASE:
                await self.coord.drop_database(db)
            elif op.change == "create" and op.scope == operations.DATABASE and isinstance(db, str):
                await self.coord.create_database(db)
            answers = await self._everywhere({**doc, NODE_FIELD: self.node_id})
        finally:
            if self.catalog is not None:
                self.catalog.done(op, db, bucket)
        mine = answers.pop(self.node_id)
        failed = {n: a for n, a in answers.items() if a.get("ok") != 1 and a.get("codeName") != "BUCKET_EXISTS"
                  and not (op.change == "drop" and str(a.get("codeName")).endswith("NOT_FOUND"))}  # (its watch was first)
        if failed:
            log.warning("%s on %s.%s: not applied on %s", op.name, db, bucket, failed)
        return altered if altered is not None and mine.get("ok") == 1 else mine

    async def _apply_catalog(self, op: operations.Operation, doc: dict) -> dict:
        """A catalog change another node recorded: applied here, and noted (hoarddb/cluster/catalog.py)."""
        if self.catalog is None:
            return await self._apply_catalog_here(op, doc)
        return await self.catalog.told(op, doc, self._apply_catalog_here)

    async def _apply_catalog_here(self, op: operations.Operation, doc: dict) -> dict:
        """A catalog change another node recorded: applied here."""
        db, bucket = doc.get("db"), doc.get("bucket")
        local = {k: v for k, v in doc.items() if k != NODE_FIELD}
        if op.change == "create" and op.scope == operations.BUCKET:
            decl = await self.coord.bucket(db, bucket)
            if decl is not None:
                await self._apply_bucket(db, bucket, decl)
                await self._claim_assigned(db, bucket)
                return {"ok": 1, "result": {"name": bucket, "type": (decl["options"] or {}).get("type", "hash")}}
        answer = await self.server.run_here(local)
        if op.change == "drop":
            for key in [k for k in self.placements if k[0] == db and (op.scope == operations.DATABASE or k[1] == bucket)]:
                del self.placements[key]
                for held in [h for h in self.coord.held if h[:2] == key]:
                    del self.coord.held[held]
        return answer

    async def _everywhere(self, doc: dict) -> dict[str, dict]:
        """The answer of every live node to ``doc`` (this one's by ``self.node_id``)."""
        names = sorted(set(self.nodes) | {self.node_id})
        op = operations.OPERATIONS[doc["op"]]
        answers = await asyncio.gather(*(self._apply_catalog(op, doc) if n == self.node_id
                                         else self._tell(n, doc) for n in names))
        return dict(zip(names, answers))

    async def _tell(self, node: str, doc: dict) -> dict:
        """A catalog change sent to another node; one that cannot be reached learns it from its watch of etcd."""
        try:
            return await self._forward(node, doc, ok_only=False)
        except HoardError as e:
            return e.to_answer()

    # -- forwarding

    async def _forward(self, node: str, doc: dict, ok_only: bool = False) -> dict:
        """``doc``'s answer from ``node`` over the kept connection to it (an error answer as one)."""
        peer, address = await self._link_to(node)
        self.forwarded += 1
        try:
            request = {k: v for k, v in doc.items() if k != "id"}  # (the client's id: the link gives its own)
            request[NODE_FIELD] = doc.get(NODE_FIELD, self.node_id)
            return await peer.execute(request)
        except (ConnectionError_, TimeoutError_) as e:
            if getattr(e, "outcome_unknown", False):
                raise PartitionUnavailableError(
                    f"node {node} did not answer ({e.message}); the write may or may not have been applied: "
                    "read it back before trying again", node=node, outcome_unknown=True) from None
            raise PartitionUnavailableError(f"node {node} cannot be reached at {address}: {e.message}",
                                            node=node) from None
        except HoardError as e:
            return e.to_answer()

    def _link(self, info: dict):
        from ..client.aio import AsyncExecutor
        from ..client.options import ConnectOptions

        host, _, port = info["advertise"].rpartition(":")
        options = {"host": host, "port": int(port), "timeout": 60.0, "route": "any"}  # (a node routes itself)
        if info.get("tls"):
            options["tls_fingerprint"] = info["fingerprint"]
        else:
            options["insecure"] = True
        if info.get("auth"):
            options["user"] = os.environ.get("HOARDDB_CLUSTER_USER", "")
            options["password"] = os.environ.get("HOARDDB_CLUSTER_PASSWORD", "")
        return AsyncExecutor(ConnectOptions(**options).check())

    # -- scatter-gather

    async def _gather(self, op: operations.Operation, doc: dict, place: dict) -> dict:
        """A request over every partition of a spread bucket, sent to each owner and merged."""
        if place["type"] == "btree" and op.gather != _SPLIT:
            return await self._gather_btree(op, doc, place)
        if place.get("group") is not None and op.gather != _SPLIT:
            return await self._gather_queue(op, doc, place)
        if place.get("group") is not None:
            return await self._split(op, doc, place)
        if op.gather == _SPLIT:
            return await self._split(op, doc, place)
        if op.gather == _WINDOWS:
            return await self._windows(doc, place)
        if op.gather in _GATHERED_WHOLE and place["type"] in op.types:
            return await _GATHERED_WHOLE[op.gather](self, op, doc, place)  # (hoarddb/cluster/gathers.py)
        if not op.gather:
            raise VerbNotSupportedError(f"{op.name} over a spread bucket (partitions: {place['partitions']}) is not "
                                        "built yet; declare the bucket with placement: whole to use it")
        args = doc.get("args") or {}
        limit = args.get("limit")
        if limit is None and op.param("limit") is not None:  # what leaving it out means: the store's own default
            limit = _default_of(place["type"], op.name, "limit")
        skip = args.get("skip") or 0
        if op.gather == _DOCUMENTS and (skip or args.get("projection") is not None):
            # each node sends its first skip + limit, whole (the key and sort fields are needed to merge);
            # skip and projection are applied to the merged list
            part = {k: v for k, v in args.items() if k not in ("skip", "projection")}
            if isinstance(limit, int) and isinstance(skip, int):
                part["limit"] = limit + skip
            doc = {**doc, "args": part}
        owners, answers = await self._each_owner(op, doc, place)
        for answer in answers:
            if answer.get("ok") != 1:
                return answer
        if op.gather == _SUM:
            return {"ok": 1, "result": sum(a["result"] for a in answers)}
        if op.gather == _COUNTS:
            merged: dict = {}
            for a in answers:
                for k, v in (a.get("result") or {}).items():
                    merged[k] = merged.get(k, 0) + v
            return {"ok": 1, "result": merged}
        docs = [d for a in answers for d in a["result"]]
        docs.sort(key=lambda d: encode_key(d["_id_"]))  # one node's order: by key...
        if args.get("sort") is not None:
            docs.sort(key=compile_sort(args["sort"]))  # ...then as asked (stable: ties in key order)
        if isinstance(skip, int) and skip > 0:
            docs = docs[skip:]
        if isinstance(limit, int) and limit > 0:
            docs = docs[:limit]
        if args.get("projection") is not None:
            project = compile_projection(args["projection"])
            docs = [project(d) for d in docs]
        answer: dict = {"ok": 1, "result": docs}
        if any("index_used" in a for a in answers):  # a search: the index each node used
            used = {n: a.get("index_used") for n, a in zip(owners, answers)}
            answer["index_used"] = next(iter(used.values()))
            answer["index_used_by_node"] = used
        if any("explain" in a for a in answers):  # each owner's plan, and the counts added up
            answer["explain"] = cluster_cursors.merged_explain(list(zip(owners, answers)), skip, limit)
        return answer

    async def _gather_btree(self, op: operations.Operation, doc: dict, place: dict) -> dict:
        """range, list, first, last or length over a spread btree bucket: asked of every owner and merged in
        sort-key order, as one node gives them (equal sort keys share a partition, so their order is kept)."""
        if op.gather in _GATHERED_WHOLE and place["type"] in op.types:
            return await _GATHERED_WHOLE[op.gather](self, op, doc, place)  # export (hoarddb/cluster/gathers.py)
        if op.gather not in (_DOCUMENTS, _SUM, _LEAST, _GREATEST):
            raise VerbNotSupportedError(f"{op.name} over a spread btree bucket (partitions: {place['partitions']}) "
                                        "is not built yet; declare the bucket with placement: whole to use it")
        owners = sorted(set(place["owners"]))
        answers = await asyncio.gather(*(self._here_or_there(n, doc) for n in owners))
        for answer in answers:
            if answer.get("ok") != 1:
                return answer
        if op.gather == _SUM:
            return {"ok": 1, "result": sum(a["result"] for a in answers)}
        sort_key = _btree_order(place, doc["bucket"])
        if op.gather in (_LEAST, _GREATEST):
            found = [a["result"] for a in answers if a.get("result") is not None]
            pick = min if op.gather == _LEAST else max
            return {"ok": 1, "result": pick(found, key=sort_key) if found else None}
        args = doc.get("args") or {}
        reverse = op.param("reverse") is not None and args.get("reverse") is True
        docs = [d for a in answers for d in a["result"]]
        docs.sort(key=sort_key, reverse=reverse)  # stable: equal keys keep their node's order
        limit = args.get("limit")
        if limit is None:  # (list's default limit; range has none)
            limit = _default_of("btree", op.name, "limit")
        if isinstance(limit, int) and limit > 0:
            docs = docs[:limit]
        return {"ok": 1, "result": docs}

    async def _gather_queue(self, op: operations.Operation, doc: dict, place: dict) -> dict:
        """A partitioned queue's verbs over every partition (hoarddb/cluster/node.py's docstring, docs/user/cluster.md).

        pop, claim and peek take from the owners in turn: each call starts at the node after the one
        the last pop or claim of this bucket (through this node) started at, and takes what it can
        there before going on to the next, until it has ``limit`` elements or every owner was asked.
        A routing client keeps the turns itself (hoarddb/client/router.py): it sends each pop or claim to the
        owner whose turn it is, naming it in ``_turn``, and that node starts at itself (nothing forwarded
        while it holds elements).
        Each owner's part runs over the partitions it holds, each in its own local bucket (hoarddb/cluster/queues.py);
        a claimId is given back as ``<p>/<claimId>``, and ack, release and extend go to that partition's owner.
        A partitioned heap's pop, claim and peek take the best of the owners' tops instead (hoarddb/cluster/heaps.py).
        """
        args = dict(doc.get("args") or {})
        owners = sorted(set(place["owners"]))
        if op.gather == _SUM:
            answers = await asyncio.gather(*(self._here_or_there(n, doc) for n in owners))
            bad = next((a for a in answers if a.get("ok") != 1), None)
            return bad or {"ok": 1, "result": sum(a["result"] for a in answers)}
        if op.gather == _BY_CLAIM:  # claimIds of several partitions (or none): each partition's to its owner
            return await queues.claims_by_partition(self, op, doc, place)
        if op.gather == _DOCUMENTS:
            return await self._queue_list(op, doc, owners, place)
        if op.gather == _PAGES and queues.partitioned(place):  # partition after partition (hoarddb/cluster/queues.py)
            return await queues.export(self, op, doc, place)
        if pushes(op):  # a push whose document is none: refused as on one server
            return await self.server.run_here({k: v for k, v in doc.items() if k != NODE_FIELD})
        if op.gather not in (_TURNS, _TURNS_CLAIMED):
            raise VerbNotSupportedError(f"{op.name} over a partitioned queue (partitions: {place['partitions']}) is not "
                                        "built yet; declare the bucket without partitions to use it")
        limit = args.get("limit")
        want = 1 if limit is None else limit
        if isinstance(want, bool) or not isinstance(want, int) or want < 1:
            return await self._here_or_there(owners[0], doc)  # the owner refuses it, saying what it takes
        turn = (doc["db"], doc["bucket"])
        chosen = doc.get(TURN_FIELD)
        if chosen in owners:  # the client's turn (hoarddb/client/router.py)
            start = owners.index(chosen)
        else:
            start = self._turns.get(turn, 0) % len(owners)
            if op.write:  # a pop or a claim (a peek looks where the next one starts)
                self._turns[turn] = start + 1
        if place["type"] == "heap":  # the best of the owners' tops (hoarddb/cluster/heaps.py)
            return await heaps.take(self, op, doc, owners[start:] + owners[:start], want,
                                    limit is None and op.gather == _TURNS)
        got: list = []
        refusal = None
        for node in owners[start:] + owners[:start]:
            if len(got) >= want:
                break
            answer = await self._here_or_there(node, {**doc, "args": {**args, "limit": want - len(got)}})
            if answer.get("ok") != 1:
                if answer.get("codeName") != "PARTITION_UNAVAILABLE" or not op.write:
                    return answer if not got else {"ok": 1, "result": got}
                refusal = refusal or answer  # a node that is down: the others' elements are taken
                continue
            got.extend(answer.get("result") or [])  # (a claimId names its partition already: queues.py)
        if not got and refusal is not None:
            return refusal
        if limit is None and op.gather == _TURNS:
            return {"ok": 1, "result": got[0] if got else None}
        return {"ok": 1, "result": got}

    async def _queue_list(self, op: operations.Operation, doc: dict, owners: list[str], place: dict) -> dict:
        """list over a partitioned queue: each owner's elements in storage order, owner after owner; after and limit
        counted over the whole. A fifo's or lifo's: each owner asked only for its slice (queues.list_over_owners); a
        heap's: each owner's first after + limit, merged in pop order."""
        if place["type"] != "heap":
            return await queues.list_over_owners(self, op, doc, owners, place)
        args = dict(doc.get("args") or {})
        page = queues.page_of(op, args, place["type"])
        if page is None:
            return await self._here_or_there(owners[0], doc)  # refused there, saying what it takes
        after, limit = page
        answers = await asyncio.gather(*(self._here_or_there(
            n, {**doc, "args": {**args, "after": 0, "limit": after + limit}}) for n in owners))
        bad = next((a for a in answers if a.get("ok") != 1), None)
        if bad is not None:
            return bad
        return {"ok": 1, "result": heaps.merged_list(answers, after, limit)}  # in pop order, merged

    # -- spread blob buckets: a blob's partition is a hash of its id

    async def _run_upload(self, doc: dict, upload) -> dict:
        """A request whose bytes arrive in chunks (a blob put, or a one-blob load), handed to the cluster."""
        db, bucket = doc["db"], doc["bucket"]
        place = await self._placement(db, bucket)
        op = operations.OPERATIONS[doc["op"]]
        if place is not None and place["type"] == "blob" and place["partitions"] > 1 and "field" not in doc:
            if op is _BLOB_PUT:
                return await self._blob_put(doc, place, upload)
            docs = (doc.get("args") or {}).get("docs")
            if op is _BLOB_LOAD and isinstance(docs, list) and len(docs) == 1:
                blob_id = _blob_id_or_none(docs[0])
                if blob_id is not None:
                    p = partition_of(blob_id, place["partitions"])
                    if place["owners"][p] == self.node_id:
                        await self._claim_assigned(db, bucket)
                        return await self._write_here(_with_upload(op, doc, upload))
                    return await self._relay_upload(place["owners"][p], doc, upload, db, bucket, p)
        if place is None:
            return await self._run(doc)  # no such bucket: said as one server says it
        p = self._partition(place, doc, op)
        if p is None:  # (a store field's put naming no document: refused here as on one server)
            return await self._write_here(_with_upload(op, {k: v for k, v in doc.items() if k != NODE_FIELD}, upload))
        owner = place["owners"][p]
        if owner != self.node_id:
            return await self._relay_upload(owner, doc, upload, db, bucket, p)
        if self.coord.holds(db, bucket, p) is None:
            try:
                await self.coord.claim(db, bucket, p)
            except OwnedElsewhere as e:
                raise PartitionUnavailableError(f"partition {p} of {db}.{bucket} is assigned to node {self.node_id} "
                                                f"but node {e.node} still holds it; try again in a moment",
                                                node=e.node) from None
        return await self._write_here(_with_upload(op, {k: v for k, v in doc.items() if k != NODE_FIELD}, upload))

    async def _relay_upload(self, node: str, request: dict, upload, db: str, bucket: str, p: int) -> dict:
        """A write whose bytes arrive in chunks (``upload``, the client's), for partition ``p`` owned by ``node``:
        sent there as an upload of its own over the kept connection, each chunk passed on as it arrives.

        Bounded: the client's chunks wait in ``upload`` (a few, then its connection stops being read) until the
        link to the owner has room for them, so a blob of any size holds a few MiB here. A request sent by
        another node is not relayed again: the partition moved, and the sender is told so."""
        if NODE_FIELD in request:
            raise PartitionUnavailableError(f"partition {p} of {db}.{bucket} is owned by node {node}, not "
                                            f"{self.node_id}; send it there", node=node, moved=True)
        from ..chunks import CHUNK_SIZE  # noqa: PLC0415

        peer, address = await self._link_to(node)
        self.forwarded += 1
        sent = {k: v for k, v in request.items() if k not in ("id", "upload")}
        sent[NODE_FIELD] = self.node_id
        sent["upload"] = True
        loop = asyncio.get_running_loop()
        rid = None
        try:
            proto = await peer.connect()
            rid = proto.open(sent)
            while True:
                if proto.has_message(rid):  # answered before the end (refused): the rest is not sent
                    proto.abort_upload(rid)
                    break
                try:
                    data = await loop.run_in_executor(None, upload.read, CHUNK_SIZE)
                except HoardError as e:  # the client's upload failed (aborted, closed, silent): so does the relay
                    proto.abort_upload(rid)
                    return e.to_answer()  # (the client's error, not the link's: the owner stored nothing)
                if not data:
                    await proto.write(proto.core.chunk(rid, b"", end=True))
                    break
                await proto.write(proto.core.chunk(rid, data))
            answer = await proto.next(rid)
        except (ConnectionError_, TimeoutError_) as e:
            if rid is not None:
                raise PartitionUnavailableError(
                    f"node {node} did not answer ({e.message}); the write may or may not have been applied: "
                    "read it back before trying again", node=node, outcome_unknown=True) from None
            raise PartitionUnavailableError(f"node {node} cannot be reached at {address}: {e.message}",
                                            node=node) from None
        finally:
            if rid is not None:
                proto.finish(rid)
        answer.pop("id", None)
        return answer

    async def _link_to(self, node: str):
        """The kept connection to ``node`` and its address (PartitionUnavailableError when it is not in the cluster)."""
        info = self.nodes.get(node)
        if info is None:  # joined since the last refresh, or gone: etcd says which
            self.nodes = await self.coord.nodes()
            info = self.nodes.get(node)
        if info is None:
            raise PartitionUnavailableError(f"node {node} is not in the cluster now (down, or its lease ran out); "
                                            "its partitions answer again once it is back", node=node)
        peer = self._peers.get(node)
        if peer is None:
            peer = self._peers[node] = self._link(info)
        return peer, info.get("advertise")

    async def _blob_put(self, doc: dict, place: dict, upload) -> dict:
        """A put on a spread blob bucket: the blob's id is made here, in a partition this node owns when it owns
        any (so the bytes stay here), and the put runs as a load of that one blob at that id; its answer is the id.
        A partition a move is planned for is avoided (else a node being drained would keep filling the partitions
        it is moving away, and their catch-up would never end): the id goes to a settled one held here, else to
        any settled one (sent to its owner), else anywhere."""
        from ..stores.blob import _blob_id  # noqa: PLC0415

        db, bucket = doc["db"], doc["bucket"]
        args = dict(doc.get("args") or {})
        given = args.get("doc")
        blob = {k: v for k, v in given.items()} if isinstance(given, dict) else {"data": given}
        for field in ("name", "type"):
            if args.get(field) is not None:
                if field in blob:
                    return await self.server.run_here(doc)  # refused there: given twice
                blob[field] = args[field]
        if upload is not None:
            blob["data"] = upload
        if "data" not in blob or blob["data"] is None or set(blob) - {"data", "name", "type"}:
            return await self.server.run_here(doc)  # refused there, saying what a put takes
        partitions, owners = place["partitions"], place["owners"]
        settled = self.mover.settled(db, bucket)
        mine = {p for p in settled if owners[p] == self.node_id} or settled
        blob_id = _blob_id(uuid7())
        while mine and partition_of(blob_id, partitions) not in mine:
            blob_id = _blob_id(uuid7())
        owner = owners[partition_of(blob_id, partitions)]
        if upload is not None:  # the bytes travel as the upload's chunks, never inside the request
            blob = {k: v for k, v in blob.items() if k != "data"}
        request = {"op": _BLOB_LOAD.name, "db": db, "bucket": bucket, "args": {"docs": [{"_id_": blob_id, **blob}]}}
        if owner == self.node_id:
            await self._claim_assigned(db, bucket)
            answer = await (self._write_here(_with_upload(_BLOB_LOAD, request, upload)) if upload is not None
                            else self.server.run_here(request))
        elif upload is not None:
            answer = await self._relay_upload(owner, request, upload, db, bucket, partition_of(blob_id, partitions))
        else:
            answer = await self._forward(owner, request)
        return {"ok": 1, "result": blob_id} if answer.get("ok") == 1 else answer

    async def _write_here(self, request: dict) -> dict:
        """A write whose bytes arrive in chunks, run here on the write pool as a single server runs it (not in the
        group commit: it waits on the network), answered once durable."""
        server = self.server
        try:
            answer = await server.loop.run_in_executor(server._writes, server._run, request)
        except HoardError as e:
            return e.to_answer()
        if answer.get("ok") == 1 and server.committer is not None:
            synced: asyncio.Future = server.loop.create_future()
            server.committer.after_durable(lambda error: synced.done() or synced.set_result(error))
            error = await synced
            if error is not None:
                return error.to_answer()
        return answer

    # -- export, distinct and aggregate over a spread bucket (the table gives them no gather: the node asked merges)

    async def _each_part(self, doc: dict, place: dict, op: operations.Operation | None = None,
                         partitions=None) -> list[tuple[str, set[int], dict]]:
        """``doc`` sent to every node owning some of the bucket's partitions (or of ``partitions``), each told which
        (``_parts``); a part refused because its partitions moved is sent again to their owners by the map read
        anew. Each answer with its node and the partitions it stands for, so that the caller keeps of it only what
        they hold (a node may hold documents of other partitions while they move)."""
        db, bucket = doc["db"], doc["bucket"]
        op = op or operations.OPERATIONS[doc["op"]]
        todo = sorted(partitions) if partitions is not None else list(range(place["partitions"]))
        out: list[tuple[str, set[int], dict]] = []
        for attempt in range(4):
            groups: dict[str, list[int]] = {}
            for p in todo:
                groups.setdefault(place["owners"][p], []).append(p)
            nodes = sorted(groups)
            got = await asyncio.gather(*(self._here_or_there(n, {**doc, PARTS_FIELD: groups[n]}, op, place)
                                         for n in nodes))
            todo = []
            for n, a in zip(nodes, got):
                if a.get("codeName") == "PARTITION_UNAVAILABLE" and (a.get("details") or {}).get("moved") \
                        and attempt < 3:
                    todo += groups[n]
                else:
                    out.append((n, set(groups[n]), a))
            if not todo:
                break
            await self.refresh_placement(db, bucket)
            place = self.placements.get((db, bucket), place)
        return out

    def _joins_elsewhere(self, op: operations.Operation, doc: dict, place: dict) -> bool:
        """Whether an aggregate on a whole bucket joins (``$lookup``) a bucket its owner does not hold whole: the
        owner's engine would read only its own part of that one, so the node asked runs it (gathers.aggregate)."""
        if not op.joins or NODE_FIELD in doc or place["partitions"] != 1 or place["type"] not in op.types:
            return False
        args = doc.get("args")
        for name in _lookups(args.get("pipeline") if isinstance(args, dict) else None):
            joined = self.placements.get((doc.get("db"), name)) if isinstance(name, str) else None
            if joined is not None and (joined["partitions"] != 1 or joined["owners"][0] != place["owners"][0]):
                return True
        return False

    async def _each_owner(self, op: operations.Operation, doc: dict, place: dict) -> tuple[list[str], list[dict]]:
        """:meth:`_each_part`'s nodes and their answers (a node that answered twice, its answers merged by the
        caller)."""
        parts = await self._each_part(doc, place, op)
        return [n for n, _, _ in parts], [a for _, _, a in parts]

    async def _windows(self, doc: dict, place: dict) -> dict:
        """One window of a time-range index over a spread bucket: each node answers for its own
        partitions with every value's count (a top K from each would miss a value that is K+1st
        everywhere yet first overall), and the counts are added up and ranked here. Every node
        reads the same window: newest and oldest are resolved by each node's clock, so when the
        nodes disagree (a step boundary passed between them) they are asked again for the start
        the first one chose."""
        args = dict(doc.get("args") or {})
        part = args if args.get("top") is None else {**{k: v for k, v in args.items() if k != "top"}, "counts": True}
        owners = sorted(set(place["owners"]))
        answers = await asyncio.gather(*(self._here_or_there(n, {**doc, "args": part}) for n in owners))
        for answer in answers:
            if answer.get("ok") != 1:
                return answer
        starts = {a["result"]["start"] for a in answers}
        if len(starts) > 1:
            first = answers[0]["result"]["start"]
            part = {k: v for k, v in part.items() if k not in ("newest", "oldest")} | {"byStart": first}
            answers = await asyncio.gather(*(self._here_or_there(n, {**doc, "args": part}) for n in owners))
            for answer in answers:
                if answer.get("ok") != 1:
                    return answer
        result = {k: v for k, v in answers[0]["result"].items() if k != "counts"}
        result["count"] = sum(a["result"]["count"] for a in answers)
        merged: dict[bytes, list] = {}
        for a in answers:
            for c in a["result"].get("counts") or []:
                slot = merged.setdefault(encode_key(c["value"]), [c["value"], 0])
                slot[1] += c["count"]
        every = [{"value": v, "count": n} for _k, (v, n) in sorted(merged.items())]
        if args.get("top") is not None:
            result["top"] = sorted(every, key=lambda c: -c["count"])[:args["top"]]  # stable: ties by value
        if args.get("counts"):
            result["counts"] = every
        return {"ok": 1, "result": result}

    async def _here_or_there(self, node: str, doc: dict, op: operations.Operation | None = None,
                             place: dict | None = None) -> dict:
        if node == self.node_id:
            here = place or self.placements.get((doc["db"], doc["bucket"]))
            if queues.partitioned(here):  # this node's part over the partitions it holds (hoarddb/cluster/queues.py)
                return await queues.part(self, op or operations.OPERATIONS[doc["op"]], {**doc, NODE_FIELD: self.node_id},
                                         here)
            await self._claim_assigned(doc["db"], doc["bucket"])
            if op is not None and PARTS_FIELD in doc:
                try:
                    return await self.mover.part(op, {**doc, NODE_FIELD: self.node_id}, place)
                except HoardError as e:
                    return e.to_answer()
            return await self.server.run_here({k: v for k, v in doc.items() if k != NODE_FIELD})
        return await self._forward(node, doc)

    async def _split(self, op: operations.Operation, doc: dict, place: dict) -> dict:
        """A batch over a spread bucket: one batch per owner, each all-or-nothing in its node;
        the answer lists the keys in the order given, or says which were written and which refused."""
        args = dict(doc.get("args") or {})
        docs = args.get("docs")
        if not isinstance(docs, list):
            return await self.server.run_here(doc)  # the engine refuses it, saying what it takes
        docs = [d if not isinstance(d, dict) or "_id_" in d or not op.makes_key or place["type"] == "btree"
                else {"_id_": uuid7(), **d} for d in docs]  # (a btree entry sorts by its own first field)
        names, answers, groups = await self._split_parts(op, doc, args, docs, place)
        if all(a.get("ok") == 1 for a in answers):
            if all(type(a.get("result")) is int for a in answers):  # a batch_push: how many, added up
                return {"ok": 1, "result": sum(a["result"] for a in answers)}
            if not all(isinstance(a.get("result"), list) for a in answers):  # a load: {loaded, ...} added up
                merged: dict = {}
                for a in answers:
                    for k, v in (a.get("result") or {}).items():
                        merged[k] = merged.get(k, 0) + v if isinstance(v, int) else v
                return {"ok": 1, "result": merged}
            keys: list = [None] * len(docs)
            for n, a in zip(names, answers):
                for i, k in zip(groups[n], a["result"]):
                    keys[i] = k
            return {"ok": 1, "result": keys}
        written = sorted(i for n, a in zip(names, answers) if a.get("ok") == 1 for i in groups[n])
        refused = sorted(i for n, a in zip(names, answers) if a.get("ok") != 1 for i in groups[n])
        first = next(a for a in answers if a.get("ok") != 1)
        return {**first, "message": (f"{op.name} over a spread bucket: {len(written)} of {len(docs)} documents "
                                     f"written (positions {written[:20]}{'...' if len(written) > 20 else ''}), "
                                     f"{len(refused)} refused (positions {refused[:20]}"
                                     f"{'...' if len(refused) > 20 else ''}), each partition all or nothing: "
                                     f"{first.get('message')}"),
                "details": {**(first.get("details") or {}), "written": written, "refused": refused}}

    async def _split_parts(self, op, doc: dict, args: dict, docs: list, place: dict):
        """A batch cut by owner, each part sent with its partitions (``_parts``); a part refused because its
        partitions moved is cut again by the map read anew. ``(names, answers, {name: positions})``, a
        node that answered twice under names of its own (``n1``, ``n1#1``)."""
        db, bucket = doc["db"], doc["bucket"]
        todo = list(range(len(docs)))
        names: list[str] = []
        answers: list[dict] = []
        positions: dict[str, list[int]] = {}
        for attempt in range(4):
            groups: dict[str, list[int]] = {}
            parts: dict[str, set[int]] = {}
            for i in todo:
                d = docs[i]
                key = route_value(d, place)
                if key is _NONE:
                    owner, p = self.node_id, None
                else:
                    p = partition_of(key, place["partitions"])
                    owner = place["owners"][p]
                groups.setdefault(owner, []).append(i)
                if p is not None:
                    parts.setdefault(owner, set()).add(p)
            nodes = sorted(groups)
            cut = place["type"] == "hash"  # (moves carry hash buckets only: other parts run whole on their node)
            got = await asyncio.gather(*(self._here_or_there(
                n, {**doc, "args": {**args, "docs": [docs[i] for i in groups[n]]},
                    **({PARTS_FIELD: sorted(parts.get(n, ()))} if cut else {})}, op if cut else None, place)
                for n in nodes))
            todo = []
            for n, a in zip(nodes, got):
                if a.get("codeName") == "PARTITION_UNAVAILABLE" and (a.get("details") or {}).get("moved") \
                        and attempt < 3:
                    todo += groups[n]
                    continue
                name = n if n not in positions else f"{n}#{attempt}"
                names.append(name)
                answers.append(a)
                positions[name] = groups[n]
            if not todo:
                break
            todo.sort()
            await self.refresh_placement(db, bucket)
            place = self.placements.get((db, bucket), place)
        return names, answers, positions

    # -- metrics

    def exposition(self) -> bytes:
        """This node's cluster metrics in Prometheus' text format (appended to the server's /metrics)::

            hoarddb_cluster_partitions_held              partitions this node holds now
            hoarddb_cluster_forwarded_requests_total     requests (and parts of gathered ones) sent to another node
            hoarddb_cluster_etcd_round_trip_seconds      the last lease renewal's round trip to etcd
            hoarddb_cluster_lease_fresh                  1 while this node's lease surely lives, else 0
            hoarddb_cluster_lease_lapses_total           times etcd let this node's lease run out while it ran
            hoarddb_cluster_pick_retries_total           writes picking one document whose pick changed: looked again
            hoarddb_cluster_moves_total                  partitions this node handed over to another
            hoarddb_cluster_moved_documents_total        documents it sent in moves (catch-up rounds included)
            hoarddb_cluster_moved_bytes_total            their bytes (BSON)
            hoarddb_cluster_moving_partitions            partitions it is moving away now
        """
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        node = self

        class _Collector:
            def collect(self):
                yield GaugeMetricFamily("hoarddb_cluster_partitions_held", "Partitions this node holds now",
                                        value=len(node.coord.held) if node.coord.lease_fresh() else 0)
                yield CounterMetricFamily("hoarddb_cluster_forwarded_requests",
                                          "Requests sent to the node that owns their partition", value=node.forwarded)
                yield GaugeMetricFamily("hoarddb_cluster_etcd_round_trip_seconds",
                                        "The last lease renewal's round trip to etcd",
                                        value=node.coord.round_trip_ms / 1000)
                yield GaugeMetricFamily("hoarddb_cluster_lease_fresh", "1 while this node's lease surely lives",
                                        value=1 if node.coord.lease_fresh() else 0)
                yield CounterMetricFamily("hoarddb_cluster_lease_lapses",
                                          "Times etcd let this node's lease run out while it ran (it joined again)",
                                          value=node.coord.lapses)
                yield CounterMetricFamily("hoarddb_cluster_pick_retries",
                                          "Writes picking one document over a spread bucket whose pick changed "
                                          "before its write, so that they looked again", value=node.pick_retries)
                yield from node.mover.metrics()

        registry = CollectorRegistry()
        registry.register(_Collector())
        return generate_latest(registry)

    # -- status

    def status(self) -> dict:
        """This node's view: nodes, partitions held, requests forwarded, the last etcd round trip."""
        held: dict[str, int] = {}
        for db, bucket, _p in self.coord.held:
            held[f"{db}.{bucket}"] = held.get(f"{db}.{bucket}", 0) + 1
        return {"node": self.node_id, "nodes": sorted(self.nodes), "held": held, "lease_fresh": self.coord.lease_fresh(),
                "forwarded": self.forwarded, "etcd_round_trip_ms": round(self.coord.round_trip_ms, 3),
                "moves": self.mover.status()}



#: The gathers (the table's) that merge here what each owner sends: export's pages, distinct's values, aggregate's
#: pipeline run over the documents gathered.
_GATHERED_WHOLE = {_PAGES: gathers.export, "values": gathers.distinct, "pipeline": gathers.aggregate}


def _lookups(value: Any) -> list:
    """The buckets every ``$lookup`` of a pipeline reads (nested ones, in ``$facet``, included)."""
    found: list = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "$lookup" and isinstance(v, dict) and "from" in v:
                found.append(v["from"])
            found += _lookups(v)
    elif isinstance(value, list):
        for v in value:
            found += _lookups(v)
    return found


def _default_of(store_type: str, verb: str, param: str) -> Any:
    """What a store type's verb takes for ``param`` when it is left out (list's limit: 100), or None."""
    method = getattr(store_class(store_type), verb, None)
    if method is None:
        return None
    found = inspect.signature(method).parameters.get(param)
    return None if found is None or found.default is inspect.Parameter.empty else found.default


def route_value(item: Any, place: dict) -> Any:
    """The value whose hash is the partition of a stored item of a bucket (``partition_of(value, P)``), or _NONE
    when the item has none (the engine refuses it): a hash document's ``_id_``, a btree entry's sort value, a
    blob's id (lower case), a partitioned queue's element's group field (missing: None).

    Everything that cuts a bucket's items by partition uses this: a batch split by owner, and a move picking a
    partition's items out of a node's local bucket."""
    if place.get("group") is not None:
        return item.get(place["group"]) if isinstance(item, dict) else _NONE
    if place["type"] == "btree":
        value = _btree_sort_value(item, place)
        return _NONE if value is None else value
    if place["type"] == "blob":
        value = _blob_id_or_none(item)
        return _NONE if value is None else value
    return item["_id_"] if isinstance(item, dict) and item.get("_id_") is not None else _NONE






def _with_upload(op: operations.Operation, doc: dict, upload) -> dict:
    """``doc`` with an upload's bytes where the operation takes them (as the server puts them for a single server)."""
    request = {k: v for k, v in doc.items() if k not in ("id", "upload")}
    args = dict(request.get("args") or {})
    if op.upload == "docs" and isinstance(args.get("docs"), list) and len(args["docs"]) == 1:
        args["docs"] = [{**args["docs"][0], "data": upload}]
    elif isinstance(args.get("doc"), dict):
        args["doc"] = {**args["doc"], "data": upload}
    elif "field" in request and "doc" not in args:
        args["key"] = {**args["key"], "data": upload} if isinstance(args.get("key"), dict) else upload
    else:
        args["doc"] = upload
    request["args"] = args
    return request


def _blob_id_or_none(doc: Any) -> str | None:
    """A blob document's id as a blob bucket spells it (lower case), or None when it has none that is valid."""
    from ..stores.blob import _blob_id  # noqa: PLC0415

    if not isinstance(doc, dict) or "_id_" not in doc:
        return None
    try:
        return _blob_id(doc["_id_"])
    except HoardError:
        return None


def _blob_key_of(op: operations.Operation, doc: dict) -> Any:
    """The blob id a request on a blob bucket acts on (get, info, stream, delete), or _NONE when it acts on many."""
    from ..stores.blob import _blob_id  # noqa: PLC0415

    if "field" in doc or not op.key_param or op is _BLOB_PUT:
        return _NONE
    args = doc.get("args") or {}
    if not isinstance(args, dict) or op.key_param not in args:
        return _NONE
    try:
        return _blob_id(args[op.key_param])
    except HoardError:
        return _NONE


def _btree_sort_value(doc: Any, place: dict) -> Any:
    """The value a btree entry sorts by (its partition's key), or None when it has none (the engine refuses it)."""
    from ..stores.btree import _sort_value  # noqa: PLC0415

    if not isinstance(doc, dict):
        return None
    try:
        return _sort_value(doc, place.get("key"), "")
    except HoardError:
        return None


def _btree_order(place: dict, bucket: str):
    """A sort key for the entries of a btree bucket: their sort values' order-preserving encoding."""
    from ..stores.btree import _sort_value  # noqa: PLC0415

    field = place.get("key")
    return lambda entry: encode_key(_sort_value(entry, field, bucket))


def _btree_key_of(op: operations.Operation, doc: dict, place: dict) -> Any:
    """The sort value a request on a btree bucket acts on (its partition's key), or _NONE when it acts on many.

    An entry's partition is a hash of its sort value, so entries with equal keys share one
    (their insertion order is kept). A key is given bare or as ``{Field: value}``."""
    if "field" in doc:
        key = doc.get("key", _NONE)
    elif not op.key_param:
        return _NONE
    else:
        args = doc.get("args") or {}
        if not isinstance(args, dict) or op.key_param not in args:
            return _NONE
        key = args[op.key_param]
        if op.param(op.key_param).kind == "doc":  # insert: the document's own sort value
            value = _btree_sort_value(key, place)
            return _NONE if value is None else value
    if isinstance(key, dict):
        if len(key) != 1:
            return _NONE
        (key,) = key.values()
        if isinstance(key, dict) and any(str(k).startswith("$") for k in key):
            return _NONE
    return _NONE if isinstance(key, list) else key


