"""The server busy-polls a lone client: after answering it, the event loop polls its socket awake for a moment; never with two connections, and rarer after misses (BusyPoll itself: tests/test_busypoll.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import hoarddb
from hoarddb.errors import BadValueError
from hoarddb.server.config import ServerConfig
from hoarddb.server.server import Server
from hoarddb.testing import ServerThread

two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="busy polling needs two CPUs")


def polls(server) -> dict:
    return dict(server.server.metrics.busy_polls)


# -- the server

CLIENT = """
import sys, hoarddb
with hoarddb.connect(sys.argv[1]) as c:
    kv = c["app"]["KV"]
    for i in range(int(sys.argv[2])):
        kv.insert({"_id_": f"k{i}", "n": i})
        assert kv.get(f"k{i}")["n"] == i
"""


@two_cpus
def test_a_lone_client_in_another_process_is_met_by_polls(tmp_path, spare_cpu):
    # 10 ms: even on a loaded machine a client process sends its next request in time
    with ServerThread(tmp_path / "data", insecure=True, busy_poll=10_000) as server:
        with hoarddb.connect(server.url()) as c:
            c["app"].create_bucket("KV", type="hash")
        before = polls(server)
        # The client does not poll for its answers (busy_poll=0): with both ends spinning on
        # two CPUs, any third task would take one of them, and that end stands aside a while.
        subprocess.run([sys.executable, "-c", CLIENT, server.url() + "&busy_poll=0", "150"], check=True, timeout=120)
        after = polls(server)
        hits = after["request"] - before["request"]
        misses = after["timeout"] - before["timeout"]
        # 300 requests: without polls this is 0; a poll meets the next request most of the time on an
        # idle machine (~250), but a third is what a CI machine with a busy neighbour gives at worst
        spare_cpu.expect(hits >= 100, (hits, misses))
        with hoarddb.connect(server.url()) as c:
            assert c["app"]["KV"].get("k149")["n"] == 149


@two_cpus
def test_a_slow_client_is_polled_for_only_a_few_times(tmp_path, spare_cpu):
    with ServerThread(tmp_path / "data", insecure=True, busy_poll=200) as server:
        with hoarddb.connect(server.url()) as c:
            kv = c["app"].create_bucket("KV", type="hash")
            before = polls(server)
            for i in range(16):
                time.sleep(0.02)  # 20 ms between requests: no 200 µs poll sees the next one
                kv.insert({"_id_": f"k{i}"})
            after = polls(server)
    misses = after["timeout"] - before["timeout"]
    spare_cpu.expect(1 <= misses <= 5, misses)  # backing off: a poll at the 1st, 3rd, 7th, 15th... idle moment


@two_cpus
def test_no_polls_with_two_connections(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True, busy_poll=10_000) as server:
        with hoarddb.connect(server.url()) as c, hoarddb.connect(server.url()) as other:
            other.databases()
            kv = c["app"].create_bucket("KV", type="hash")
            before = polls(server)
            for i in range(50):
                kv.insert({"_id_": f"k{i}"})
                assert kv.get(f"k{i}") is not None
            assert polls(server) == before


def test_no_polls_when_turned_off(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True, busy_poll=0) as server:
        with hoarddb.connect(server.url()) as c:
            kv = c["app"].create_bucket("KV", type="hash")
            for i in range(20):
                kv.insert({"_id_": f"k{i}"})
        assert polls(server) == {"request": 0, "timeout": 0}
        assert all(conn.poller is None for conn in server.server.connections)
        assert ", busy poll off, " in server.server.start_line()


@two_cpus
def test_no_polls_on_one_cpu(tmp_path):
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(mask)})  # this thread only: the Server built here sees one CPU
    try:
        server = Server(ServerConfig(data=str(tmp_path / "data"), insecure=True, port=0).check())
    finally:
        os.sched_setaffinity(0, mask)
    assert server._busy_poll == 0
    assert ", busy poll off (one CPU), " in server.start_line()
    assert Server(ServerConfig(data=str(tmp_path / "data"), insecure=True, port=0).check())._busy_poll == 0.0002


def test_busy_poll_is_checked():
    for bad in (-1, 10_001):
        with pytest.raises(BadValueError, match=r"busy_poll must be 0\.\.10000 microseconds"):
            ServerConfig(data="d", busy_poll=bad).check()
    assert ServerConfig.load({"data": "d"}, environ={"HOARDDB_BUSY_POLL": "0"}).busy_poll == 0
    with pytest.raises(BadValueError, match="HOARDDB_BUSY_POLL must be a whole number, got 'abc'"):
        ServerConfig.load({"data": "d"}, environ={"HOARDDB_BUSY_POLL": "abc"})
    assert ServerConfig.load({"data": "d", "busy_poll": 50}, environ={}).busy_poll == 50


def test_the_polls_are_in_the_metrics(tmp_path):
    import urllib.request

    with ServerThread(tmp_path / "data", insecure=True) as server:
        with hoarddb.connect(server.url()) as c:
            c.databases()
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    assert 'hoarddb_server_busy_polls_total{outcome="request"}' in text
    assert 'hoarddb_server_busy_polls_total{outcome="timeout"}' in text
    assert ", busy poll 200 µs, " in server.server.start_line()
