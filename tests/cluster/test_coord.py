"""Coordination through a real etcd: membership with a lease, the catalog, ownership with epochs."""

import asyncio
import time

import pytest

from hoarddb.cluster.coord import Coordinator, OwnedElsewhere, parse_cluster_url
from hoarddb.errors import BadValueError, ClusterUnavailableError


def run(coro):
    return asyncio.run(coro)


def test_cluster_url_lists_endpoints():
    assert parse_cluster_url("etcd://127.0.0.1:2379,h2:2380") == ["127.0.0.1:2379", "h2:2380"]
    with pytest.raises(BadValueError, match="etcd://"):
        parse_cluster_url("http://127.0.0.1:2379")


def test_a_node_joins_and_a_second_with_its_id_is_refused(etcd):
    async def main():
        n1 = Coordinator([etcd.endpoint], "n1", "127.0.0.1:7001", ttl=2)
        await n1.start()
        try:
            assert (await n1.nodes())["n1"]["advertise"] == "127.0.0.1:7001"
            twin = Coordinator([etcd.endpoint], "n1", "127.0.0.1:7002", ttl=2)
            with pytest.raises(BadValueError, match="already in the cluster"):
                await twin.start()
        finally:
            await n1.stop()
        watcher = Coordinator([etcd.endpoint], "w", "x:1", ttl=2)
        await watcher.start()
        assert "n1" not in await watcher.nodes()  # a stop revokes the lease at once
        await watcher.stop()
    run(main())


def test_ownership_is_one_transaction_that_raises_the_epoch(etcd):
    async def main():
        n1 = Coordinator([etcd.endpoint], "n1", "a:1", ttl=2)
        n2 = Coordinator([etcd.endpoint], "n2", "b:1", ttl=2)
        await n1.start()
        await n2.start()
        try:
            assert await n1.create_bucket("app", "Users", {"type": "hash"}, ["n1", "n2"])
            assert not await n2.create_bucket("app", "Users", {"type": "hash"}, ["n2", "n2"])
            assert (await n2.assignment("app", "Users"))["owners"] == ["n1", "n2"]
            assert await n1.claim("app", "Users", 0) == 1
            with pytest.raises(OwnedElsewhere) as held:
                await n2.claim("app", "Users", 0)
            assert held.value.node == "n1"
            assert n1.holds("app", "Users", 0) == 1 and n2.holds("app", "Users", 0) is None
            await n1.release("app", "Users", 0)
            assert await n2.claim("app", "Users", 0) == 2  # a new holder, a later epoch
            await n2.stop()  # its lease revoked: the owner key goes, the epoch stays
            assert await n1.owner("app", "Users", 0) is None
            assert await n1.claim("app", "Users", 0) == 3
        finally:
            await n1.stop()
            await n2.stop()
    run(main())


def test_a_node_stops_serving_when_its_lease_may_have_run_out(etcd):
    async def main():
        n1 = Coordinator([etcd.endpoint], "n1", "a:1", ttl=2)
        await n1.start()
        try:
            await n1.create_bucket("app", "B", {"type": "hash"}, ["n1"])
            await n1.claim("app", "B", 0)
            assert n1.holds("app", "B", 0) == 1
            etcd.kill()  # no keepalive is answered from now on
            deadline = time.monotonic() + 10
            while n1.holds("app", "B", 0) is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert n1.holds("app", "B", 0) is None  # judged on its own clock, etcd silent
            with pytest.raises(ClusterUnavailableError):
                await n1.nodes()
        finally:
            await n1.stop()
    run(main())
