"""Failed logins are limited: per connection, per user name and per client address; each is logged and counted.

Clients come from several loopback addresses (127.0.0.2, 127.0.0.3...: Linux routes all
of 127/8 to lo), so that "another client's address" is real.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
import urllib.request

import pytest

from hoarddb.testing import ServerThread
from hoarddb.testing.raw import RawConnection
from hoarddb.wire import scram
from hoarddb.wire.framing import FrameReader

from .server_users import add_users


class Client(RawConnection):
    """A raw TLS connection from a chosen loopback address."""

    def __init__(self, port: int, source: str = "127.0.0.1"):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        self.sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        self._reader = FrameReader()
        self.hello()
        self._ids = 10

    def attempt(self, user: str, password: str) -> dict | None:
        """One SCRAM login: its last answer (ok 1 when it worked), or None if the server closed."""
        client = scram.ScramClient(user, password)
        self._ids += 2
        self.send_doc({"id": self._ids, "op": "auth_start", "mechanism": "SCRAM-SHA-256", "payload": client.first()})
        first = self.recv_doc()
        if first is None or first["ok"] != 1:
            return first
        self.send_doc({"id": self._ids + 1, "op": "auth_continue", "payload": client.final(first["result"]["payload"])})
        return self.recv_doc()


def login(server, user, password, source="127.0.0.1") -> dict | None:
    with Client(server.port, source) as c:
        return c.attempt(user, password)


def metric(server, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def start(tmp_path, **config) -> ServerThread:
    data = tmp_path / "data"
    add_users(data)
    config.setdefault("auth_failure_delay", 0.05)
    return ServerThread(data, **config)


def test_a_connection_is_closed_after_three_failed_logins(tmp_path, caplog):
    """Regression: the server's sweep reset the connection's failure count every second to feed
    a metric, so with failures answered after a delay it never reached 3 (9 guesses per connection)."""
    caplog.set_level(logging.INFO, "hoarddb.server")
    with start(tmp_path, auth_failure_delay=0.4) as server, Client(server.port) as c:
        for _ in range(3):
            answer = c.attempt("writer", "wrong")
            assert answer["codeName"] == "AUTH_FAILED"
        assert c.attempt("writer", "writer-pw") is None  # closed: no fourth guess
        assert metric(server, 'hoarddb_server_auth_failures_total{reason="wrong_password"}') == 3
        failures = [r.getMessage() for r in caplog.records if "failed login" in r.getMessage()]
        assert len(failures) == 3
        assert failures[0].startswith("failed login on 127.0.0.1:") and "user 'writer', wrong password" in failures[0]


def test_a_user_is_locked_out_across_connections_and_others_are_not(tmp_path, caplog):
    caplog.set_level(logging.INFO, "hoarddb.server")
    with start(tmp_path, auth_user_failures=3, auth_lockout=1.5) as server:
        for _ in range(3):  # three connections, one guess each
            assert login(server, "writer", "guess")["codeName"] == "AUTH_FAILED"
        refused = login(server, "writer", "writer-pw")
        assert refused["codeName"] == "AUTH_FAILED"
        assert "too many failed logins to user 'writer'" in refused["message"]
        assert "whatever the password" in refused["message"]
        # another user, from the same address, is not held by writer's failures
        assert login(server, "reader", "reader-pw")["ok"] == 1
        assert metric(server, 'hoarddb_server_auth_failures_total{reason="locked_user"}') == 1
        assert metric(server, 'hoarddb_server_auth_failures_total{reason="wrong_password"}') == 3
        assert any("user 'writer' locked out for 1.5 s" in r.getMessage() for r in caplog.records)
        # the lockout ends: the right password works again
        deadline = time.monotonic() + 30
        while (answer := login(server, "writer", "writer-pw"))["ok"] != 1:
            assert "too many failed logins" in answer["message"] and time.monotonic() < deadline
            time.sleep(0.2)


def test_unknown_names_are_locked_out_like_real_ones(tmp_path):
    """A lockout must not tell which names exist."""
    with start(tmp_path, auth_user_failures=2) as server:
        for name in ("writer", "ghost"):
            for _ in range(2):
                login(server, name, "guess")
        messages = [login(server, name, "guess")["message"] for name in ("writer", "ghost")]
        assert messages[0] == messages[1].replace("'ghost'", "'writer'")
        assert metric(server, 'hoarddb_server_auth_failures_total{reason="unknown_user"}') == 2


def test_an_address_is_locked_out_except_for_users_known_there(tmp_path):
    with start(tmp_path, auth_user_failures=0, auth_address_failures=4) as server:
        assert login(server, "reader", "reader-pw", "127.0.0.2")["ok"] == 1  # reader is known at .2
        for name in ("admin", "dba", "other", "nobody"):  # a guesser spraying one password over names
            assert login(server, name, "Summer2026", "127.0.0.2")["codeName"] == "AUTH_FAILED"
        refused = login(server, "writer", "writer-pw", "127.0.0.2")
        assert refused["codeName"] == "AUTH_FAILED" and "from 127.0.0.2" in refused["message"]
        assert login(server, "reader", "reader-pw", "127.0.0.2")["ok"] == 1
        assert login(server, "writer", "writer-pw", "127.0.0.3")["ok"] == 1
        assert metric(server, 'hoarddb_server_auth_failures_total{reason="locked_address"}') == 1


def test_lockouts_can_be_turned_off(tmp_path):
    with start(tmp_path, auth_lockout=0) as server:
        for _ in range(8):
            login(server, "writer", "guess")
        assert login(server, "writer", "writer-pw")["ok"] == 1


@pytest.mark.parametrize("option", ["auth_user_failures", "auth_address_failures", "auth_lockout"])
def test_lockout_options_are_checked(option):
    from hoarddb.errors import BadValueError
    from hoarddb.server.config import ServerConfig

    with pytest.raises(BadValueError, match=option):
        ServerConfig(data="d", **{option: -1}).check()


def test_a_login_is_not_held_by_another_users_failures_in_flight(tmp_path):
    """Failed logins are answered after auth_failure_delay (here 30 s, longer than the clients'
    10 s socket timeout): guessers waiting for theirs hold nothing of a correct login to another
    user, from another address or the same one."""
    with start(tmp_path, auth_failure_delay=30) as server:
        guessers = [Client(server.port, "127.0.0.2") for _ in range(4)]
        try:
            for i, guesser in enumerate(guessers):
                client = scram.ScramClient("writer", f"guess-{i}")
                guesser.send_doc({"id": 1, "op": "auth_start", "mechanism": "SCRAM-SHA-256",
                                  "payload": client.first()})
                first = guesser.recv_doc()
                guesser.send_doc({"id": 2, "op": "auth_continue", "payload": client.final(first["result"]["payload"])})
            for source in ("127.0.0.3", "127.0.0.2"):
                assert login(server, "reader", "reader-pw", source)["ok"] == 1  # else a 10 s socket timeout
        finally:
            for guesser in guessers:
                guesser.close()


def test_guesses_sent_in_parallel_stop_at_the_lockout(tmp_path):
    """Each guess is looked at against the lockout when its proof comes, not only at its
    auth_start: a guesser that opens many exchanges at once and then sends every proof gets
    no more guesses than the limit."""
    with start(tmp_path, auth_user_failures=3) as server:
        guessers = [Client(server.port) for _ in range(8)]
        try:
            proofs = []
            for i, guesser in enumerate(guessers):  # every exchange started before any fails
                client = scram.ScramClient("writer", f"guess-{i}")
                guesser.send_doc({"id": 1, "op": "auth_start", "mechanism": "SCRAM-SHA-256",
                                  "payload": client.first()})
                proofs.append(client.final(guesser.recv_doc()["result"]["payload"]))
            for guesser, proof in zip(guessers, proofs):
                guesser.send_doc({"id": 2, "op": "auth_continue", "payload": proof})
            answers = [guesser.recv_doc()["message"] for guesser in guessers]
        finally:
            for guesser in guessers:
                guesser.close()
        assert sum("too many failed logins" in m for m in answers) == 5
        assert metric(server, 'hoarddb_server_auth_failures_total{reason="wrong_password"}') == 3
