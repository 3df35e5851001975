"""Long use, server and clients: connections, uploads, streams, pipelines, sweeps and restarts,
repeated, leave open files, threads and memory as they were.

The servers run in this process (ServerThread), so that tracemalloc sees their memory and
the fds and threads counted are theirs and the clients' together; one test runs a real
server process and counts its own. The check (``assert_steady``) and its bounds are
tests/test_leaks.py's; ``HOARDDB_SLOW=1`` runs the long versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import struct
import threading
import time

import pytest

import hoarddb
import hoarddb.aio
from hoarddb.client import pipeline
from hoarddb.errors import AuthFailedError, NotFoundError
from hoarddb.server.connection import Connection, UploadReader
from hoarddb.testing import ServerProcess, ServerThread
from hoarddb.testing.raw import RawConnection
from hoarddb.values.codec import encode

from ..test_leaks import PAST, _checkpoint_thread, assert_steady, cycles, files  # noqa: F401 (a fixture)
from .server_users import add_users, login

#: Threads of each of a test server's pools: few, and all started before a test's baseline
#: (start_pools), so that a thread more at the end is a leak, not a pool growing.
POOL = 2


def start_pools(server: ServerThread) -> None:
    """Start every thread the server's pools may have (they start them one by one, as work comes)."""
    s = server.server
    for pool, n in ((s._reads, s.config.read_threads), (s._writes, s.config.write_threads), (s._syncs, 1)):
        gate = threading.Barrier(n + 1)
        for _ in range(n):
            pool.submit(gate.wait, 10)
        gate.wait(10)


def live(cls, collect: bool = True) -> int:
    """Objects of ``cls`` alive (without ``collect``: or garbage waiting for the cyclic GC)."""
    if collect:
        gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is cls)


def settled(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset, not a goodbye: a client that died."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def start(path, **config) -> ServerThread:
    """A started test server whose pools have all their threads."""
    server = ServerThread(path, read_threads=POOL, write_threads=POOL, **config).start()
    start_pools(server)
    return server


@contextlib.contextmanager
def serving(path, **config):
    server = start(path, **config)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def insecure(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("leaks") / "data", insecure=True) as server:
        with hoarddb.connect(server.url()) as c:
            c["app"].create_bucket("H").batch_insert([{"_id_": f"k{i}", "v": i} for i in range(500)])
            server.blob = c["app"].create_bucket("B", type="blob").put(os.urandom(1 << 20))
        yield server


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    data = tmp_path_factory.mktemp("leaks-tls") / "data"
    add_users(data)
    with serving(data, auth_failure_delay=0.01) as server:
        with hoarddb.connect(server.url("admin", "admin-pw")) as c:
            c["app"].create_bucket("H").insert({"_id_": "k0", "v": 0})
        yield server


def _request(i: int, op: str = "get", **args) -> bytes:
    return encode({"id": i, "op": op, "db": "app", "bucket": "H", "args": args or {"key": "k0"}})


# -- connections ----------------------------------------------------------------------------------


def clean(server, i):
    with hoarddb.connect(server.url() if server.insecure else server.url("writer", "writer-pw")) as c:
        assert c["app"].H.get("k0")["v"] == 0


def reset_after_a_request(server, i):
    raw = RawConnection("127.0.0.1", server.port, tls=not server.insecure)
    if server.insecure:
        raw.hello()
    else:
        login(raw, "writer", "writer-pw")
    raw.send(_request(5))
    assert raw.recv_doc()["ok"] == 1
    reset(raw.sock)


def gone_mid_request(server, i):
    """A request sent whole and its connection closed before the answer; or half a request."""
    raw = RawConnection("127.0.0.1", server.port)
    raw.hello()
    request = [_request(7), _request(7, "count", filter={"v": {"$gte": 0}}),
               _request(7, "insert", doc={"v": -1}), _request(7, "find", filter={"v": 3})][i % 4]
    raw.send(request if i % 8 < 4 else request[:len(request) // 2])
    raw.close()


def closed_by_the_server(server, i):
    """Bytes that are not a message: the server says why and closes (its side first)."""
    raw = RawConnection("127.0.0.1", server.port)
    raw.send(b"GET / HTTP/1.1\r\n\r\n" if i % 2 else struct.pack("<i", 3) + b"xyz")
    assert raw.closed_by_peer()
    raw.close()


def tls_cut(server, i):
    """TLS cut during its handshake, or after it before the hello."""
    if i % 2:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(b"\x16\x03\x01\x00")  # the start of a ClientHello
        reset(sock)
    else:
        reset(RawConnection("127.0.0.1", server.port, tls=True).sock)


def failed_login(server, i):
    with pytest.raises(AuthFailedError):
        hoarddb.connect(server.url("writer", "wrong"))


CONNECTIONS = {
    "clean-insecure": ("insecure", clean),
    "clean-tls": ("secure", clean),
    "reset-insecure": ("insecure", reset_after_a_request),
    "reset-tls": ("secure", reset_after_a_request),
    "mid-request": ("insecure", gone_mid_request),
    "closed-by-server": ("insecure", closed_by_the_server),
    "tls-cut": ("secure", tls_cut),
    "failed-login": ("secure", failed_login),
}


@pytest.mark.parametrize("kind", CONNECTIONS)
@cycles(90, 2100)
def test_connections_come_and_go(request, kind, cycles):
    """However a connection ends, the server lets go of it at once: its fd, its memory, its
    Connection object (a server-closed one was kept 5 s by its grace timer)."""
    which, cycle = CONNECTIONS[kind]
    server = request.getfixturevalue(which)
    connections = live(Connection)
    assert_steady(lambda i: cycle(server, i), cycles, what=kind)
    assert settled(lambda: not server.server.connections)
    assert settled(lambda: live(Connection) <= connections, timeout=2), \
        f"{live(Connection) - connections} closed connections still held 2 s later"


# -- uploads cut, streams abandoned ----------------------------------------------------------------


def cut_upload(server, i):
    raw = RawConnection("127.0.0.1", server.port)
    raw.hello()
    raw.send_doc({"id": 9, "op": "put", "db": "app", "bucket": "B", "upload": True, "args": {"doc": {"name": "x"}}})
    raw.send_doc({"id": 9, "op": "chunk", "data": os.urandom(64 * 1024)})
    if i % 2:
        raw.send(encode({"id": 9, "op": "chunk", "data": b"y" * 1000})[:500])  # and half of the next
    raw.close()


@cycles(60, 1200)
def test_uploads_cut_midway_are_freed_without_the_cyclic_gc(insecure, cycles):
    """A blob upload whose connection is lost: the reader fails the put, and the connection, its
    reader and the chunks it held are freed then, by reference counting. (The error the reader
    kept and raised again held a traceback whose frames held the reader: a cycle only a full
    collection freed, 64 KiB to 4 MiB of chunks and the whole connection each, which a busy
    server reaches seldom.) The cycles run with the collector off, so what needs it shows."""
    blob_dir = insecure.data / "app" / "B"
    before = files(blob_dir)
    readers, connections = live(UploadReader), live(Connection)
    gc.disable()
    try:
        assert_steady(lambda i: cut_upload(insecure, i), cycles, collect=False, what="uploads cut")
        assert settled(lambda: live(UploadReader, False) <= readers and live(Connection, False) <= connections,
                       timeout=5), (f"{live(UploadReader, False) - readers} upload readers and "
                                    f"{live(Connection, False) - connections} connections wait for the cyclic GC")
    finally:
        gc.enable()
    assert settled(lambda: files(blob_dir) == before)  # no partial blob stays


@cycles(45, 600)
def test_streams_abandoned_halfway_or_unread(insecure, cycles):
    """The blocking client: a stream read halfway then dropped, one never read, and a client
    closed mid-stream. A dropped stream's chunks still to come are skipped, not kept: one
    never started kept them all (its spool, in memory then on disk) for the connection's life."""
    kept = hoarddb.connect(insecure.url())

    def abandon(i):
        stream = kept["app"].B.stream(insecure.blob, chunk_size=64 * 1024)
        next(stream)
        del stream
        kept["app"].B.stream(insecure.blob, chunk_size=64 * 1024)  # never read
        assert kept["app"].H.get("k0")["v"] == 0
        with hoarddb.connect(insecure.url()) as other:
            next(other["app"].B.stream(insecure.blob, chunk_size=64 * 1024))

    try:
        assert_steady(abandon, cycles)
        connection = kept._executor._conn
        assert not connection._spools and not connection._answers
    finally:
        kept.close()


@cycles(45, 600)
def test_aio_streams_abandoned_halfway_or_unread(insecure, cycles):
    """The asyncio client, as above: a dropped stream, read halfway or not at all, leaves no
    waiter holding its chunks (the loop closes a dropped async generator only once started)."""
    loop = asyncio.new_event_loop()
    kept = loop.run_until_complete(hoarddb.aio.connect(insecure.url()))

    async def abandon():
        stream = await kept["app"].B.stream(insecure.blob, chunk_size=64 * 1024)
        await stream.__anext__()
        del stream
        await kept["app"].B.stream(insecure.blob, chunk_size=64 * 1024)  # never read
        assert (await kept["app"].H.get("k0"))["v"] == 0

    try:
        assert_steady(lambda i: loop.run_until_complete(abandon()), cycles, what="aio streams abandoned")
        loop.run_until_complete(asyncio.sleep(0.05))  # the dropped generators' closing
        assert not kept._executor._proto._waiters
    finally:
        loop.run_until_complete(kept.close())
        loop.close()


# -- pipelines, sweeps, scans nobody waits for --------------------------------------------------------


@cycles(60, 1200)
def test_pipelines_read_and_unread(insecure, cycles):
    """Pipelines answered, and pipelines whose connection closes before reading any answer."""
    requests = [{"op": "get", "db": "app", "bucket": "H", "args": {"key": f"k{k}"}} for k in range(20)] + \
               [{"op": "insert", "db": "app", "bucket": "H", "args": {"doc": {"v": -2}}}] * 5
    kept = hoarddb.connect(insecure.url())

    def pipelines(i):
        assert len(pipeline(kept, requests)) == 25
        raw = RawConnection("127.0.0.1", insecure.port)
        raw.hello()
        raw.send(b"".join(encode({"id": 100 + n, **r}) for n, r in enumerate(requests)))
        raw.close()

    try:
        assert_steady(pipelines, cycles)
    finally:
        kept.close()


@cycles(45, 600)
def test_ttl_sweeper_over_buckets_created_and_dropped(tmp_path, monkeypatch, cycles):
    monkeypatch.setenv("HOARDDB_TTL_SWEEP_SECONDS", "0.01")
    with serving(tmp_path / "data", insecure=True) as server, hoarddb.connect(server.url()) as c:
        db = c["app"]
        db.create_bucket("Keep")
        before = files(server.data)

        def create_and_drop(i):
            bucket = db.create_bucket("T", indices=[{"field": "At", "expire_after_seconds": 0}],
                                      store_fields=[{"name": "Q", "type": "fifo"}])
            for k in range(5):
                bucket.insert({"_id_": f"k{k}", "At": PAST})
                try:
                    bucket[f"k{k}"].Q.push({"k": k})
                except NotFoundError:
                    pass  # swept already
            assert settled(lambda: bucket.length() == 0)
            db.drop_bucket("T")

        assert_steady(create_and_drop, cycles)
        assert files(server.data) == before


def test_scans_of_closed_connections_do_not_pile_up(tmp_path):
    """Clients that send a scan and hang up at once: a scan whose connection closed while it
    waited for a read thread is not run. (Every one was: the read pool's queue grew as long as
    they came faster than scans ran, and the server spent that time on answers nobody read.)"""
    with serving(tmp_path / "data", insecure=True) as server:
        with hoarddb.connect(server.url()) as c:
            c["app"].create_bucket("H").batch_insert([{"v": i, "pad": "x" * 100} for i in range(5000)])
        engine = server.server.engine
        execute, scans = engine.execute, []

        def counting(request):
            if request.get("op") == "count":
                scans.append(1)
            return execute(request)

        engine.execute = counting
        sent = 40
        for _ in range(sent):
            raw = RawConnection("127.0.0.1", server.port)
            raw.hello()
            raw.send(_request(1, "count", filter={"v": {"$gte": 0}}))
            raw.close()
        assert settled(lambda: not server.server._reads.busy, timeout=60)
        assert len(scans) <= sent // 2, f"{len(scans)} of {sent} scans ran for connections already closed"


# -- restarts ----------------------------------------------------------------------------------------


@cycles(30, 300)
def test_clients_reconnect_across_server_restarts(tmp_path, cycles):
    """A server stopped and started again on its port, and a blocking and an asyncio client that
    each reconnect on their next call; fresh clients of each kind come and go too. Counted in
    this process: the servers' fds, threads and memory as well as the clients'.

    Busy polling is off at both ends: a poller (hoarddb/busypoll.py) opens an fd, its thread's
    /proc schedstat, at its first poll that has to wait, and holds it for its connection's
    life; whether that first answer (or next request) was waited for or already there is a
    race. The connections made anew each cycle here are open at every count, so they held
    none, one or two such fds by timing, and under load a part ended with one more than the
    baseline. (Busy pollers are counted where their connections close within the cycle:
    test_connections_come_and_go.)"""
    data = tmp_path / "data"
    server = start(data, insecure=True, busy_poll=0)
    port, url = server.port, server.url() + "&busy_poll=0"
    with hoarddb.connect(url) as c:
        c["app"].create_bucket("H").insert({"_id_": "k0", "v": 0})
    blocking = hoarddb.connect(url)
    loop = asyncio.new_event_loop()
    aio = loop.run_until_complete(hoarddb.aio.connect(url))
    servers = [server]

    async def aio_calls():
        assert (await aio["app"].H.get("k0"))["v"] == 0
        async with await hoarddb.aio.connect(url) as fresh:
            assert (await fresh["app"].H.get("k0"))["v"] == 0

    def restart(i):
        servers[0].stop()
        servers[0] = start(data, insecure=True, port=port, busy_poll=0)
        assert blocking["app"].H.get("k0")["v"] == 0
        with hoarddb.connect(url) as fresh:
            assert fresh["app"].H.get("k0")["v"] == 0
        loop.run_until_complete(aio_calls())

    try:
        assert_steady(restart, cycles, warmup=10)
    finally:
        blocking.close()
        loop.run_until_complete(aio.close())
        loop.close()
        servers[0].stop()


def test_a_closed_client_keeps_no_fd_while_its_stream_is_held(tmp_path):
    """A blocking client closed while a stream of it is still held, half read: the stream holds
    the closed connection, but no fd of it. (Its busy poller's /proc schedstat fd stayed open
    as long as the closed connection object did: while a stream of it was kept, or, for a
    client closed by another thread during a call, until the client itself was dropped.)"""
    def fds():
        out = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                out[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                pass  # listdir's own
        return out

    with serving(tmp_path / "data", insecure=True, busy_poll=0) as server:
        with hoarddb.connect(server.url()) as c:
            blob = c["app"].create_bucket("B", type="blob").put(os.urandom(1 << 20))
        before = fds()
        client = hoarddb.connect(server.url(), busy_poll=1000)
        poller = client._executor._conn.poller
        if poller is None:
            pytest.skip("this process does not busy-poll (one CPU)")
        poller._weigh_cpus()  # as its first poll that waits does: opens its thread's schedstat
        del poller
        stream = client["app"].B.stream(blob, chunk_size=64 * 1024)
        next(stream)
        client.close()
        gc.collect()

        def left():
            return {fd: link for fd, link in fds().items() if before.get(fd) != link}

        # (the server's end, and the blob file it was streaming, close a moment after ours)
        assert settled(lambda: not left()), f"a closed client's connection, held by its stream, keeps {left()}"
        del stream


# -- a real server process ---------------------------------------------------------------------------


@cycles(90, 2100)
def test_server_process_holds_steady(tmp_path, cycles):
    """The churn of the tests above against a server process (TLS and users): its open fds and
    threads, counted in /proc, come back to where they were; its anonymous RSS stays put."""
    data = tmp_path / "data"
    add_users(data)
    with ServerProcess(data, "--busy-poll", "0", insecure=False,
                       env={"HOARDDB_AUTH_FAILURE_DELAY": "0.01", "HOARDDB_READ_THREADS": "1",
                            "HOARDDB_WRITE_THREADS": "1"}) as server:  # pools started by the warm-up
        with hoarddb.connect(server.url("admin", "admin-pw")) as c:
            c["app"].create_bucket("H").insert({"_id_": "k0", "v": 0})
            blob = c["app"].create_bucket("B", type="blob").put(os.urandom(256 * 1024))

        def upload_cut(server, i):
            raw = RawConnection("127.0.0.1", server.port, tls=True)
            login(raw, "writer", "writer-pw")
            raw.send_doc({"id": 9, "op": "put", "db": "app", "bucket": "B", "upload": True, "args": {}})
            raw.send_doc({"id": 9, "op": "chunk", "data": os.urandom(64 * 1024)})
            reset(raw.sock)

        def stream_cut(server, i):
            with hoarddb.connect(server.url("writer", "writer-pw")) as c:
                next(c["app"].B.stream(blob, chunk_size=16 * 1024))

        churn = [clean, reset_after_a_request, tls_cut, failed_login, upload_cut, stream_cut]

        def cycle(i):
            churn[i % len(churn)](server, i)

        assert_steady(cycle, cycles, warmup=3 * len(churn), pid=server.proc.pid, rss=16 << 20,
                      what="server process churn")
