"""Server-wide limits on what clients hold: unfinished messages (receive_budget), and TLS handshakes
counted toward max_connections."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest

import hoarddb
from hoarddb.errors import BadValueError, ConnectionError_
from hoarddb.server.config import ServerConfig
from hoarddb.testing import ServerThread
from hoarddb.testing.raw import RawConnection
from hoarddb.values.codec import encode
from hoarddb.wire.messages import MAX_MESSAGE_SIZE

from .server_users import add_users

MiB = 1 << 20


def wait_for(condition, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.02)


def big_insert(request_id: int, key: str, size: int) -> bytes:
    return encode({"id": request_id, "op": "put", "db": "app", "bucket": "Big",
                   "args": {"doc": {"_id_": key, "data": b"x" * size}}})


def test_unfinished_messages_share_one_budget(tmp_path):
    with ServerThread(tmp_path / "data", insecure=True, receive_budget=MAX_MESSAGE_SIZE) as server:
        with hoarddb.connect(server.url()) as c:
            c["app"].create_bucket("Big", type="hash")
        receiving = lambda: server.call(lambda: server.server.receiving)  # noqa: E731
        with RawConnection("127.0.0.1", server.port, timeout=30) as a, \
                RawConnection("127.0.0.1", server.port, timeout=30) as b:
            a.hello()
            b.hello()
            first = big_insert(5, "a", 12 * MiB)
            a.send(first[:10 * MiB])  # a holds 10 MiB of an unfinished message
            wait_for(lambda: receiving() >= 10 * MiB, "a's 10 MiB")
            # b: a whole request, then the start of a message that would pass the budget
            second = big_insert(7, "b", 8 * MiB)
            b.send(encode({"id": 6, "op": "length", "db": "app", "bucket": "Big"}) + second[:7 * MiB])
            assert b.recv_doc() == {"id": 6, "ok": 1, "result": 0}  # what came before is answered
            goodbye = b.recv_doc()
            assert goodbye["id"] is None and goodbye["codeName"] == "CONNECTION_ERROR"
            assert "receive_budget" in goodbye["message"] and "was not run" in goodbye["message"]
            assert b.recv_doc() is None  # closed
            wait_for(lambda: receiving() < 11 * MiB, "b's bytes let go")
            a.send(first[10 * MiB:])  # a, within the budget, is served
            assert a.recv_doc() == {"id": 5, "ok": 1, "result": "a"}
        wait_for(lambda: receiving() == 0, "nothing held")
        with hoarddb.connect(server.url()) as c:  # b's message was not run
            assert c["app"].Big.get("b") is None and len(c["app"].Big.get("a")["data"]) == 12 * MiB
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read()
        assert b'hoarddb_server_connections_rejected_total{reason="receive_budget"} 1.0' in text


def test_receive_budget_holds_at_least_one_message():
    with pytest.raises(BadValueError, match="receive_budget"):
        ServerConfig(data="d", receive_budget=MAX_MESSAGE_SIZE - 1).check()


def test_connections_in_their_tls_handshake_count_toward_max_connections(tmp_path):
    """Regression: connections that had not finished their TLS handshake were not counted, so a
    client could hold any number of them beside max_connections open ones."""
    data = tmp_path / "data"
    add_users(data)
    with ServerThread(data, max_connections=2) as server:
        url = server.url("writer", "writer-pw")
        stuck = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]  # no ClientHello
        try:
            wait_for(lambda: server.call(lambda: len(server.server.handshaking)) == 2, "two handshakes")
            with pytest.raises(ConnectionError_, match="max_connections"):
                hoarddb.connect(url).execute({"op": "whoami"})
        finally:
            for sock in stuck:
                sock.close()
        wait_for(lambda: server.call(lambda: len(server.server.handshaking)) == 0, "the handshakes to end")
        with hoarddb.connect(url) as first, hoarddb.connect(url) as second:
            assert first.execute({"op": "whoami"})["result"]["user"] == "writer"
            assert second.execute({"op": "whoami"})["result"]["user"] == "writer"
            with pytest.raises(ConnectionError_, match="max_connections"):
                hoarddb.connect(url).execute({"op": "whoami"})
