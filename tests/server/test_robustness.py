"""Bad input, stalled and idle clients, limits, lost connections: the server keeps serving everyone else."""

from __future__ import annotations

import random
import re
import socket
import struct
import time
import urllib.request

import pytest

import hoarddb
from hoarddb.errors import ConnectionError_, HoardTimeoutError
from hoarddb.testing import FaultProxy, ServerThread
from hoarddb.testing.raw import RawConnection
from hoarddb.values.codec import encode


def good_client_works(server) -> None:
    with hoarddb.connect(server.url(), timeout=10) as c:
        c["fuzz"].Q.push({"ok": True})
        assert c["fuzz"].Q.pop() == {"ok": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerThread(tmp_path_factory.mktemp("robust") / "data", insecure=True, handshake_timeout=2) as s:
        with hoarddb.connect(s.url()) as c:
            c["fuzz"].create_bucket("Q", type="fifo")
            c["fuzz"].create_bucket("H", type="hash")
        yield s


def _garbage(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 200))
    if kind == 1:  # a truncated document, then silence broken by close
        doc = encode({"id": 1, "op": "hello", "protocol": 1, "pad": "x" * rng.randrange(50)})
        return doc[:rng.randrange(1, len(doc))]
    if kind == 2:  # a length over the limit
        return struct.pack("<i", rng.choice([2**31 - 1, 17 * 1024 * 1024, -5, 3])) + rng.randbytes(20)
    if kind == 3:  # a good frame whose inside is not BSON
        body = rng.randbytes(rng.randrange(1, 40))
        return struct.pack("<i", len(body) + 5) + body + b"\x00"
    if kind == 4:  # a request before hello
        return encode({"id": 1, "op": "insert", "db": "fuzz", "bucket": "H", "args": {"doc": {}}})
    return b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def test_fuzz_malformed_messages(server):
    rng = random.Random(1234)
    sent = 0
    deadline = time.monotonic() + 40
    # 1) garbage on fresh connections: each is answered with an error or closed, never a crash.
    for _ in range(300):
        if time.monotonic() > deadline:
            break
        with RawConnection("127.0.0.1", server.port, timeout=3) as raw:
            if rng.random() < 0.5:
                raw.hello()
            raw.send(_garbage(rng))
            sent += 1
            try:
                raw.sock.shutdown(socket.SHUT_WR)
                raw.closed_by_peer()
            except OSError:
                pass
    # 2) well-framed bad requests on one connection, which must stay usable.
    with RawConnection("127.0.0.1", server.port, timeout=5) as raw:
        raw.hello()
        bad = [
            {"op": "insert"}, {"id": 1}, {"id": 2, "op": 5}, {"id": 3, "op": "frobnicate"},
            {"id": 4, "op": "push", "db": "fuzz", "bucket": "Q", "args": "notadoc"},
            {"id": 5, "op": "push", "db": "fuzz", "bucket": "Q", "args": {"doc": 5}},
            {"id": 6, "op": "peek", "db": "fuzz", "bucket": "Q", "args": {"limit": "five"}},
            {"id": 7, "op": "get", "db": 12, "bucket": None, "args": {}},
            {"id": 8, "op": "find", "db": "fuzz", "bucket": "H", "args": {"filter": {"$where": 1}}},
            {"id": 9, "op": "chunk", "data": b"x"}, {"id": 10, "op": "chunk", "data": "text"},
            {"id": 11, "op": "hello", "protocol": 1}, {"id": 12, "op": "create_bucket", "db": "fuzz", "bucket": "B",
                                                       "options": {"type": "nope"}},
            {"id": 13, "op": "put", "db": "fuzz", "bucket": "H", "upload": True, "args": {}},
            {"id": 14, "op": "update", "db": "fuzz", "bucket": "H", "args": {"filter": {}, "update": {"$bogus": 1}}},
        ]
        for i in range(2000):
            doc = dict(rng.choice(bad))
            if "id" in doc and isinstance(doc["id"], int):
                doc["id"] = 1000 + i
            raw.send_doc(doc)
            answer = raw.recv_doc()
            assert answer is not None and answer["ok"] == 0, (doc, answer)
            assert isinstance(answer["code"], int) and answer["codeName"]
            sent += 1
            if i % 500 == 0:
                good_client_works(server)
        raw.send_doc({"id": "last", "op": "length", "db": "fuzz", "bucket": "Q"})
        assert raw.recv_doc() == {"id": "last", "ok": 1, "result": 0}
    assert sent >= 1000
    good_client_works(server)


def test_message_over_the_limit_is_refused_and_closed(server):
    with RawConnection("127.0.0.1", server.port) as raw:
        raw.hello()
        raw.send(struct.pack("<i", 17 * 1024 * 1024) + b"\x00" * 1000)
        answer = raw.recv_doc()
        assert answer["codeName"] == "PROTOCOL_ERROR" and "limit" in answer["message"]
        assert raw.recv_doc() is None
    good_client_works(server)


def test_a_document_too_large_is_refused_by_the_client_before_sending(server):
    with hoarddb.connect(server.url()) as c:
        with pytest.raises(hoarddb.errors.DocumentTooLargeError):
            c["fuzz"].H.insert({"_id_": "big", "pad": "x" * (17 * 1024 * 1024)})
        assert c["fuzz"].H.get("big") is None


def test_handshake_timeout(server):
    with RawConnection("127.0.0.1", server.port, timeout=10) as raw:
        started = time.monotonic()
        answer = raw.recv_doc()
        assert answer["codeName"] == "TIMEOUT" and answer["id"] is None
        assert raw.recv_doc() is None and time.monotonic() - started < 6


def test_a_stalled_reader_does_not_block_others(server):
    with hoarddb.connect(server.url()) as c:
        c["fuzz"].create_bucket("Big", type="hash").insert({"_id_": "b", "pad": "y" * 200_000})
    stalled = RawConnection("127.0.0.1", server.port)
    stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.hello()
    stalled.sock.setblocking(False)
    request = encode({"id": 1, "op": "get", "db": "fuzz", "bucket": "Big", "args": {"key": "b"}})
    sent = 0
    try:
        for _ in range(400):  # ~80 MB of answers if all were produced; the client reads none
            try:
                stalled.sock.send(request)
                sent += 1
            except BlockingIOError:
                time.sleep(0.01)
        time.sleep(0.5)
        started = time.monotonic()
        for _ in range(20):
            good_client_works(server)
        assert time.monotonic() - started < 5
        buffered = server.call(lambda: max((c.transport.get_write_buffer_size() for c in server.server.connections),
                                           default=0))
        assert buffered <= server.config.write_buffer + 2 * 200_100
    finally:
        stalled.close()
    assert sent > 0


def test_idle_connections_time_out_and_clients_reconnect(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True, idle_timeout=0.4) as server:
        with hoarddb.connect(server.url()) as c:
            c["app"].create_bucket("Q", type="fifo")
            time.sleep(1.5)
            assert c["app"].Q.length() == 0  # the read reconnects on its own
            time.sleep(1.5)
            # closed as idle before the push: the client sees the close before sending, reconnects
            # and sends the push once (a write whose answer is lost is never resent)
            c["app"].Q.push({"n": 1})
            c["app"].Q.push({"n": 2})
            assert c["app"].Q.list() == [{"n": 1}, {"n": 2}]
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
        closed = re.search(r'hoarddb_server_connections_rejected_total\{reason="idle_timeout"\} (\S+)', text)
        assert float(closed.group(1)) >= 2


def test_max_connections(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True, max_connections=2) as server:
        a, b = hoarddb.connect(server.url()), hoarddb.connect(server.url())
        with pytest.raises(ConnectionError_, match="max_connections"):
            hoarddb.connect(server.url())
        a.close()
        time.sleep(0.2)
        hoarddb.connect(server.url()).close()
        b.close()


def test_client_timeout_and_cut_connection_through_a_proxy(server):
    with FaultProxy("127.0.0.1", server.port) as proxy:
        c = hoarddb.connect(f"hoarddb://127.0.0.1:{proxy.port}/?insecure=true&timeout=0.5")
        assert c["fuzz"].Q.length() == 0
        proxy.stall()
        started = time.monotonic()
        with pytest.raises(HoardTimeoutError, match="timeout"):
            c["fuzz"].Q.length()
        assert 0.4 < time.monotonic() - started < 3
        proxy.resume()
        assert c["fuzz"].Q.length() == 0  # reconnected
        proxy.cut()
        assert c["fuzz"].Q.length() == 0  # a read retries once on a dead connection
        proxy.cut()
        with pytest.raises(ConnectionError_, match="lost"):
            c["fuzz"].Q.push({"n": 1})
        assert c["fuzz"].Q.peek() in (None, {"n": 1})
        c.close()


def test_metrics_and_healthz(server):
    good_client_works(server)
    base = f"http://127.0.0.1:{server.metrics_port}"
    text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    for name in ("hoarddb_server_requests_total{op=\"push\"}", "hoarddb_server_errors_total",
                 "hoarddb_server_request_seconds_bucket", "hoarddb_server_open_connections",
                 "hoarddb_server_received_bytes_total", "hoarddb_server_sent_bytes_total",
                 "hoarddb_ttl_sweep_documents_total", "hoarddb_ttl_backlog_estimate", "hoarddb_indexes{state=\"ready\"}"):
        assert name in text, name
    assert urllib.request.urlopen(base + "/healthz", timeout=5).read() == b"ok\n"


def _send_until_stalled(sock, data: bytes, patience: float = 3.0) -> int:
    """Send without blocking until all is sent or the server has taken nothing for ``patience`` s."""
    sock.setblocking(False)
    view, pos, last = memoryview(data), 0, time.monotonic()
    while pos < len(view) and time.monotonic() - last < patience:
        try:
            n = sock.send(view[pos:pos + 65536])
        except BlockingIOError:
            time.sleep(0.01)
            continue
        pos, last = pos + n, time.monotonic()
    return pos


def _server_buffers(server) -> tuple[int, int]:
    """The largest unsent answers of a connection, and the most upload bytes one holds."""
    def look():
        conns = list(server.server.connections)
        return (max((c.transport.get_write_buffer_size() for c in conns), default=0),
                max((sum(len(b) for u in c.uploads.values() for b in list(u._chunks)) for c in conns), default=0))
    return server.call(look)


def test_answers_the_protocol_gives_itself_stop_reading_when_unread(tmp_path):
    """A client that sends hellos (each refused with PROTOCOL_ERROR, answered by the protocol
    itself, not queued) and never reads holds at most about write_buffer bytes of answers:
    the server stops reading it. It used to read on and buffer every answer."""
    limit = 256 * 1024
    with ServerThread(tmp_path / "data", insecure=True, write_buffer=limit) as server:
        with hoarddb.connect(server.url()) as c:
            c["fuzz"].create_bucket("Q", type="fifo")
        raw = RawConnection("127.0.0.1", server.port, timeout=10)
        try:
            raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            raw.hello()
            flood = encode({"id": 1, "op": "hello", "protocol": 1}) * 200_000  # ~8 MB, ~36 MB of refusals
            sent = _send_until_stalled(raw.sock, flood)
            assert sent < len(flood), "the server read everything a client that never reads sent"
            buffered, _ = _server_buffers(server)
            assert buffered <= limit + 2 * 1024 * 1024  # write_buffer, plus the answers of one read
            good_client_works(server)
        finally:
            raw.close()
        good_client_works(server)


def test_a_connection_that_has_not_logged_in_cannot_announce_a_big_message(server):
    with RawConnection("127.0.0.1", server.port, timeout=30) as raw:
        raw.send(struct.pack("<i", 8 * 1024 * 1024) + b"\x00" * 64)
        answer = raw.recv_doc()  # at once, not the handshake timeout's TIMEOUT
        assert answer["codeName"] == "PROTOCOL_ERROR" and "logged in" in answer["message"]
        assert raw.recv_doc() is None
    good_client_works(server)


def test_pipelined_uploads_hold_bounded_memory(tmp_path):
    """Ten uploads pipelined, the chunks of nine sent while the first waits for its own: the
    server holds about UPLOAD_BUFFER_BYTES of them, not all (3 chunks an upload, of any size,
    used to pass under the four-chunk limit)."""
    upload_buffer = 4 * 1024 * 1024  # connection.UPLOAD_BUFFER_BYTES
    # The first upload waits for chunks that never come, and the others wait behind it (a
    # connection's requests run in order), so their chunks can only be buffered. Its wait
    # must outlast the sender's patience: an idle_timeout as short as that patience (3 s)
    # ended it first now and then, and the rest was then taken as fast as it came. (Not much
    # longer: the stop at the end waits for it, as the server reads nothing more from a
    # connection whose reading is paused, its close included.)
    with ServerThread(tmp_path / "data", insecure=True, idle_timeout=10) as server:
        with hoarddb.connect(server.url()) as c:
            c["app"].create_bucket("Files", type="blob")
        raw = RawConnection("127.0.0.1", server.port, timeout=10)
        try:
            raw.hello()
            out = [encode({"id": 100 + i, "op": "put", "db": "app", "bucket": "Files", "upload": True, "args": {}})
                   for i in range(10)]
            big = b"x" * (2 * 1024 * 1024)
            out += [encode({"id": 100 + i, "op": "chunk", "data": big}) for i in range(1, 10) for _ in range(3)]
            data = b"".join(out)
            sent = _send_until_stalled(raw.sock, data)
            assert sent < len(data)
            _, held = _server_buffers(server)
            assert held <= upload_buffer + len(big)
        finally:
            raw.close()
        good_client_works_after(server, "app")


def good_client_works_after(server, db) -> None:
    with hoarddb.connect(server.url(), timeout=10) as c:
        c[db].create_bucket("After", type="fifo")
        c[db].After.push({"ok": True})
        assert c[db].After.pop() == {"ok": True}
        assert c[db].Files.length() == 0  # no upload was stored


def test_the_metrics_endpoint_does_not_wait_forever_for_a_request(server):
    """A client that trickles header lines (slowloris) or sends endless ones is dropped; the
    endpoint goes on answering others. Each line used to get a fresh 5 s, without end."""
    slow = socket.create_connection(("127.0.0.1", server.metrics_port), timeout=30)
    slow.sendall(b"GET /metrics HTTP/1.0\r\n")
    endless = socket.create_connection(("127.0.0.1", server.metrics_port), timeout=30)
    endless.sendall(b"GET /metrics HTTP/1.0\r\n" + b"X-Pad: y\r\n" * 1000)
    try:
        closed, deadline = False, time.monotonic() + 60
        slow.settimeout(0.5)
        while not closed and time.monotonic() < deadline:
            try:
                slow.sendall(b"X-Slow: y\r\n")  # a line every half second
                closed = slow.recv(65536) == b""
            except socket.timeout:
                pass
            except OSError:
                closed = True
        assert closed, "a client trickling headers kept the metrics endpoint's connection for a minute"
        assert endless.recv(65536) == b""  # closed without an answer
    finally:
        endless.close()
        slow.close()
    base = f"http://127.0.0.1:{server.metrics_port}"
    assert urllib.request.urlopen(base + "/healthz", timeout=10).read() == b"ok\n"


@pytest.mark.parametrize("data", [None, "text", 7, {"a": 1}])
def test_a_chunk_that_is_not_binary_fails_its_upload_once_and_the_connection_goes_on(server, data):
    """The put of an upload whose chunk is refused is answered, once, with why; nothing is stored,
    and the connection answers its next request (it used to wait out the upload forever)."""
    with hoarddb.connect(server.url()) as c:
        if "B" not in c["fuzz"].buckets():
            c["fuzz"].create_bucket("B", type="blob")
        before = c["fuzz"].B.length()
    raw = RawConnection("127.0.0.1", server.port, timeout=10)
    try:
        raw.hello()
        raw.send_doc({"id": 5, "op": "put", "db": "fuzz", "bucket": "B", "upload": True, "args": {}})
        raw.send_doc({"id": 5, "op": "chunk", "data": b"x" * 100})
        raw.send_doc({"id": 5, "op": "chunk", "data": data})
        answer = raw.recv_doc()
        assert answer["id"] == 5 and answer["codeName"] == "PROTOCOL_ERROR", answer
        assert "must be binary" in answer["message"]
        raw.send_doc({"id": 6, "op": "length", "db": "fuzz", "bucket": "B", "args": {}})
        assert raw.recv_doc() == {"id": 6, "ok": 1, "result": before}  # the next one, not a second answer to 5
    finally:
        raw.close()
