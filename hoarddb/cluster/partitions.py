"""The partition map: which partition a document's key falls in, and which node owns each partition.

A spread bucket has ``partitions`` partitions, numbered from 0; a document's partition is
a hash of its key (:func:`partition_of`, in hoarddb/routing.py, a layer below the clients,
so that a client routing by owner hashes as the nodes do). A whole bucket has one
partition, 0.

The owners of a bucket's partitions are a *balanced assignment kept in etcd*
(``assign/<db>/<bucket>``), not a hash ring: :func:`balance` gives each live node
``floor(P/N)`` or ``ceil(P/N)`` partitions while keeping every partition it can on its
current owner, so a node that joins takes about ``P/(N+1)`` partitions, each from a node
over its share, and nothing else moves. A ring of virtual nodes moves about as little,
but balances only statistically (with 64 partitions and a few nodes, shares differ by
tens of percent), and its answer changes with the hash; an assignment kept in etcd is
exact, changes only by a transaction, and is what every node reads (docs/dev/cluster.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..routing import partition_of  # noqa: F401 - a key's partition: the hashing clients share

#: Partitions of a spread bucket when its declaration gives none: enough for a cluster of a
#: few dozen nodes to hold about one each, few enough that a scatter-gather stays cheap.
DEFAULT_PARTITIONS = 64
#: The most partitions a bucket may have.
MAX_PARTITIONS = 4096


def balance(partitions: int, nodes: Sequence[str], current: Sequence[str | None] | None = None) -> list[str]:
    """The owner of each of ``partitions`` partitions among ``nodes``, balanced, moving as few as it can.

    ``current`` is the assignment now (a node id per partition, or None for none); a
    partition stays with its owner while that owner is among ``nodes`` and holds no more
    than its share. Shares are ``floor(P/N)`` or ``ceil(P/N)``, the larger ones going to
    the nodes that already hold the most (so a balanced map does not change). Nodes are
    taken in sorted order, so every node computes the same answer from the same input.
    """
    if not nodes:
        raise ValueError("no node to assign partitions to")
    nodes = sorted(set(nodes))
    current = list(current or [None] * partitions)
    current += [None] * (partitions - len(current))
    held = {n: [p for p in range(partitions) if current[p] == n] for n in nodes}
    base, extra = divmod(partitions, len(nodes))
    # the nodes holding the most keep the larger shares
    by_holding = sorted(nodes, key=lambda n: (-len(held[n]), n))
    share = {n: base + (1 if i < extra else 0) for i, n in enumerate(by_holding)}
    owners: list[str | None] = [None] * partitions
    for n in nodes:
        for p in held[n][:share[n]]:
            owners[p] = n
    count = {n: min(len(held[n]), share[n]) for n in nodes}
    for p in range(partitions):
        if owners[p] is None:
            n = min(nodes, key=lambda m: (count[m] - share[m], m))
            owners[p] = n
            count[n] += 1
    return owners  # type: ignore[return-value]


def moves(before: Sequence[str | None], after: Sequence[str]) -> list[tuple[int, str | None, str]]:
    """The partitions whose owner changes: ``(partition, old owner, new owner)``."""
    return [(p, before[p] if p < len(before) else None, owner) for p, owner in enumerate(after)
            if (before[p] if p < len(before) else None) != owner]
