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

Where a request runs is read from the command table (hoarddb.operations): the operation's
``runs`` and ``catalog`` flags, and its route (``key``: a store field's document key; a
bucket verb's document key is in its arguments, see :func:`_key_of`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from typing import Any

from .. import operations
from ..declaration import SPREADABLE, DEFAULT_MAX_DEPTH, declare_bucket
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
from ..stores import store_class
from ..values.keys import encode_key
from ..values.projection import compile_projection
from ..values.sort import compile_sort
from .coord import Coordinator, OwnedElsewhere
from .partitions import DEFAULT_PARTITIONS, balance, partition_of

log = logging.getLogger("hoarddb.cluster")

#: The request field that marks a request sent by another node (its id): run here, not routed again.
NODE_FIELD = "_node"
#: How the answers of a spread bucket's partitions merge (an operation's ``gather``).
_DOCUMENTS, _SUM, _COUNTS, _SPLIT, _WINDOWS = "documents", "sum", "counts", "split", "windows"
#: The catalog operations, found by what they change (the table's ``change`` and ``scope``).
_CREATE_BUCKET = next(n for n, o in operations.ADMIN.items() if o.change == "create" and o.scope == operations.BUCKET)
_DROPS = {o.scope: n for n, o in operations.ADMIN.items() if o.change == "drop"}


class ClusterNode:
    """ClusterNode is one server's part in a cluster: its coordinator, its links to the other nodes, the placements it knows."""

    def __init__(self, server, endpoints: list[str], node_id: str, advertise: str, ttl: int):
        self.server = server
        self.node_id = node_id
        self.coord = Coordinator(endpoints, node_id, advertise, ttl=ttl)
        #: {(db, bucket): {"partitions": P, "owners": [node per partition]}}
        self.placements: dict[tuple[str, str], dict] = {}
        #: live nodes {id: {advertise, tls, fingerprint}}, refreshed every second
        self.nodes: dict[str, dict] = {}
        self._peers: dict[str, Any] = {}
        self._refresher: asyncio.Task | None = None
        self.forwarded = 0

    # -- life cycle

    async def start(self, info: dict) -> None:
        """Join (membership under this node's lease), learn the catalog, create what is missing here,
        and take the partitions assigned to this node."""
        await self.coord.start(info)
        self.nodes = await self.coord.nodes()
        for (db, bucket), decl in (await self.coord.buckets()).items():
            await self._apply_bucket(db, bucket, decl)
            await self._claim_assigned(db, bucket)
        self._refresher = asyncio.get_running_loop().create_task(self._refresh())

    async def stop(self) -> None:
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
        op = operations.OPERATIONS.get(doc.get("op"))
        if op is None:
            return False  # the engine refuses it, naming the operations
        if op.catalog:
            return True
        if op.runs != operations.STORE:
            return False  # the server's and the catalog's reads: every node answers alike
        place = self.placements.get((doc.get("db"), doc.get("bucket")))
        if place is None:
            return True  # not known here yet: etcd says
        p = self._partition(place, doc, op)
        if p is None:
            return NODE_FIELD not in doc  # sent by a node: this node's part of a scatter
        return self.coord.holds(doc["db"], doc["bucket"], p) is None

    async def run(self, doc: dict) -> dict:
        """The answer to a request :meth:`takes` handed over: run here, forwarded, or gathered."""
        try:
            return await self._run(doc)
        except HoardError as e:
            return e.to_answer()

    async def _run(self, doc: dict) -> dict:
        op = operations.OPERATIONS[doc["op"]]
        if op.catalog:
            return await (self._apply_catalog(op, doc) if NODE_FIELD in doc else self._catalog(op, doc))
        db, bucket = doc["db"], doc["bucket"]
        place = await self._placement(db, bucket)
        if place is None:
            return await self.server.run_here(doc)  # no such bucket: the engine says so
        p = self._partition(place, doc, op)
        if p is None:
            if NODE_FIELD in doc or place["type"] not in op.types or (
                    not op.gather and op.key_param and op.param(op.key_param).kind != "filter"):
                # this node's part of a gather; or what the engine refuses wherever it runs (a verb the
                # type lacks, a document or key that names no document): refused here as on one server
                await self._claim_assigned(db, bucket)
                return await self.server.run_here({k: v for k, v in doc.items() if k != NODE_FIELD})
            return await self._gather(op, doc, place)
        return await self._one(doc, place, p)

    async def _one(self, doc: dict, place: dict, p: int) -> dict:
        """A request for partition ``p``: run here if it is this node's, else sent to its owner."""
        db, bucket = doc["db"], doc["bucket"]
        owner = place["owners"][p]
        if owner == self.node_id:
            if self.coord.holds(db, bucket, p) is None:
                try:
                    await self.coord.claim(db, bucket, p)
                except OwnedElsewhere as e:
                    raise PartitionUnavailableError(
                        f"partition {p} of {db}.{bucket} is assigned to node {self.node_id} but node {e.node} "
                        "still holds it; try again in a moment", node=e.node) from None
            local = {k: v for k, v in doc.items() if k != NODE_FIELD}
            return await self.server.run_here(local)
        if NODE_FIELD in doc:  # sent here by a node whose map is older than ours
            raise PartitionUnavailableError(f"partition {p} of {db}.{bucket} is owned by node {owner}, not "
                                            f"{self.node_id}; send it there", node=owner)
        op = operations.OPERATIONS[doc["op"]]
        if (op.streams or doc.get("upload")) and place["type"] in op.types:
            where = (self.nodes.get(owner) or {}).get("advertise", "its address")
            raise VerbNotSupportedError(
                f"{op.name}: a blob's bytes are not passed between nodes yet; {db}.{bucket} is on node {owner}: "
                f"connect to it ({where}) for this", node=owner)
        return await self._forward(owner, doc)

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
        key = _key_of(op, doc)
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
                                         "type": (decl["options"] or {}).get("type", "hash")}

    async def _claim_assigned(self, db: str, bucket: str) -> None:
        place = self.placements.get((db, bucket))
        if place is None:
            return
        for p, owner in enumerate(place["owners"]):
            if owner == self.node_id and self.coord.holds(db, bucket, p) is None:
                try:
                    await self.coord.claim(db, bucket, p)
                except OwnedElsewhere as e:
                    log.warning("partition %d of %s.%s is assigned here but node %s holds it", p, db, bucket, e.node)

    # -- catalog changes

    async def _catalog(self, op: operations.Operation, doc: dict) -> dict:
        """A catalog change asked by a client: recorded in etcd, then applied on every live node."""
        db, bucket = doc.get("db"), doc.get("bucket")
        if op.change == "create" and op.scope == operations.BUCKET:
            raw = dict(doc.get("options") or {}) if isinstance(doc.get("options"), dict) else doc.get("options")
            if isinstance(raw, dict) and raw.get("type", "hash") in SPREADABLE \
                    and "placement" not in raw and "partitions" not in raw:
                raw["partitions"] = DEFAULT_PARTITIONS  # a hash bucket is spread unless declared whole
            engine = self.server.engine
            depth = engine.options.max_nesting_depth if engine is not None else DEFAULT_MAX_DEPTH
            declare_bucket(bucket, raw, depth)  # every refusal, before etcd hears of it
            if not isinstance(bucket, str):
                return await self.server.run_here(doc)
            partitions = raw.get("partitions", 1)
            self.nodes = await self.coord.nodes()  # as they are now: a node that just joined gets its share
            owners = balance(partitions, list(self.nodes) or [self.node_id])
            if not await self.coord.create_bucket(db, bucket, {"options": raw, "partitions": partitions}, owners):
                raise BucketExistsError(f"bucket {bucket!r} already exists in database {db!r}")
            doc = {**doc, "options": raw}
        elif op.change == "drop" and op.scope == operations.BUCKET:
            await self.coord.drop_bucket(db, bucket)
        elif op.change == "drop" and op.scope == operations.DATABASE:
            for (d, b) in list(await self.coord.buckets()):
                if d == db:
                    await self.coord.drop_bucket(d, b)
        answers = await self._everywhere({**doc, NODE_FIELD: self.node_id})
        mine = answers.pop(self.node_id)
        failed = {n: a for n, a in answers.items() if a.get("ok") != 1 and a.get("codeName") != "BUCKET_EXISTS"}
        if failed:
            log.warning("%s on %s.%s: not applied on %s", op.name, db, bucket, failed)
        return mine

    async def _apply_catalog(self, op: operations.Operation, doc: dict) -> dict:
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
                                         else self._forward(n, doc, ok_only=False) for n in names))
        return dict(zip(names, answers))

    # -- forwarding

    async def _forward(self, node: str, doc: dict, ok_only: bool = False) -> dict:
        """``doc``'s answer from ``node`` over the kept connection to it (an error answer as one)."""
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
            raise PartitionUnavailableError(f"node {node} cannot be reached at {info.get('advertise')}: {e.message}",
                                            node=node) from None
        except HoardError as e:
            return e.to_answer()

    def _link(self, info: dict):
        from ..client.aio import AsyncExecutor
        from ..client.options import ConnectOptions

        host, _, port = info["advertise"].rpartition(":")
        options = {"host": host, "port": int(port), "timeout": 60.0}
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
        if op.gather == _SPLIT:
            return await self._split(op, doc, place)
        if op.gather == _WINDOWS:
            return await self._windows(doc, place)
        if not op.gather:
            raise VerbNotSupportedError(f"{op.name} over a spread bucket (partitions: {place['partitions']}) is not "
                                        "built yet; declare the bucket with placement: whole to use it")
        args = doc.get("args") or {}
        if op.gather == _COUNTS and (args.get("upsert") or args.get("multi") is False):
            raise VerbNotSupportedError(f"{op.name} with upsert or multi: false over a spread bucket (partitions: "
                                        f"{place['partitions']}) needs a filter on _id_ (one document's partition); "
                                        "over every partition it is not built yet")
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
        owners = sorted(set(place["owners"]))
        answers = await asyncio.gather(*(self._here_or_there(n, doc) for n in owners))
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
        return answer

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

    async def _here_or_there(self, node: str, doc: dict) -> dict:
        if node == self.node_id:
            await self._claim_assigned(doc["db"], doc["bucket"])
            return await self.server.run_here({k: v for k, v in doc.items() if k != NODE_FIELD})
        return await self._forward(node, doc)

    async def _split(self, op: operations.Operation, doc: dict, place: dict) -> dict:
        """A batch over a spread bucket: one batch per owner, each all-or-nothing in its node;
        the answer lists the keys in the order given, or says which were written and which refused."""
        args = dict(doc.get("args") or {})
        docs = args.get("docs")
        if not isinstance(docs, list):
            return await self.server.run_here(doc)  # the engine refuses it, saying what it takes
        docs = [d if not isinstance(d, dict) or "_id_" in d or not op.makes_key
                else {"_id_": uuid7(), **d} for d in docs]
        groups: dict[str, list[int]] = {}
        for i, d in enumerate(docs):
            key = d.get("_id_") if isinstance(d, dict) else None
            owner = place["owners"][partition_of(key, place["partitions"])] if key is not None else self.node_id
            groups.setdefault(owner, []).append(i)
        names = sorted(groups)
        answers = await asyncio.gather(*(self._here_or_there(
            n, {**doc, "args": {**args, "docs": [docs[i] for i in groups[n]]}}) for n in names))
        if all(a.get("ok") == 1 for a in answers):
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

    # -- metrics

    def exposition(self) -> bytes:
        """This node's cluster metrics in Prometheus' text format (appended to the server's /metrics)::

            hoarddb_cluster_partitions_held              partitions this node holds now
            hoarddb_cluster_forwarded_requests_total     requests (and parts of gathered ones) sent to another node
            hoarddb_cluster_etcd_round_trip_seconds      the last lease renewal's round trip to etcd
            hoarddb_cluster_lease_fresh                  1 while this node's lease surely lives, else 0
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
                "forwarded": self.forwarded, "etcd_round_trip_ms": round(self.coord.round_trip_ms, 3)}


_NONE = object()


def _default_of(store_type: str, verb: str, param: str) -> Any:
    """What a store type's verb takes for ``param`` when it is left out (list's limit: 100), or None."""
    method = getattr(store_class(store_type), verb, None)
    if method is None:
        return None
    found = inspect.signature(method).parameters.get(param)
    return None if found is None or found.default is inspect.Parameter.empty else found.default


def _key_of(op: operations.Operation, doc: dict) -> Any:
    """The document key a request acts on, or _NONE when it acts on many (the table's route and key_param)."""
    if "field" in doc:  # a document's store field: routed by the document's key (route: key)
        return doc.get("key", _NONE)
    if not op.key_param:
        return _NONE
    args = doc.get("args") or {}
    if not isinstance(args, dict):
        return _NONE
    value = args.get(op.key_param)
    if isinstance(value, dict):
        if "_id_" in value:
            key = value["_id_"]
            return key if not isinstance(key, (dict, list)) else _NONE  # {_id_: {$in: [...]}}: many
        if op.makes_key:  # an insert without a key: made here, so that its partition is known
            args[op.key_param] = {"_id_": uuid7(), **value}
            return args[op.key_param]["_id_"]
        return _NONE
    if value is None or isinstance(value, list) or op.param(op.key_param).kind != "any":
        return _NONE
    return value  # a key itself (get's key, a delete's target given as a key)
