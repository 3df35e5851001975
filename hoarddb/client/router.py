"""Which node a keyed request goes to, without I/O: a client's copy of a cluster's map, under both clients.

Against a cluster, a request for one partition sent to a node that does not own it is
forwarded there by that node: correct, but the entry node pays about as much for entering
and forwarding it as the owner does for running it (docs/benchmarks.md, "A cluster on one
machine"). So both clients, as Redis Cluster's and Cassandra's token-aware drivers do,
read the map (the ``cluster_map`` operation, any node answers it) and send each keyed
request to its partition's owner over a connection of its own (same user, password and
TLS as the URL's):

    keyed requests         get, exists, info, stream by key; insert, put by the document's
                           _id_ (an insert without one gets a UUIDv7 made here, as a node
                           would make it); update, delete, find_and_modify, count by
                           {_id_: k}; a partitioned queue's push by its group; a store
                           field's verbs by their document's key
    turns                  a partitioned fifo's or lifo's pop, claim and peek: to its owners
                           in turn (this client's turns, each pop or claim one further),
                           naming the owner in ``_turn``: it takes from its own partitions
                           first, and asks the others only for what they lack; a whole
                           queue's (one owner): to that owner
    everything else        (batches, finds and other reads over many documents, cursors'
                           more, the catalog) goes to the URL's connection, as before

:meth:`Router.route` says where a request goes: None (the URL's connection: the server is
not a cluster, routing is off, the request is not keyed, its bucket or its owner's address
is unknown), :data:`READ_MAP` (read the database's map first), or the owner's :class:`Owner`.
The partition is computed as the nodes compute it (:class:`hoarddb.routing.Partitioner`, kept
per bucket of the map, with each owner's connection options, so that a request costs the
reading of its key and one hash; none when every partition goes to the same place). A map
is read once per database and read again
when it is older than :data:`MAP_AGE` seconds (:data:`DOWN_AGE` when it names an owner that is
down), when an owner's connection fails, and when a
node refuses a request with PARTITION_UNAVAILABLE ``moved`` (:meth:`Router.forget`). A map
that is out of date costs a forward, never a wrong answer: a node forwards what it does
not own. ``?route=any`` in the URL (``route="any"``) turns all of this off.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from .. import operations
from ..errors import HoardError, HoardTimeoutError, PartitionUnavailableError
from ..routing import TURN_FIELD, TURNS, Partitioner
from .core import UPLOADS, retryable
from .options import ConnectOptions

#: Seconds a database's map is trusted before the next keyed request reads it again.
MAP_AGE = 5.0
#: The same, for a map that names as an owner a node that is not among the live ones (down, or restarting).
DOWN_AGE = 1.0
#: The operations a request may be routed by owner for: those the table says act on one document (a key
#: parameter) or that add one (a partitioned queue's push), never a cursor's read.
ROUTED = frozenset(name for name, op in operations.VERBS.items()
                   if not op.cursor and (op.key_param or (op.write and not op.gather
                                                          and getattr(op.param("doc"), "kind", None) == "doc")))


#: What :meth:`Router.route` answers when the request's database's map must be read (again) first.
READ_MAP = "read the map"
#: A bucket's partitions not all going to the same place (:attr:`_Bucket.only`).
_MIXED = object()


class Owner(NamedTuple):
    """Owner is where a request goes that the URL's node does not own: the owner's node id, its address,
    and the options of a connection to it."""

    node: str
    address: str
    options: ConnectOptions


class _Bucket:
    """_Bucket is one bucket of a map, read for routing: its partitioner and each partition's Owner (None: the
    URL's node, or an owner that is down or has no address)."""

    __slots__ = ("partitioner", "owners", "only", "turns", "turn")

    def __init__(self, place: Mapping, owners: Mapping[str, Owner], home: str | None = None):
        self.partitioner = Partitioner(place)
        self.owners = [owners.get(o) for o in place.get("owners") or ()]
        #: A partitioned fifo's or lifo's owners this client can send to, in the order the nodes take turns
        #: over them (node id, and its Owner or None for the URL's node); empty for any other bucket.
        #: ``turn``: where the next one starts.
        self.turns: list[tuple[str, Owner | None]] = []
        self.turn = 0
        if place.get("group") is not None and self.partitioner.partitions > 1 and place.get("type") in ("fifo", "lifo"):
            self.turns = [(o, owners.get(o)) for o in sorted(set(place.get("owners") or ()))
                          if o == home or o in owners]
        count = max(self.partitioner.partitions, 1)  # (a partition past the owners named: the URL's node)
        named = self.owners[:count]
        first = named[0] if named else None
        #: The one place every partition goes to (None, or an Owner), or _MIXED.
        self.only = first if all(t is first for t in named) and (len(named) == count or first is None) else _MIXED

    def owner(self, request: Mapping) -> Owner | None:
        only = self.only
        if only is None:
            return None
        if isinstance(only, Owner):  # one other node owns every partition: whether the request has a key is all
            return only if self.partitioner(request, hashed=False) is not None else None
        p = self.partitioner(request)
        return None if p is None or p >= len(self.owners) else self.owners[p]

    def next_turn(self, request: dict) -> Owner | None:
        """The owner whose turn a pop, claim or peek of a partitioned queue is (a peek looks where the next
        pop starts), named in the request's ``_turn``: its Owner, or None for the URL's node. A queue whose
        partitions one other node owns (a whole one, say) has no turns: the request goes to that node."""
        if len(self.turns) < 2:
            return self.only if isinstance(self.only, Owner) else None
        i = self.turn % len(self.turns)
        if operations.VERBS[request["op"]].write:
            self.turn = i + 1
        node, owner = self.turns[i]
        request[TURN_FIELD] = node
        return owner


class Router:
    """Router is one client's copy of a cluster's map, by database, and the node each keyed request goes to.

    :param options: the client's connection options; ``route == "any"`` turns routing off.
    """

    def __init__(self, options: ConnectOptions):
        self.options = options
        #: Whether keyed requests go to their owners: the URL's server is a cluster node (its hello said
        #: so: :meth:`connected`) and ``route`` is "owner".
        self.on = False
        #: The maps read, by database: ``{"read": monotonic time, "buckets": {...}, "nodes": {...}, "down": bool,
        #: "routes": {bucket: _Bucket}}``.
        self.maps: dict[str, dict] = {}
        #: The node the URL's connection reached, as its hello said (its requests need no other connection).
        self.home: str | None = None
        #: When a connection to a node last could not be opened, by node id: its requests go to the URL's
        #: node for MAP_AGE seconds after (an address this client cannot reach costs one attempt, not one a call).
        self.unreachable: dict[str, float] = {}

    def connected(self, server_info: Mapping) -> None:
        """The URL's connection was (re)opened and its server said hello: a cluster node names itself
        (``node``), and only then are requests routed; a single server is left alone."""
        home = server_info.get("node")
        if home != self.home:
            self.maps.clear()  # (each map's owners were read against the node it was connected to)
        self.home = home
        self.on = self.options.route == "owner" and isinstance(self.home, str)

    def route(self, request: Mapping, fresh: bool = True) -> Owner | str | None:
        """The :class:`Owner` of ``request``'s partition when it is not the URL's node; None (send it on the URL's
        connection: not a keyed verb on a bucket or a store field's verb, a node's own request, which names it
        in ``_node``, an unknown owner...); or READ_MAP: the map of its database must be read first (none yet,
        or it is older than MAP_AGE; with ``fresh`` False, after it was read or could not be, the map there is
        used, however old, and None said when there is none). May give an insert without ``_id_`` its key,
        and a partitioned queue's pop, claim or peek its ``_turn``."""
        if not self.on or "_node" in request:
            return None
        op = request.get("op")
        turns = op in TURNS and "field" not in request
        if op not in ROUTED and "field" not in request and not turns:
            return None
        db, bucket = request.get("db"), request.get("bucket")
        if type(db) is not str or type(bucket) is not str:
            return None
        found = self.maps.get(db)
        if found is None:
            return READ_MAP if fresh else None
        if fresh and time.monotonic() - found["read"] > (DOWN_AGE if found["down"] else MAP_AGE):
            return READ_MAP
        routed = found["routes"].get(bucket)
        if routed is None:
            return None
        owner = routed.next_turn(request) if turns else routed.owner(request)  # type: ignore[arg-type]
        if owner is None or not self.unreachable:
            return owner
        failed = self.unreachable.get(owner.node)
        if failed is not None and time.monotonic() - failed < MAP_AGE:
            return None
        return owner

    @staticmethod
    def map_request(db: str) -> dict:
        """The request that reads a database's map."""
        return {"op": operations.CLUSTER_MAP.name, "db": db}

    def learn(self, db: str, answer: Any) -> None:
        """Keep the map a node answered for ``db`` (``{cluster: false}``: routing stops for this client)."""
        if not isinstance(answer, Mapping) or not answer.get("cluster"):
            self.on = False
            self.maps.clear()
            return
        buckets, nodes = dict(answer.get("buckets") or {}), dict(answer.get("nodes") or {})
        down = any(owner not in nodes for place in buckets.values() for owner in place.get("owners") or ())
        owners = {node: Owner(node, found["address"], self._options_for(found["address"], found.get("fingerprint")))
                  for node, found in nodes.items()
                  if node != self.home and isinstance(found, Mapping) and found.get("address")}
        self.maps[db] = {"read": time.monotonic(), "buckets": buckets, "nodes": nodes, "down": down,
                         "routes": {name: _Bucket(place, owners, self.home) for name, place in buckets.items()
                                    if isinstance(place, Mapping)}}

    def unreadable(self, db: str) -> None:
        """The map of ``db`` could not be read (a server that does not know the operation): its requests go
        as before, until the map is asked again (after MAP_AGE). (Any other refusal of the map is the
        request's: no role on the database, a revoked login; it is raised to the caller.)"""
        self.maps[db] = {"read": time.monotonic(), "buckets": {}, "nodes": {}, "down": False, "routes": {}}

    def forget(self, db: str | None = None) -> None:
        """Read the map again before the next keyed request (of ``db``, or of every database)."""
        if db is None:
            self.maps.clear()
        else:
            self.maps.pop(db, None)

    def falls_back(self, request: Mapping, error: HoardError) -> bool:
        """After ``error`` from the owner's connection (lost, silent, or a refusal): whether ``request`` goes again
        on the URL's connection (True), or ``error`` is the answer. Either way a map that may be out of date is
        read again before the next keyed request. A write whose answer was lost is never sent twice, and a
        silent node is not asked again; a refusal as moved applied nothing (an upload's bytes are spent, though)."""
        if isinstance(error, PartitionUnavailableError):
            if not error.details.get("moved") or request["op"] in UPLOADS:
                return False
            self.forget(request["db"])
            return True
        self.forget(request["db"])
        return not isinstance(error, HoardTimeoutError) and retryable(request["op"])

    def cannot_reach(self, node: str, db: str) -> None:
        """A connection to ``node`` could not be opened: its requests go to the URL's node for a while, and
        the map of ``db`` is read again."""
        self.unreachable[node] = time.monotonic()
        self.forget(db)

    def _options_for(self, address: str, fingerprint: str | None) -> ConnectOptions:
        """The connection options of the node at ``address``: the URL's, with its host and port (and, when
        the URL pins a certificate, the node's own certificate as the map gives it)."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        pin = self.options.tls_fingerprint
        if pin:
            pin = fingerprint or pin
        return replace(self.options, host=host, port=int(port), others=(), tls_fingerprint=pin)
