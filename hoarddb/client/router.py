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
    everything else        (batches, finds and other reads over many documents, cursors'
                           more, the catalog) goes to the URL's connection, as before

:meth:`Router.target` says where a request goes: None (the URL's connection: the server is
not a cluster, routing is off, the request is not keyed, its bucket or its owner's address
is unknown) or ``(node id, address)``. The partition is computed as the nodes compute it
(:func:`hoarddb.routing.request_partition`). A map is read once per database and read again
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
from typing import Any

from .. import operations
from ..routing import request_partition
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


class Router:
    """Router is one client's copy of a cluster's map, by database, and the node each keyed request goes to.

    :param options: the client's connection options; ``route == "any"`` turns routing off.
    """

    def __init__(self, options: ConnectOptions):
        self.options = options
        #: Whether keyed requests go to their owners: the URL's server is a cluster node (its hello said
        #: so: :meth:`connected`) and ``route`` is "owner".
        self.on = False
        #: The maps read, by database: ``{"read": monotonic time, "buckets": {...}, "nodes": {...}}``.
        self.maps: dict[str, dict] = {}
        #: The node the URL's connection reached, as its hello said (its requests need no other connection).
        self.home: str | None = None
        #: When a connection to a node last could not be opened, by node id: its requests go to the URL's
        #: node for MAP_AGE seconds after (an address this client cannot reach costs one attempt, not one a call).
        self.unreachable: dict[str, float] = {}

    def connected(self, server_info: Mapping) -> None:
        """The URL's connection was (re)opened and its server said hello: a cluster node names itself
        (``node``), and only then are requests routed; a single server is left alone."""
        self.home = server_info.get("node")
        self.on = self.options.route == "owner" and isinstance(self.home, str)

    def keyed(self, request: Mapping) -> bool:
        """Whether ``request`` may go to its owner (a keyed verb on a bucket, or a store field's verb; not
        a node's own request, which names it in ``_node``)."""
        return self.on and (request.get("op") in ROUTED or "field" in request) \
            and type(request.get("db")) is str and type(request.get("bucket")) is str and "_node" not in request

    def wants_map(self, request: Mapping) -> str | None:
        """The database whose map must be read before ``request`` is sent, or None (it is fresh, or not needed)."""
        if not self.keyed(request):
            return None
        db = request["db"]
        found = self.maps.get(db)
        if found is None or time.monotonic() - found["read"] > (DOWN_AGE if found["down"] else MAP_AGE):
            return db
        return None

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
        self.maps[db] = {"read": time.monotonic(), "buckets": buckets, "nodes": nodes, "down": down}

    def unreadable(self, db: str) -> None:
        """The map of ``db`` could not be read (a server that does not know the operation): its requests go
        as before, until the map is asked again (after MAP_AGE). (Any other refusal of the map is the
        request's: no role on the database, a revoked login; it is raised to the caller.)"""
        self.maps[db] = {"read": time.monotonic(), "buckets": {}, "nodes": {}, "down": False}

    def forget(self, db: str | None = None) -> None:
        """Read the map again before the next keyed request (of ``db``, or of every database)."""
        if db is None:
            self.maps.clear()
        else:
            self.maps.pop(db, None)

    def target(self, request: Mapping) -> tuple[str, str] | None:
        """``(node id, address)`` of the owner of ``request``'s partition when it is not the URL's node,
        else None (send it on the URL's connection). May give an insert without ``_id_`` its key."""
        if not self.keyed(request):
            return None
        found = self.maps.get(request["db"])
        if found is None:
            return None
        place = found["buckets"].get(request["bucket"])
        if place is None:
            return None
        p = request_partition(place, request)
        owners = place.get("owners") or []
        if p is None or p >= len(owners) or owners[p] == self.home:
            return None
        node = found["nodes"].get(owners[p])
        if not node or not node.get("address"):
            return None  # down (not among the live nodes): the URL's node answers PARTITION_UNAVAILABLE
        failed = self.unreachable.get(owners[p])
        if failed is not None and time.monotonic() - failed < MAP_AGE:
            return None
        return owners[p], node["address"]

    def cannot_reach(self, node: str, db: str) -> None:
        """A connection to ``node`` could not be opened: its requests go to the URL's node for a while, and
        the map of ``db`` is read again."""
        self.unreachable[node] = time.monotonic()
        self.forget(db)

    def options_for(self, node: str, address: str, db: str) -> ConnectOptions:
        """The connection options of ``node`` at ``address``: the URL's, with its host and port (and, when
        the URL pins a certificate, the node's own certificate as the map gives it)."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        pin = self.options.tls_fingerprint
        if pin:
            pin = ((self.maps.get(db) or {}).get("nodes", {}).get(node) or {}).get("fingerprint") or pin
        return replace(self.options, host=host, port=int(port), others=(), tls_fingerprint=pin)
