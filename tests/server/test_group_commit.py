"""Group commit: concurrent writes share fsyncs, no write is answered before its fsync, reads never wait for one."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest

import hoarddb
from hoarddb.client import pipeline
from hoarddb.testing import ServerProcess, ServerThread


@pytest.fixture
def server(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True) as s:
        yield s


def test_concurrent_writes_share_fsyncs(server):
    if server.server.committer is None:
        pytest.skip("this engine has no Engine.sync(): every write fsyncs on its own")
    with hoarddb.connect(server.url()) as c:
        c["app"].create_bucket("Q", type="fifo")
    before_ops, before_syncs = server.server.committer.operations, server.server.committer.fsyncs
    threads, per_thread, errors = 16, 25, []

    def writer(n):
        try:
            with hoarddb.connect(server.url()) as c:
                for i in range(per_thread):
                    c["app"].Q.push({"t": n, "i": i})
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors
    ops = server.server.committer.operations - before_ops
    fsyncs = server.server.committer.fsyncs - before_syncs
    assert ops == threads * per_thread
    assert fsyncs < ops / 2, f"{ops} writes took {fsyncs} fsyncs"
    with hoarddb.connect(server.url()) as c:
        assert c["app"].Q.length() == threads * per_thread
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    assert "hoarddb_server_ops_per_fsync_count" in text and "hoarddb_server_fsyncs_total" in text


def test_answers_wait_for_the_fsync_and_reads_do_not(server):
    if server.server.committer is None:
        pytest.skip("this engine has no Engine.sync()")
    with hoarddb.connect(server.url()) as c:
        c["app"].create_bucket("H", type="hash").insert({"_id_": "old"})
    committer = server.server.committer
    real_sync, gate = committer._sync, threading.Event()

    def slow_sync():
        gate.set()
        time.sleep(1.0)
        real_sync()

    committer._sync = slow_sync
    reader = hoarddb.connect(server.url())  # connected before the write: not left alone with the loop
    try:
        done = {}

        def write():
            with hoarddb.connect(server.url()) as c:
                started = time.monotonic()
                c["app"].H.insert({"_id_": "new"})
                done["write"] = time.monotonic() - started

        t = threading.Thread(target=write)
        t.start()
        assert gate.wait(10)
        with reader:
            started = time.monotonic()
            assert reader["app"].H.get("old") == {"_id_": "old"}
            assert reader["app"].H.count() == 2  # applied, not yet acknowledged: reads see it
            read_time = time.monotonic() - started
        t.join(10)
    finally:
        committer._sync = real_sync
    assert read_time < 0.5, f"a read waited {read_time:.2f} s behind an fsync"
    assert done["write"] >= 0.9, "a write was answered before its fsync"


def wait_for_connections(server, n):
    deadline = time.monotonic() + 10
    while len(server.server.connections) != n:
        assert time.monotonic() < deadline, f"{len(server.server.connections)} connections, not {n}"
        time.sleep(0.01)


def test_a_lone_connection_flushes_on_the_event_loop_and_two_do_not(server):
    if server.server.committer is None:
        pytest.skip("this engine has no Engine.sync()")
    committer = server.server.committer
    real_sync, threads = committer._sync, []

    def noting_sync():
        threads.append(threading.get_ident())
        real_sync()

    committer._sync = noting_sync
    try:
        with hoarddb.connect(server.url()) as c:
            q = c["app"].create_bucket("Q", type="fifo")
            wait_for_connections(server, 1)
            inline = committer.inline
            q.push({"n": 1})
            assert committer.inline == inline + 1 and threads[-1] == server._thread.ident
            with hoarddb.connect(server.url()) as other:
                other["app"].Q.length()
                wait_for_connections(server, 2)
                q.push({"n": 2})
                assert committer.inline == inline + 1 and threads[-1] != server._thread.ident
            assert q.length() == 2
    finally:
        committer._sync = real_sync


def test_a_lone_write_is_answered_before_lmdb_commits_it_and_read_back_at_once(server):
    if server.server.committer is None:
        pytest.skip("this engine has no Engine.sync()")
    committer = server.server.committer
    with hoarddb.connect(server.url()) as c:
        h = c["app"].create_bucket("H", type="hash", indices=[{"field": "email", "unique": True}])
        wait_for_connections(server, 1)
        deferred = committer.deferred
        for i in range(20):
            h.insert({"_id_": f"k{i}", "email": f"e{i}"})
            assert h.get(f"k{i}") == {"_id_": f"k{i}", "email": f"e{i}"}
            assert h.search({"email": f"e{i}"})[0]["_id_"] == f"k{i}"
        assert committer.deferred == deferred + 20
        with pytest.raises(hoarddb.HoardError):  # the held commit of k0 came before this check
            h.insert({"_id_": "other", "email": "e0"})
        # A read sent right behind the write (its commit is held back only if the read was
        # not read yet, and then the commit comes before the loop reads it).
        answers = pipeline(c, [{"op": "insert", "db": "app", "bucket": "H", "args": {"doc": {"_id_": "p"}}},
                               {"op": "get", "db": "app", "bucket": "H", "args": {"key": "p"}}])
        assert answers[1]["result"] == {"_id_": "p"}
        deferred = committer.deferred
        with hoarddb.connect(server.url()) as other:  # two connections: never held back
            other["app"].H.length()
            wait_for_connections(server, 2)
            h.insert({"_id_": "two", "email": "two"})
            assert other["app"].H.get("two") == {"_id_": "two", "email": "two"}
        assert committer.deferred == deferred


def test_a_long_scan_does_not_hold_other_connections(server):
    with hoarddb.connect(server.url()) as c:
        c["app"].create_bucket("H", type="hash").insert({"_id_": "k"})
    engine = server.server.engine
    store = server.call(lambda: engine._store("app", "H", engine.catalog.bucket("app", "H")))
    real_find, gate = store.find, threading.Event()

    def slow_find(*args, **kwargs):
        gate.set()
        time.sleep(1.0)
        return real_find(*args, **kwargs)

    store.find = slow_find
    try:
        done = {}

        def scan():
            with hoarddb.connect(server.url()) as c:
                done["found"] = c["app"].H.find({})

        t = threading.Thread(target=scan)
        t.start()
        assert gate.wait(10)
        with hoarddb.connect(server.url()) as other:
            started = time.monotonic()
            assert other["app"].H.get("k") == {"_id_": "k"}
            other["app"].H.insert({"_id_": "k2"})
            elapsed = time.monotonic() - started
        t.join(10)
    finally:
        del store.find
    assert elapsed < 0.5, f"a get and an insert waited {elapsed:.2f} s behind another connection's scan"
    assert {"_id_": "k"} in done["found"]  # (k2 too: the scan reads after its sleep)


def _collections(server) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    found = re.findall(r'^python_gc_collections_total\{generation="(\d)"\} (\S+)$', text, re.M)
    assert len(found) == 3, text
    return {generation: float(n) for generation, n in found}


def test_pipelines_do_not_set_off_the_garbage_collector(tmp_path):
    """A pipeline keeps its requests alive until their answers leave; at Python's default
    threshold the server's process searched them for cycles about once per pipeline of
    100 writes (server.collect_less)."""
    with ServerProcess(tmp_path / "data") as server, hoarddb.connect(server.url()) as c:
        c["app"].create_bucket("Q", type="fifo")
        before = _collections(server)
        for i in range(50):
            requests = [{"op": "push", "db": "app", "bucket": "Q", "args": {"doc": {"i": i, "k": k, "pad": "x" * 100}}}
                        for k in range(100)]
            assert not [a for a in pipeline(c, requests) if isinstance(a, Exception)]
        after = _collections(server)
        assert c["app"].Q.length() == 5000
    young = after["0"] - before["0"]
    assert young < 10, f"50 pipelines set off {young} collections"
