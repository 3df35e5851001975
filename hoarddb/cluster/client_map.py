"""The cluster's map as clients see it: the ``cluster_map`` operation, answered by any node.

A client that sends each keyed request to its partition's owner (hoarddb/client/router.py)
asks any node for the map of a database's buckets (or of one bucket)::

    {cluster: true, node: "n1",
     nodes:   {n1: {address: "127.0.0.1:7070", fingerprint: "ab12..."}, n2: {...}},   live nodes only
     buckets: {User: {type: "hash", partitions: 64, hashed: "_id_", owners: ["n1", "n2", ...],
                      version: 3},
               Scores: {type: "btree", partitions: 8, hashed: "sort value", key: "Score", ...},
               Jobs: {type: "fifo", partitions: 8, hashed: "group", group: "Tenant", ...}}}

``owners[p]`` is the node the map assigns partition ``p`` (etcd's ``assign/``, read now;
the node's watched copy when etcd does not answer), ``version`` the assignment's version,
raised by every change of it. A node missing from ``nodes`` is down: the client sends its
partitions' requests to the node it is connected to, which answers PARTITION_UNAVAILABLE.
``fingerprint`` is the SHA-256 of the node's certificate, so that a client that pinned the
first node's certificate can trust the others it learns of over that connection. A single
server answers ``{cluster: false}`` (hoarddb/server/server.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BadValueError, HoardError

if TYPE_CHECKING:
    from .node import ClusterNode

#: What a partition of each kind of bucket is hashed from (docs/dev/cluster.md, "The map"; hoarddb/routing.py).
_HASHED = {"hash": "_id_", "btree": "sort value", "blob": "blob id"}


async def answer(node: "ClusterNode", doc: dict) -> dict:
    """The ``cluster_map`` answer for ``doc``'s database (and bucket, when it names one)."""
    db, bucket = doc.get("db"), doc.get("bucket")
    if not isinstance(db, str):
        raise BadValueError("cluster_map needs 'db', the database whose buckets' map to give")
    try:
        if bucket is not None:
            found = await node.coord.assignment(db, bucket)
            assignments = {bucket: found} if found is not None else {}
        else:
            assignments = {b: a for (d, b), a in (await node.coord.assignments()).items() if d == db}
    except HoardError:  # etcd does not answer: this node's watched copy
        assignments = {b: {"owners": p["owners"], "version": p.get("version", 0)}
                       for (d, b), p in node.placements.items() if d == db and bucket in (None, b)}
    buckets = {}
    for name, assignment in sorted(assignments.items()):
        try:
            place = await node._placement(db, name)
        except HoardError:
            place = node.placements.get((db, name))
        if place is None:
            continue
        entry = {"type": place["type"], "partitions": place["partitions"],
                 "hashed": "group" if place.get("group") is not None else _HASHED.get(place["type"], "_id_"),
                 "owners": list(assignment.get("owners") or place["owners"]),
                 "version": assignment.get("version", 0)}
        if place.get("key") is not None:
            entry["key"] = place["key"]
        if place.get("group") is not None:
            entry["group"] = place["group"]
        buckets[name] = entry
    nodes = {n: {"address": info.get("advertise"), "fingerprint": info.get("fingerprint")}
             for n, info in node.nodes.items() if info.get("advertise")}
    return {"ok": 1, "result": {"cluster": True, "node": node.node_id, "nodes": nodes, "buckets": buckets}}
