"""The cluster's members: the nodes that every bucket's partitions are shared among, as etcd records them.

``members/<node>`` (no lease: a member stays one while it is down or restarting) is written
when a node is added — ``hoarddb cluster add-node``, or the node's own ``server --join`` — and
deleted when it is removed or drained (``remove-node``, ``--drain-on-stop``), by
:func:`moves.plan`, in the transaction that records the plan's moves. A plan shares the
partitions among the members, those holding nothing included; a bucket created is shared
among the members that are up. A node that is up but not a member serves as an entry (it
forwards and gathers what its clients ask) and is given no partition.

An etcd without any ``members/`` key (a cluster made before they were recorded, or whose
nodes were never added) has *implied* members: the nodes holding partitions, less those
``remove-node`` took out (``drained/``) — or, while no bucket exists, the nodes up. The
first plan records them, with its own change; until then a bucket is created as before,
shared among every node up that was not taken out.
"""

from __future__ import annotations

from .partitions import balance


async def current(coord, nodes: dict | None = None, assignments: dict | None = None,
                  drained: set[str] | None = None) -> tuple[set[str], bool]:
    """The members, and whether etcd records them (False: implied, as above). ``nodes`` (the nodes up),
    ``assignments`` and ``drained`` are read from etcd when not given."""
    recorded = await coord.members()
    if recorded is not None:
        return recorded, True
    assignments = await coord.assignments() if assignments is None else assignments
    drained = await coord.drained() if drained is None else drained
    holders = {n for a in assignments.values() for n in a["owners"]}
    if not holders:
        holders = set(await coord.nodes() if nodes is None else nodes)
    return holders - drained, False


async def new_bucket_owners(coord, partitions: int, nodes: dict, me: str) -> list[str]:
    """The owners of a new bucket's partitions: balanced over the members that are up (over every node up
    not taken out when no member is recorded); this node alone when none is up."""
    recorded = await coord.members()
    if recorded is None:
        drained = await coord.drained()  # (nodes taken out by cluster remove-node get none)
        up = [n for n in nodes if n not in drained]
    else:
        up = [n for n in nodes if n in recorded]
    return balance(partitions, up or [me])
