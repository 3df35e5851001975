"""The places every contract test runs in: each executor (embedded, blocking client, asyncio
client) times each where (a bucket, a store field, a store field one level deeper), on one engine
and one server for the session.

A test takes ``place`` (the fields are a hash bucket's documents', and once, embedded,
a btree bucket's entries') and makes the stores it needs (``place.make("fifo")``), each in a
database of its own, so the tests share the engine and the server without seeing each
other's data. ``field_place`` is the store-field places alone, for what only a field has.
"""

from __future__ import annotations

import os

import pytest

import hoarddb
from hoarddb.testing import ServerThread

from .places import EXECUTORS, WHERES, Blocking, Loop, Place


@pytest.fixture(scope="session")
def contract_server(tmp_path_factory):
    """One insecure server on 127.0.0.1 for the whole contract suite; with HOARDDB_CONTRACT_CLUSTER=1,
    the second node of a cluster of three (and a real etcd), so every request of the remote places
    is run, forwarded or gathered by a cluster (docs/dev/cluster.md says what passes). The blocking
    client enters the cluster at the first node and the asyncio client at the third (``entry``)."""
    if os.environ.get("HOARDDB_CONTRACT_CLUSTER"):
        yield from _cluster_node(tmp_path_factory.mktemp("contract-cluster"))
        return
    with ServerThread(tmp_path_factory.mktemp("contract-server") / "data", insecure=True, busy_poll=0) as server:
        yield server


def _cluster_node(tmp):
    from hoarddb.testing import ServerProcess
    from hoarddb.testing.etcd import EtcdProcess

    with EtcdProcess(tmp / "etcd") as etcd:
        nodes = [ServerProcess(tmp / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}") for i in (1, 2, 3)]
        try:
            for node in nodes:
                node.start()
            nodes[1].owner_data = lambda db, bucket: _owner_data(nodes, db, bucket)
            nodes[1].entry = {"blocking": nodes[0].url(), "aio": nodes[2].url()}
            yield nodes[1]
        finally:
            for node in nodes:
                node.stop()


def _owner_data(nodes, db: str, bucket: str):
    """The data folder of the node that owns a whole bucket of the cluster (its blob files are there): the one
    node that answers a request marked as a node's for it (the others refuse it, naming the owner)."""
    from hoarddb.errors import PartitionUnavailableError

    for node in nodes:
        with hoarddb.connect(node.url()) as client:
            try:
                client.execute({"op": "length", "db": db, "bucket": bucket, "_node": "contract"})
            except PartitionUnavailableError:
                continue
            return node.data
    raise AssertionError(f"no node of the cluster owns {db}.{bucket}")


@pytest.fixture(scope="session")
def embedded_client(tmp_path_factory):
    """One embedded engine, with sync off: what is under contract here is what the verbs answer
    (durability has suites of its own), and a test then costs no fsync per store it makes."""
    data = tmp_path_factory.mktemp("contract-embedded") / "data"
    with hoarddb.open(data, ttl_sweep_seconds=0, sync=False) as client:
        yield client, data


@pytest.fixture(scope="session")
def blocking_client(contract_server):
    client = hoarddb.connect(_entry(contract_server, "blocking"))
    yield client
    client.close()


@pytest.fixture(scope="session")
def aio_client(contract_server):
    import hoarddb.aio

    loop = Loop()
    client = loop.run(hoarddb.aio.connect(_entry(contract_server, "aio")))
    yield Blocking(client, loop)
    loop.run(client.close())
    loop.stop()


def _entry(server, executor: str) -> str:
    """The URL an executor's client connects to: the server, or its own node of the cluster."""
    return getattr(server, "entry", {}).get(executor) or server.url()


def _place(request, executor: str, where: str, owner_type: str = "hash") -> Place:
    if executor == "embedded":
        client, data = request.getfixturevalue("embedded_client")
        return Place(executor, where, client, data, owner_type)
    server = request.getfixturevalue("contract_server")
    client = request.getfixturevalue("blocking_client" if executor == "blocking" else "aio_client")
    return Place(executor, where, client, server.data, owner_data=getattr(server, "owner_data", None))


#: Every executor times every where, and (embedded) the store field of a btree bucket's entry,
#: whose stores hang from its sort key.
PLACES = [(e, w) for e in EXECUTORS for w in WHERES] + [("embedded", "field", "btree"), ("embedded", "nested", "btree")]


@pytest.fixture(params=PLACES, ids=lambda p: "-".join(p) if len(p) == 2 else f"{p[0]}-{p[2]}-{p[1]}")
def place(request):
    made = _place(request, *request.param)
    yield made
    made.drop()


@pytest.fixture(params=[p for p in PLACES if p[1] != "bucket"],
                ids=lambda p: f"{p[0]}-{p[1]}-{p[2] if len(p) > 2 else 'hash'}")
def field_place(request) -> Place:
    """The store fields of ``place`` alone, for what only a field has (its document, its limits)."""
    made = _place(request, *request.param)
    yield made
    made.drop()

