"""Coordination through etcd: membership, the cluster's catalog and users, the partition map, ownership and epochs.

The one module that imports the etcd client (``etcd3aio``, pinned in pyproject.toml).
Every key lives under a prefix (``/hoarddb/`` by default), drawn in docs/dev/cluster.md::

    nodes/<node>                     {advertise, started, lease}    the node's lease
    members/<node>                   {since}                        (no lease) the nodes the maps share partitions among
    catalog/databases/<db>           {}                             (no lease)
    catalog/buckets/<db>/<bucket>    {declaration, partitions}      (no lease)
    users/<user>                     {name, credentials, roles}     (no lease)
    assign/<db>/<bucket>             {owners: [node per partition], version}
    epoch/<db>/<bucket>/<p>          the partition's epoch, an integer as text
    owner/<db>/<bucket>/<p>          {node, epoch}                  the owner's lease
    moves/<db>/<bucket>/<p>          {from, to, state, ...}         (no lease; hoarddb/cluster/moves.py)
    cleanup/<node>/<db>/<bucket>     [partitions handed over, their copy not yet deleted]
    drained/<node>                   {since}                        taken out of the maps
    state/<node>                     {state, ...}                   the node's lease: its join or drain

Values are JSON. A node holds one lease, granted at :meth:`Coordinator.start`, kept alive
by its own task, attached to its ``nodes/`` key and to every ``owner/`` key it holds: when
the node dies, etcd removes them all when the lease runs out.

A live node whose lease ran out all the same (paused, or cut from etcd, for longer than the
TTL) comes back by itself: when a keepalive's answer says so, the node gives up what it
held, takes a new lease, writes ``nodes/<node>`` (and its ``state/<node>``) again under it,
and then calls :attr:`Coordinator.rejoined`, which takes back the partitions assigned to it
as at start (hoarddb/cluster/node.py). Until then it claims nothing.

Taking a partition (:meth:`Coordinator.claim`) is one transaction: the owner key must not
exist and the epoch must be the one read; then the epoch is raised and the owner key
written with the node's lease, so two nodes can never both succeed, and every holder of
a partition has an epoch no earlier holder had. A node serves a partition only while
:meth:`Coordinator.lease_fresh` holds: the last keepalive etcd answered was sent less
than the lease's TTL ago (less a margin). It decides that from its own clock, without
waiting to hear from etcd: once etcd may have let the lease run out, another node may hold
the partition.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import etcd3aio

from ..errors import BadValueError, ClusterUnavailableError, HoardError, PartitionUnavailableError
from .tasks import cancel_and_wait

log = logging.getLogger("hoarddb.cluster")

#: Seconds a node's lease lives without a keepalive: its partitions are given up (by the
#: node itself) this long after the last keepalive etcd answered.
DEFAULT_TTL = 5
#: Seconds taken off the TTL when a node judges its own lease: clocks of etcd and the node
#: run apart a little, and a request takes time between the check and its write.
LEASE_MARGIN = 1.0
PREFIX = "/hoarddb/"


def parse_cluster_url(url: str) -> list[str]:
    """``etcd://h1:2379,h2:2379`` as the endpoint list ``["h1:2379", "h2:2379"]``."""
    parts = urlsplit(url)
    if parts.scheme != "etcd" or not parts.netloc:
        raise BadValueError(f"--cluster takes etcd://host:port[,host:port...] (the etcd members), got {url!r}")
    endpoints = [e.strip() for e in parts.netloc.split(",") if e.strip()]
    for e in endpoints:
        host, _, port = e.rpartition(":")
        if not host or not port.isdigit():
            raise BadValueError(f"--cluster: {e!r} is not host:port; write etcd://127.0.0.1:2379[,host:port...]")
    return endpoints


def _json(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


class EtcdUnavailable(ClusterUnavailableError):
    """EtcdUnavailable is raised when etcd cannot be reached (no member answers)."""


class Coordinator:
    """Coordinator is one node's view of the cluster in etcd: its membership, the catalog, the map, its partitions.

    :param endpoints: etcd members, ``host:port`` each (tried in turn by the client).
    :param node_id: this node's name, unique in the cluster.
    :param advertise: ``host:port`` where other nodes and clients reach this node.
    """

    def __init__(self, endpoints: Sequence[str], node_id: str, advertise: str, *, ttl: int = DEFAULT_TTL,
                 prefix: str = PREFIX):
        self.endpoints = list(endpoints)
        self.node_id = node_id
        self.advertise = advertise
        self.ttl = ttl
        self.prefix = prefix
        self.client: etcd3aio.Etcd3Client | None = None
        self.lease_id: int | None = None
        #: monotonic time at which the last keepalive that etcd answered was sent
        self.last_keepalive = 0.0
        #: epochs of the partitions this node holds: {(db, bucket, p): epoch}
        self.held: dict[tuple[str, str, int], int] = {}
        self._keepalive: asyncio.Task | None = None
        #: milliseconds of the last etcd round trip (the keepalive's), for metrics
        self.round_trip_ms = 0.0
        #: the etcd cluster's id, as the last snapshot's answer gave it (0 before one)
        self.etcd_cluster_id = 0
        #: True from the moment etcd says this node's lease ran out until the node is registered again under
        #: a new one (:meth:`_renew`); meanwhile it claims nothing and its lease is not fresh
        self.lapsed = False
        #: how many times this node's lease ran out while it ran (``hoarddb_cluster_lease_lapses_total``)
        self.lapses = 0
        #: called (as a task) once the node is registered again after a lapse: takes back its partitions
        self.rejoined: Callable[[], Awaitable[None]] | None = None
        #: the ``nodes/<node>`` record (its ``lease`` replaced at each registration)
        self._record: dict = {}
        #: this node's ``state/<node>`` as last put (written again under a new lease)
        self._state: dict | None = None
        #: set to wake the keepalive task at once (a claim met the lease gone)
        self._wake = asyncio.Event()
        self._rejoining: asyncio.Task | None = None
        #: the last reason a registration again was refused, said once
        self._renew_refused: str | None = None

    def key(self, *parts) -> str:
        return self.prefix + "/".join(str(p) for p in parts)

    # -- life cycle

    async def start(self, info: dict | None = None) -> None:
        """Connect, take a lease, and join: write ``nodes/<node>`` (refused if that node is live).

        ``info`` is added to the node's record (how other nodes connect to it: tls, fingerprint, auth)."""
        await self.connect()
        try:
            sent = time.monotonic()
            lease = await self.client.lease.grant(ttl=self.ttl, timeout=5)
        except Exception as exc:
            await self.client.close()
            raise EtcdUnavailable(f"cannot reach etcd at {', '.join(self.endpoints)}: {_why(exc)}") from None
        self.lease_id, self.last_keepalive = lease.ID, sent
        self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive())
        # (``lease``: a move's hand-over puts the new owner's key under it)
        self._record = {**(info or {}), "advertise": self.advertise, "started": time.time()}
        deadline = time.monotonic() + self.ttl + 2
        while True:
            other = await self._register()
            if other is None:
                break
            if other.get("advertise") == self.advertise and time.monotonic() < deadline:
                # this node, killed and started again before its old lease ran out: wait for it
                await asyncio.sleep(0.2)
                continue
            await self.stop()
            raise BadValueError(f"node id {self.node_id!r} is already in the cluster (live, at "
                                f"{other.get('advertise')}); give this node another --node-id, or stop that one "
                                f"(its membership ends {self.ttl} s after it stops)")

    async def _register(self) -> dict | None:
        """Write ``nodes/<node>`` under the current lease unless the key exists; None when written, else the
        record found there."""
        kv = self.client.kv
        me = self.key("nodes", self.node_id)
        answer = await self._txn([kv.txn_compare_create_revision(me, 0)],
                                 [kv.txn_op_put(me, _json({**self._record, "lease": self.lease_id}),
                                                lease=self.lease_id)], [kv.txn_op_get(me)])
        if answer.succeeded:
            return None
        return json.loads(answer.responses[0].response_range.kvs[0].value)

    async def connect(self) -> None:
        """Connect to etcd without joining (``hoarddb cluster status`` reads this way)."""
        self.client = etcd3aio.Etcd3Client(self.endpoints, rpc_max_attempts=2,
                                             watch_max_reconnect_backoff_seconds=1.0)
        await self.client.connect()

    async def close(self) -> None:
        """Close a connection opened by :meth:`connect`."""
        if self.client is not None:
            await self.client.close()
            self.client = None

    async def stop(self) -> None:
        """Leave: stop the keepalive and revoke the lease (membership and owner keys go at once)."""
        await cancel_and_wait(self._keepalive)
        if self._rejoining is not None and not self._rejoining.done():
            await cancel_and_wait(self._rejoining)
        self.held.clear()
        if self.client is not None:
            if self.lease_id is not None and not self.lapsed:
                try:
                    await self.client.lease.revoke(self.lease_id, timeout=2, max_attempts=1)
                except Exception as exc:  # etcd gone: the lease runs out by itself
                    log.info("could not revoke the lease (%s); it runs out in %d s", _why(exc), self.ttl)
            await self.client.close()
            self.client = None

    async def _keep_alive(self) -> None:
        """Renew the lease every TTL/4 seconds; note when each renewal etcd answered was sent. When etcd says
        the lease ran out, give up what the node held and take a new lease at once (:meth:`_renew`)."""
        interval = max(0.25, self.ttl / 4)
        while True:
            sent = time.monotonic()
            self._wake.clear()
            try:
                if self.lapsed:
                    await self._renew()
                else:
                    lease_id = self.lease_id
                    stream = self.client.lease.keep_alive(lease_id)
                    try:
                        async with asyncio.timeout(interval * 2):
                            async for answer in stream:
                                if answer.TTL <= 0:
                                    self._lapse(lease_id)
                                else:
                                    self.last_keepalive = sent
                                    self.round_trip_ms = (time.monotonic() - sent) * 1000
                                break
                    finally:
                        stream.cancel()
                    if self.lapsed:
                        continue  # a new lease at once
            except asyncio.CancelledError:
                raise
            except HoardError as e:
                if e.message != self._renew_refused:
                    log.error("lease: %s; trying again every %.1f s", e.message, interval)
                    self._renew_refused = e.message
            except Exception as exc:
                if self.lapsed:
                    log.warning("lease: cannot take a new lease yet (%s); trying again in %.1f s", _why(exc), interval)
                else:
                    log.warning("lease keepalive failed (%s); partitions are served until %.1f s after the last "
                                "renewal", _why(exc), self.ttl - LEASE_MARGIN)
            try:
                async with asyncio.timeout(max(0.0, interval - (time.monotonic() - sent))):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _lapse(self, lease_id: int | None) -> None:
        """etcd says lease ``lease_id`` ran out (its keys are gone with it): give up every partition now, and
        let the keepalive task take a new lease. Nothing if this node holds another lease already."""
        if lease_id != self.lease_id or self.lapsed:
            return
        self.lapsed = True
        self.lapses += 1
        self.last_keepalive = 0.0
        given_up = len(self.held)
        self.held.clear()
        self._renew_refused = None
        log.error("lease: etcd says this node's lease ran out (paused, or cut from etcd, for longer than its %d s "
                  "TTL): its membership and owner keys are gone; %d partition(s) given up; taking a new lease",
                  self.ttl, given_up)
        self._wake.set()

    async def _renew(self) -> None:
        """After a lapse: take a new lease, write ``nodes/<node>`` and ``state/<node>`` again under it, and
        start taking the node's partitions back (:attr:`rejoined`). Raises when etcd fails or refuses; the
        keepalive task tries again."""
        sent = time.monotonic()
        lease = await self.client.lease.grant(ttl=self.ttl, timeout=5)
        old, self.lease_id = self.lease_id, lease.ID
        self.last_keepalive = sent
        log.info("lease: etcd granted a new lease (%x, in place of %x)", lease.ID, old or 0)
        try:
            other = await self._register()
            if other is not None and other.get("started") == self._record["started"] and other.get("lease"):
                # this process's own record, from a try that failed after writing it: its lease goes first
                await self.client.lease.revoke(other["lease"], timeout=5)
                other = await self._register()
            if other is not None:
                raise BadValueError(f"cannot join the cluster again: node id {self.node_id!r} was taken meanwhile "
                                    f"by another process (at {other.get('advertise')}); this node refuses its "
                                    "partitions until that one stops")
            log.info("lease: this node is in the cluster again (nodes/%s written under the new lease)", self.node_id)
            written = self._state
            if written is not None:
                await self._call(self.client.kv.put(self.key("state", self.node_id), _json(written),
                                                    lease=self.lease_id, timeout=5))
                log.info("lease: state/%s written again (%s)", self.node_id, written.get("state"))
        except BaseException:
            await self._revoke_quietly(lease.ID)  # (its keys with it; the next try starts again)
            raise
        self.lapsed = False
        self._renew_refused = None
        if self._state != written:  # put meanwhile (only recorded, while lapsed)
            try:
                await self.put_state(self._state)
            except HoardError as e:
                log.warning("lease: cannot write state/%s again: %s", self.node_id, e.message)
        if self.rejoined is not None:
            if self._rejoining is not None and not self._rejoining.done():
                self._rejoining.cancel()  # (a take-back of an earlier lapse, still under way)
            self._rejoining = asyncio.get_running_loop().create_task(self.rejoined())

    async def _revoke_quietly(self, lease_id: int) -> None:
        try:
            await self.client.lease.revoke(lease_id, timeout=2, max_attempts=1)
        except Exception:
            pass  # it runs out by itself

    def lease_fresh(self) -> bool:
        """Whether this node's lease surely still lives: its last answered keepalive was sent
        less than TTL - margin seconds ago. Judged on this node's clock alone."""
        return self.lease_id is not None and not self.lapsed and \
            time.monotonic() < self.last_keepalive + self.ttl - LEASE_MARGIN

    # -- membership

    async def nodes(self) -> dict[str, dict]:
        """The live nodes: ``{node_id: {advertise, started}}``."""
        prefix = self.key("nodes", "")
        return {kv.key.decode()[len(prefix):]: json.loads(kv.value) for kv in await self._range(prefix)}

    async def members(self) -> set[str] | None:
        """The cluster's members (``members/<node>``: the nodes given a share of every bucket, up or not), or
        None when none is recorded (a cluster made before members were: hoarddb/cluster/members.py)."""
        prefix = self.key("members", "")
        found = {kv.key.decode()[len(prefix):] for kv in await self._range(prefix)}
        return found or None

    # -- catalog

    async def create_bucket(self, db: str, bucket: str, declaration: dict, owners: list[str]) -> bool:
        """Record a bucket and its assignment in one transaction; False if it exists already."""
        kv = self.client.kv
        name = self.key("catalog", "buckets", db, bucket)
        answer = await self._txn([kv.txn_compare_create_revision(name, 0)],
                                 [kv.txn_op_put(self.key("catalog", "databases", db), _json({})),
                                  kv.txn_op_put(name, _json(declaration)),
                                  kv.txn_op_put(self.key("assign", db, bucket), _json({"owners": owners, "version": 1}))])
        return answer.succeeded

    async def drop_bucket(self, db: str, bucket: str) -> None:
        """Remove a bucket's declaration, assignment, epochs and owner keys in one transaction."""
        kv = self.client.kv
        ops = [kv.txn_op_delete(self.key("catalog", "buckets", db, bucket)),
               kv.txn_op_delete(self.key("assign", db, bucket))]
        for what in ("epoch", "owner"):
            start = self.key(what, db, bucket, "")
            ops.append(kv.txn_op_delete(start, range_end=etcd3aio.prefix_range_end(start.encode())))
        await self._txn([], ops)
        for held in [h for h in self.held if h[:2] == (db, bucket)]:
            del self.held[held]

    async def drop_database(self, db: str) -> None:
        """Remove a database and all of its buckets' keys (declarations, assignments, epochs, owners) in one
        transaction."""
        kv = self.client.kv
        ops = [kv.txn_op_delete(self.key("catalog", "databases", db))]
        for parts in (("catalog", "buckets", db), ("assign", db), ("epoch", db), ("owner", db)):
            start = self.key(*parts, "")
            ops.append(kv.txn_op_delete(start, range_end=etcd3aio.prefix_range_end(start.encode())))
        await self._txn([], ops)
        for held in [h for h in self.held if h[0] == db]:
            del self.held[held]

    async def create_database(self, db: str) -> None:
        """Record a database (if it is not yet)."""
        kv = self.client.kv
        name = self.key("catalog", "databases", db)
        await self._txn([kv.txn_compare_create_revision(name, 0)], [kv.txn_op_put(name, _json({}))])

    async def alter_bucket(self, entry: Change, declaration: dict) -> bool:
        """Replace a bucket's declaration if it is still ``entry`` (as :meth:`bucket_entry` read it: the same
        bucket, the same value); False if it changed or went meanwhile. The key keeps its create revision."""
        kv = self.client.kv
        db, _, bucket = entry.name.partition("/")
        name = self.key("catalog", "buckets", db, bucket)
        answer = await self._txn([kv.txn_compare_create_revision(name, entry.created),
                                  kv.txn_compare_value(name, _json(entry.value))],
                                 [kv.txn_op_put(name, _json(declaration))])
        return answer.succeeded

    async def bucket_entry(self, db: str, bucket: str) -> Change | None:
        """One bucket's declaration as a Change, or None (its create revision tells a bucket from a later one of
        the same name)."""
        found = await self._range(self.key("catalog", "buckets", db, bucket), exact=True)
        if not found:
            return None
        kv = found[0]
        return Change(PUT, f"{db}/{bucket}", json.loads(kv.value), kv.create_revision, kv.mod_revision)

    async def buckets(self) -> dict[tuple[str, str], dict]:
        """Every bucket of the cluster: ``{(db, bucket): declaration}``."""
        prefix = self.key("catalog", "buckets", "")
        out = {}
        for kv in await self._range(prefix):
            db, _, bucket = kv.key.decode()[len(prefix):].partition("/")
            out[(db, bucket)] = json.loads(kv.value)
        return out

    async def bucket(self, db: str, bucket: str) -> dict | None:
        """One bucket's declaration, or None."""
        return await self._get(self.key("catalog", "buckets", db, bucket))

    async def assignment(self, db: str, bucket: str) -> dict | None:
        """A bucket's assignment ``{owners, version}``, or None."""
        return await self._get(self.key("assign", db, bucket))

    # -- a node's own join or drain (hoarddb/cluster/membership.py): shown by ``hoarddb cluster status``

    async def put_state(self, state: dict | None) -> None:
        """This node's join or drain under way (``state/<node>``, under its lease: gone when it stops), or none."""
        key = self.key("state", self.node_id)
        self._state = state
        if self.lapsed:
            return  # written under the new lease once the node has one (_renew)
        if state is None:
            await self._call(self.client.kv.delete(key, timeout=5))
        else:
            await self._call(self.client.kv.put(key, _json(state), lease=self.lease_id, timeout=5))

    async def states(self) -> dict[str, dict]:
        """The joins and drains under way: ``{node: {state, ...}}``."""
        prefix = self.key("state", "")
        return {kv.key.decode()[len(prefix):]: json.loads(kv.value) for kv in await self._range(prefix)}

    # -- users (records as hoarddb.server.users.to_portable makes them: JSON, bytes in base64)

    async def put_user(self, record: dict) -> None:
        await self._put(self.key("users", record["name"]), _json(record))

    async def create_user(self, record: dict) -> bool:
        """Record a user unless one of that name is there; False if it was."""
        kv = self.client.kv
        name = self.key("users", record["name"])
        answer = await self._txn([kv.txn_compare_create_revision(name, 0)], [kv.txn_op_put(name, _json(record))])
        return answer.succeeded

    async def user(self, name: str) -> dict | None:
        return await self._get(self.key("users", name))

    async def drop_user(self, name: str) -> None:
        await self._call(self.client.kv.delete(self.key("users", name), timeout=5))

    async def users(self) -> list[dict]:
        return [json.loads(kv.value) for kv in await self._range(self.key("users", ""))]

    # -- watching a prefix: a snapshot at a revision, then every change after it

    async def snapshot(self, *parts) -> tuple[list[Change], int]:
        """Every key under ``prefix/parts.../`` now, as PUT changes, and the revision they were read at."""
        start = self.key(*parts, "")
        if self.client is None:
            raise EtcdUnavailable("this node is not connected to etcd")
        answer = await self._call(self.client.kv.get(start, range_end=etcd3aio.prefix_range_end(start.encode()),
                                                     timeout=5))
        changes = [Change(PUT, kv.key.decode()[len(start):], json.loads(kv.value), kv.create_revision,
                          kv.mod_revision) for kv in answer.kvs]
        self.etcd_cluster_id = answer.header.cluster_id
        return changes, answer.header.revision

    async def watch(self, after: int, *parts):
        """The changes under ``prefix/parts.../`` made after revision ``after``, as they come.

        The client resumes the watch from the next revision when an etcd member dies or the
        connection drops (backing off up to 5 s between tries). Raises WatchCompacted when
        etcd no longer has the history from ``after`` on: the caller starts again from a snapshot.
        """
        start = self.key(*parts, "")
        stream = self.client.watch.watch(start, range_end=etcd3aio.prefix_range_end(start.encode()),
                                         start_revision=after + 1)
        async for answer in stream:
            if answer.compact_revision > 0:
                raise WatchCompacted(f"etcd compacted its history past revision {after}")
            for event in answer.events:
                kind = DELETE if event.type == 1 else PUT
                value = json.loads(event.kv.value) if kind == PUT and event.kv.value else None
                yield Change(kind, event.kv.key.decode()[len(start):], value, event.kv.create_revision,
                             event.kv.mod_revision)

    # -- ownership

    async def owner(self, db: str, bucket: str, p: int) -> dict | None:
        """The live owner of a partition ``{node, epoch}``, or None when none holds it."""
        return await self._get(self.key("owner", db, bucket, p))

    async def owners(self, db: str, bucket: str) -> dict[int, dict]:
        """The live owners of a bucket's partitions: ``{partition: {node, epoch}}`` (a partition without one is left out)."""
        prefix = self.key("owner", db, bucket, "")
        return {int(kv.key.decode()[len(prefix):]): json.loads(kv.value) for kv in await self._range(prefix)}

    async def claim(self, db: str, bucket: str, p: int, *, assigned: bool = False) -> int:
        """Take partition ``p`` of a bucket for this node; its new epoch.

        One transaction: no owner key, and the epoch as read (and, when ``assigned``, the
        bucket's assignment as read, naming this node for ``p``); then epoch + 1 and the owner
        key with this node's lease. Raises OwnedElsewhere when another node holds it,
        NotAssigned when ``assigned`` and the map names another node; already ours, the epoch
        we hold. Refused (PARTITION_UNAVAILABLE) while this node's lease has run out and it has
        no new one yet.
        """
        if (db, bucket, p) in self.held and self.lease_fresh():
            return self.held[(db, bucket, p)]
        kv = self.client.kv
        owner_key, epoch_key = self.key("owner", db, bucket, p), self.key("epoch", db, bucket, p)
        assign_key = self.key("assign", db, bucket)
        for _ in range(5):
            self._refuse_if_lapsed(db, bucket, p)
            current = await self._get(owner_key)
            self._refuse_if_lapsed(db, bucket, p)  # (the lease may have lapsed while etcd answered)
            if current is not None:
                if current["node"] == self.node_id:  # ours (an earlier claim of this run)
                    self.held[(db, bucket, p)] = current["epoch"]
                    return current["epoch"]
                raise OwnedElsewhere(current["node"], current["epoch"])
            compare = [kv.txn_compare_create_revision(owner_key, 0)]
            if assigned:
                found = await self._range(assign_key, exact=True)
                owners = json.loads(found[0].value)["owners"] if found else []
                if p >= len(owners) or owners[p] != self.node_id:
                    raise NotAssigned(owners[p] if p < len(owners) else None)
                compare.append(kv.txn_compare_value(assign_key, found[0].value))
            epoch_kv = await self._range(epoch_key, exact=True)
            epoch = int(epoch_kv[0].value) if epoch_kv else 0
            compare.append(kv.txn_compare_value(epoch_key, str(epoch)) if epoch_kv
                           else kv.txn_compare_create_revision(epoch_key, 0))
            new = epoch + 1
            lease_id = self.lease_id
            self._refuse_if_lapsed(db, bucket, p)
            try:
                answer = await self._txn(compare, [kv.txn_op_put(epoch_key, str(new)),
                                                   kv.txn_op_put(owner_key, _json({"node": self.node_id, "epoch": new}),
                                                                 lease=lease_id)])
            except EtcdUnavailable as e:
                if "lease not found" not in e.message:
                    raise
                self._lapse(lease_id)  # etcd let the lease run out before the keepalive task heard it
                self._refuse_if_lapsed(db, bucket, p)
                continue
            if answer.succeeded:
                if lease_id != self.lease_id or self.lapsed:
                    continue  # put under a lease that ran out meanwhile: gone with it
                self.held[(db, bucket, p)] = new
                return new
        raise HoardError(f"partition {p} of {db}.{bucket}: could not take it (others kept changing it)")

    def _refuse_if_lapsed(self, db: str, bucket: str, p: int) -> None:
        if self.lapsed:
            raise PartitionUnavailableError(
                f"partition {p} of {db}.{bucket}: node {self.node_id}'s lease with etcd ran out (it was paused or "
                "cut from etcd); it is joining the cluster again and takes its partitions back in a moment; try "
                "again", node=self.node_id)

    async def release(self, db: str, bucket: str, p: int) -> None:
        """Give up a partition this node holds (its owner key goes; the epoch stays)."""
        epoch = self.held.pop((db, bucket, p), None)
        if epoch is None:
            return
        kv = self.client.kv
        owner_key = self.key("owner", db, bucket, p)
        await self._txn([kv.txn_compare_value(owner_key, _json({"node": self.node_id, "epoch": epoch}))],
                        [kv.txn_op_delete(owner_key)])

    def holds(self, db: str, bucket: str, p: int) -> int | None:
        """The epoch at which this node holds a partition, if it holds it and its lease is fresh."""
        epoch = self.held.get((db, bucket, p))
        return epoch if epoch is not None and self.lease_fresh() else None

    # -- moves (hoarddb/cluster/moves.py): the plan, a move's progress, the hand-over, what is left to delete

    async def assignments(self) -> dict[tuple[str, str], dict]:
        """Every bucket's assignment: ``{(db, bucket): {owners, version}}`` (one range)."""
        prefix = self.key("assign", "")
        out = {}
        for kv in await self._range(prefix):
            db, _, bucket = kv.key.decode()[len(prefix):].partition("/")
            out[(db, bucket)] = json.loads(kv.value)
        return out

    async def moves(self) -> dict[tuple[str, str, int], dict]:
        """The moves planned and under way: ``{(db, bucket, p): {from, to, state, ...}}``."""
        prefix = self.key("moves", "")
        out = {}
        for kv in await self._range(prefix):
            db, bucket, p = kv.key.decode()[len(prefix):].rsplit("/", 2)
            out[(db, bucket, int(p))] = json.loads(kv.value)
        return out

    async def plan_moves(self, planned: dict[tuple[str, str, int], dict], drained: dict[str, bool],
                         members: dict[str, bool] | None = None) -> bool:
        """Record moves (none of them recorded yet), the drained marks and the members' records (True: put,
        False: deleted), in one transaction; False if a move of one of these partitions was recorded meanwhile."""
        kv = self.client.kv
        compare = [kv.txn_compare_create_revision(self.key("moves", *k), 0) for k in planned]
        ops = [kv.txn_op_put(self.key("moves", *k), _json(v)) for k, v in planned.items()]
        for node, on in drained.items():
            ops.append(kv.txn_op_put(self.key("drained", node), _json({"since": time.time()})) if on
                       else kv.txn_op_delete(self.key("drained", node)))
        for node, on in (members or {}).items():
            ops.append(kv.txn_op_put(self.key("members", node), _json({"since": time.time()})) if on
                       else kv.txn_op_delete(self.key("members", node)))
        return (await self._txn(compare, ops)).succeeded

    async def drained(self) -> set[str]:
        """The nodes taken out of the maps by ``cluster remove-node`` (given no partition until added again)."""
        prefix = self.key("drained", "")
        return {kv.key.decode()[len(prefix):] for kv in await self._range(prefix)}

    async def note_move(self, db: str, bucket: str, p: int, record: dict) -> None:
        """A move's progress (only while the move is still recorded: a finished one is not brought back)."""
        kv = self.client.kv
        key = self.key("moves", db, bucket, p)
        await self._txn([kv.txn_compare_version(key, 0, result=etcd3aio.kv.Compare.GREATER)],
                        [kv.txn_op_put(key, _json(record))])

    async def hand_over(self, db: str, bucket: str, parts: dict[int, int], to: str) -> tuple[list[str], int] | None:
        """Give partitions this node holds (``{p: epoch}``) to node ``to``, in one transaction; the new
        assignment and its version, or None when something changed (``to`` gone, the map or an owner key).

        Compares: each ``owner/<p>`` is this node's at its epoch, ``to`` is live (its record, which
        names its lease, as read), ``assign/`` at the version read. Then each partition's epoch is
        raised, its owner key names ``to`` under ``to``'s lease, the assignment names ``to``, the
        moves are deleted, and ``cleanup/<this node>/<db>/<bucket>`` lists the partitions whose
        documents this node must now delete."""
        kv = self.client.kv
        node_key, assign_key = self.key("nodes", to), self.key("assign", db, bucket)
        found = await self._range(node_key, exact=True)
        assigned = await self._range(assign_key, exact=True)
        if not found or not assigned:
            return None
        record, assignment = json.loads(found[0].value), json.loads(assigned[0].value)
        if record.get("lease") is None:
            return None
        owners = list(assignment["owners"])
        compare = [kv.txn_compare_value(node_key, found[0].value), kv.txn_compare_value(assign_key, assigned[0].value)]
        ops = []
        for p, epoch in sorted(parts.items()):
            owner_key = self.key("owner", db, bucket, p)
            compare.append(kv.txn_compare_value(owner_key, _json({"node": self.node_id, "epoch": epoch})))
            ops += [kv.txn_op_put(self.key("epoch", db, bucket, p), str(epoch + 1)),
                    kv.txn_op_put(owner_key, _json({"node": to, "epoch": epoch + 1}), lease=record["lease"]),
                    kv.txn_op_delete(self.key("moves", db, bucket, p))]
            owners[p] = to
        version = assignment.get("version", 1) + 1
        cleanup_key = self.key("cleanup", self.node_id, db, bucket)
        left = await self._get(cleanup_key) or []
        ops += [kv.txn_op_put(assign_key, _json({"owners": owners, "version": version})),
                kv.txn_op_put(cleanup_key, _json(sorted(set(left) | set(parts))))]
        if not (await self._txn(compare, ops)).succeeded:
            return None
        for p in parts:
            self.held.pop((db, bucket, p), None)
        return owners, version

    async def cleanups(self) -> dict[tuple[str, str], list[int]]:
        """The partitions whose documents this node still has to delete, having handed them over."""
        prefix = self.key("cleanup", self.node_id, "")
        out = {}
        for kv in await self._range(prefix):
            db, _, bucket = kv.key.decode()[len(prefix):].partition("/")
            out[(db, bucket)] = json.loads(kv.value)
        return out

    async def cleaned(self, db: str, bucket: str, parts: list[int]) -> None:
        """Partitions whose documents this node deleted: out of its ``cleanup/`` key."""
        key = self.key("cleanup", self.node_id, db, bucket)
        left = sorted(set(await self._get(key) or []) - set(parts))
        if left:
            await self._put(key, _json(left))
        else:
            await self._call(self.client.kv.delete(key, timeout=5))

    # -- etcd calls, with etcd's failures said as ours

    async def _call(self, awaitable):
        if self.client is None:
            raise EtcdUnavailable("this node is not connected to etcd")
        try:
            return await awaitable
        except HoardError:
            raise
        except Exception as exc:
            raise EtcdUnavailable(f"etcd did not answer ({', '.join(self.endpoints)}): {_why(exc)}") from None

    async def _txn(self, compare, success, failure=()):
        return await self._call(self.client.kv.txn(compare, success, failure, timeout=5))

    async def _put(self, key: str, value: bytes) -> None:
        await self._call(self.client.kv.put(key, value, timeout=5))

    async def _get(self, key: str):
        found = await self._range(key, exact=True)
        return json.loads(found[0].value) if found else None

    async def _range(self, key: str, exact: bool = False):
        if self.client is None:
            raise EtcdUnavailable("this node is not connected to etcd")
        end = None if exact else etcd3aio.prefix_range_end(key.encode())
        answer = await self._call(self.client.kv.get(key, range_end=end, timeout=5))
        return list(answer.kvs)


#: A change's kind: a key written, or a key removed.
PUT = "written"
DELETE = "removed"


class Change(NamedTuple):
    """Change is one key under a watched prefix: its kind, its name after the prefix, its
    value (None for a delete), the revision that created it and the one that changed it."""

    kind: str
    name: str
    value: Any
    created: int
    revision: int


class WatchCompacted(HoardError):
    """WatchCompacted is raised by :meth:`Coordinator.watch` when etcd no longer holds the changes asked for."""


class OwnedElsewhere(HoardError):
    """OwnedElsewhere is raised by :meth:`Coordinator.claim` when another node holds the partition."""

    def __init__(self, node: str, epoch: int):
        super().__init__(f"the partition is held by node {node} (epoch {epoch})")
        self.node, self.epoch = node, epoch


class NotAssigned(HoardError):
    """NotAssigned is raised by :meth:`Coordinator.claim` (``assigned``) when the map gives the partition to another node."""

    def __init__(self, node: str | None):
        super().__init__(f"the partition is assigned to node {node}")
        self.node = node


def _why(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    if callable(details):
        try:
            return str(details())
        except Exception:
            pass
    return f"{type(exc).__name__}: {exc}"
