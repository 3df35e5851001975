"""Logged-in clients that send slowly: one that never finishes a message is closed (slowloris),
one that is slow but finishes each message in time is served, a request in flight stops the clock."""

from __future__ import annotations

import contextlib
import re
import socket
import time
import urllib.request

import pytest

import hoarddb
from hoarddb.testing import ServerThread
from hoarddb.testing.raw import RawConnection
from hoarddb.values.codec import encode

from .server_users import add_users, login

#: The server's idle_timeout: also how long a message may take to arrive whole.
IDLE = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """TLS and users, as in production; a short idle_timeout."""
    data = tmp_path_factory.mktemp("slow") / "data"
    add_users(data)
    with ServerThread(data, idle_timeout=IDLE) as s:
        with hoarddb.connect(s.url("admin", "admin-pw")) as c:
            c["app"].create_bucket("H", type="hash").insert({"_id_": "k", "n": 1})
            c["app"].create_bucket("Files", type="blob")
        yield s


@contextlib.contextmanager
def logged_in(server):
    with RawConnection("127.0.0.1", server.port, tls=True, timeout=30) as raw:
        login(raw, "admin", "admin-pw")
        yield raw


def rejected(server, reason: str) -> float:
    """hoarddb_server_connections_rejected_total{reason}, as /metrics says (0 if it has no such reason)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    found = re.search(r'hoarddb_server_connections_rejected_total\{reason="%s"\} (\S+)' % reason, text)
    return float(found.group(1)) if found else 0.0


def trickle(raw: RawConnection, data: bytes, every: float, patience: float) -> list:
    """Send ``data`` one byte every ``every`` s, reading meanwhile, until the server closes the
    connection or ``patience`` s pass: the documents it sent, None last if it closed."""
    got: list = []
    deadline = time.monotonic() + patience
    raw.sock.settimeout(every)
    for pos in range(len(data)):
        if time.monotonic() > deadline:
            return got
        try:
            raw.send(data[pos:pos + 1])
        except OSError:  # closed: what it said before is still to read
            raw.sock.settimeout(5)
        try:
            while True:
                got.append(raw.recv_doc())
                if got[-1] is None:
                    return got
        except (socket.timeout, TimeoutError):
            pass
    return got


def pieces(data: bytes, n: int) -> list[bytes]:
    step = -(-len(data) // n)
    return [data[i:i + step] for i in range(0, len(data), step)]


def good_client_works(server) -> None:
    with hoarddb.connect(server.url("admin", "admin-pw"), timeout=10) as c:
        assert c["app"].H.get("k")["n"] == 1


def test_a_message_trickled_a_byte_at_a_time_is_cut_off(server):
    """The header of a 1 MB insert, then a byte every 0.1 s: each byte used to count as
    activity, and the connection held its slot for as long as the client liked."""
    before = rejected(server, "message_timeout")
    message = encode({"id": 5, "op": "insert", "db": "app", "bucket": "H",
                      "args": {"doc": {"_id_": "slow", "pad": "x" * 1_000_000}}})
    with logged_in(server) as raw:
        got = trickle(raw, message, every=0.1, patience=20 * IDLE)
    assert got and got[-1] is None, "the server kept a connection trickling one message for 20 idle_timeouts"
    for notice in got[:-1]:  # the notice may be lost to a reset, if a byte crossed the close
        assert notice["id"] is None and notice["codeName"] == "TIMEOUT" and "idle_timeout" in notice["message"]
    assert rejected(server, "message_timeout") == before + 1
    good_client_works(server)
    with hoarddb.connect(server.url("admin", "admin-pw")) as c:
        assert c["app"].H.get("slow") is None


def test_a_slow_client_that_finishes_each_message_in_time_is_served(server):
    """Messages sent in pieces, each whole well within idle_timeout of its first byte, one
    after the other for several idle_timeouts (a message is nearly always half there)."""
    with logged_in(server) as raw:
        started, n = time.monotonic(), 10
        while time.monotonic() - started < 5 * IDLE:
            n += 1
            for piece in pieces(encode({"id": n, "op": "get", "db": "app", "bucket": "H", "args": {"key": "k"}}), 4):
                raw.send(piece)
                time.sleep(IDLE / 10)
            answer = raw.recv_doc()
            assert answer is not None and answer["id"] == n and answer["result"]["n"] == 1
        big = encode({"id": "big", "op": "insert", "db": "app", "bucket": "H",
                      "args": {"doc": {"_id_": "big", "pad": "y" * 2_000_000}}})
        for piece in pieces(big, 8):
            raw.send(piece)
            time.sleep(IDLE / 20)
        assert raw.recv_doc() == {"id": "big", "ok": 1, "result": "big"}
        # a pause, then a slow message: more than idle_timeout since the last message, but the
        # clock of this one starts at its first byte
        time.sleep(0.8 * IDLE)
        for piece in pieces(encode({"id": "late", "op": "get", "db": "app", "bucket": "H", "args": {"key": "k"}}), 4):
            raw.send(piece)
            time.sleep(0.1 * IDLE)  # 0.4 idle_timeouts from its first byte: room for a busy machine
        answer = raw.recv_doc()
        assert answer is not None and answer["id"] == "late" and answer["result"]["n"] == 1


def test_a_request_in_flight_stops_the_clock(server):
    """A read that runs for 3 idle_timeouts while the client has sent half of its next request:
    the server is busy for this connection, which is not closed; the rest comes after the answer."""
    engine = server.server.engine

    def slow(request, execute=engine.execute):
        if request.get("op") == "find" and request.get("bucket") == "H":
            time.sleep(3 * IDLE)
        return execute(request)

    engine.execute = slow
    try:
        with logged_in(server) as raw:
            raw.send_doc({"id": 20, "op": "find", "db": "app", "bucket": "H", "args": {"filter": {"_id_": "k"}}})
            following = encode({"id": 21, "op": "get", "db": "app", "bucket": "H", "args": {"key": "k"}})
            raw.send(following[:10])
            first = raw.recv_doc()
            assert first is not None and first["id"] == 20 and first["ok"] == 1
            raw.send(following[10:])
            second = raw.recv_doc()
            assert second is not None and second["id"] == 21 and second["result"]["n"] == 1
    finally:
        del engine.execute


def test_a_trickled_upload_chunk_fails_the_upload_then_closes_the_connection(server):
    """An upload has its own timeout (no chunk for idle_timeout): the put is answered TIMEOUT.
    The chunk still trickling is then a message that does not arrive: the connection is
    closed, and counted once, as message_timeout."""
    before = rejected(server, "message_timeout"), rejected(server, "idle_timeout")
    with logged_in(server) as raw:
        raw.send_doc({"id": 30, "op": "put", "db": "app", "bucket": "Files", "upload": True, "args": {}})
        raw.send_doc({"id": 30, "op": "chunk", "data": b"z" * 1000})
        got = trickle(raw, encode({"id": 30, "op": "chunk", "data": b"z" * 100_000, "end": True}),
                      every=0.1, patience=30 * IDLE)
    assert got and got[-1] is None, "the server kept a connection trickling a chunk for 30 idle_timeouts"
    assert got[0]["id"] == 30 and got[0]["codeName"] == "TIMEOUT" and "blob upload" in got[0]["message"]
    assert (rejected(server, "message_timeout"), rejected(server, "idle_timeout")) == (before[0] + 1, before[1])
    with hoarddb.connect(server.url("admin", "admin-pw")) as c:
        assert c["app"].Files.length() == 0


def open_connections(server) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    return float(re.search(r"^hoarddb_server_open_connections (\S+)", text, re.M).group(1))


def test_a_client_that_reads_none_of_its_answers_is_closed_and_cut(server):
    """Gets of a 1 MB document sent and never read: the answers back up past write_buffer and
    the kernel's buffers. The connection used to wait for good (a request in flight keeps it
    from being idle); now it is closed after idle_timeout (send_timeout), and since a close
    first sends what is buffered, which this peer never takes, it is cut CLOSE_GRACE later."""
    with hoarddb.connect(server.url("admin", "admin-pw")) as c:
        c["app"].H.put({"_id_": "big1", "pad": "b" * 1_000_000})
    before, connections = rejected(server, "send_timeout"), open_connections(server)
    with logged_in(server) as raw:
        assert open_connections(server) == connections + 1
        raw.sock.settimeout(30)
        for i in range(40):  # 40 MB of answers
            try:
                raw.send_doc({"id": i, "op": "get", "db": "app", "bucket": "H", "args": {"key": "big1"}})
            except OSError:
                break  # the server stopped reading: the request fills the buffers too
        deadline = time.monotonic() + 30 * IDLE
        while open_connections(server) > connections and time.monotonic() < deadline:
            time.sleep(0.2)
        assert open_connections(server) == connections, "a client that reads nothing kept its connection"
        assert rejected(server, "send_timeout") == before + 1
    good_client_works(server)
