"""A removed user, a changed password or changed roles take effect on open connections at once.

Each user under test holds three connections: a blocking client, an asyncio client and a
raw connection that pipelines. Changes come from the CLI while the server runs (another
process rewrites the users file, which the server rereads) or over the wire from an admin.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import hoarddb
import hoarddb.aio
from hoarddb.errors import AuthFailedError, ConnectionError_, HoardError, UnauthorizedError
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerThread
from hoarddb.testing.raw import RawConnection

from .server_users import add_users, login

REPO = Path(__file__).resolve().parents[2]


def wait_for(condition, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.02)


def cli(data, *args, input=None):
    env = dict(os.environ, PYTHONPATH=str(REPO), HOARDDB_PASSWORD="unused-password")
    done = subprocess.run([sys.executable, "-m", "hoarddb.cli", "user", *args, "--data", str(data)],
                          capture_output=True, text=True, env=env, input=input, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def metric(server, sample: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {sample}")


@pytest.fixture
def server(tmp_path):
    data = tmp_path / "data"
    add_users(data)
    with ServerThread(data) as server:
        with hoarddb.connect(server.url("admin", "admin-pw")) as admin:
            admin["app"].create_bucket("Users", type="hash").insert({"_id_": "u1", "Name": "Jane"})
        yield server


class Connections:
    """One user's blocking, asyncio and pipelined connections to a server."""

    def __init__(self, server, user, password):
        self.server, self.user = server, user
        url = server.url(user, password)
        self.blocking = hoarddb.connect(url)
        self.runner = asyncio.Runner()
        self.aio = self.runner.run(hoarddb.aio.connect(url))
        self.raw = RawConnection("127.0.0.1", server.port, tls=True, timeout=30)
        login(self.raw, user, password)
        # each has run a request
        assert self.blocking["app"].Users.get("u1")["Name"] == "Jane"
        assert self.runner.run(self.aio["app"].Users.get("u1"))["Name"] == "Jane"
        self.raw.send_doc({"id": 3, "op": "get", "db": "app", "bucket": "Users", "args": {"key": "u1"}})
        assert self.raw.recv_doc()["result"]["Name"] == "Jane"

    def open_on_server(self) -> list:
        return self.server.call(lambda: [c for c in self.server.server.connections
                                         if c.core.principal is not None and c.core.principal.user == self.user])

    def close(self):
        self.blocking.close()
        self.runner.run(self.aio.close())
        self.runner.close()
        self.raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def pipeline_refused(raw: RawConnection, why: str) -> None:
    """Three pipelined requests (a write among them) are refused with ``why``, then the server
    says goodbye and closes."""
    requests = [{"id": 10, "op": "get", "db": "app", "bucket": "Users", "args": {"key": "u1"}},
                {"id": 11, "op": "put", "db": "app", "bucket": "Users", "args": {"doc": {"_id_": "late"}}},
                {"id": 12, "op": "count", "db": "app", "bucket": "Users", "args": {}}]
    raw.send(b"".join(__import__("hoarddb.values.codec", fromlist=["encode"]).encode(r) for r in requests))
    answers = [raw.recv_doc() for _ in requests]
    assert [a["id"] for a in answers] == [10, 11, 12]
    assert all(a["codeName"] == "UNAUTHORIZED" and why in a["message"] for a in answers), answers
    goodbye = raw.recv_doc()
    assert goodbye["id"] is None and goodbye["codeName"] == "UNAUTHORIZED" and why in goodbye["message"]
    assert raw.recv_doc() is None


def check_ended(conns: Connections, why: str, then) -> None:
    """Each connection's next request is refused naming ``why``, and the server closes it; what
    the clients' next call does after that (they reconnect) is ``then`` (an exception class)."""
    wait_for(lambda: all(c.revoked is not None for c in conns.open_on_server()), "the change to reach the server")
    with pytest.raises(UnauthorizedError, match=why):
        conns.blocking["app"].Users.get("u1")
    with pytest.raises(UnauthorizedError, match=why):
        conns.runner.run(conns.aio["app"].Users.get("u1"))
    pipeline_refused(conns.raw, why)
    wait_for(lambda: not conns.open_on_server(), "the connections to close")
    for call in (lambda: conns.blocking["app"].Users.get("u1"),
                 lambda: conns.runner.run(conns.aio["app"].Users.get("u1"))):
        with pytest.raises(HoardError) as e:
            for _ in range(2):  # the goodbye may be read first, as a lost connection; then a reconnect
                try:
                    call()
                except ConnectionError_:
                    continue
        assert isinstance(e.value, then), e.value


def check_undisturbed(others) -> None:
    assert others["app"].Users.get("u1")["Name"] == "Jane"
    assert others.execute({"op": "whoami"})["result"]["user"] == "reader"


@pytest.mark.parametrize("by", ["cli", "wire"])
def test_a_removed_user_is_refused_and_closed(server, by, caplog):
    caplog.set_level(logging.INFO, "hoarddb.server")
    with Connections(server, "writer", "writer-pw") as conns, \
            hoarddb.connect(server.url("reader", "reader-pw")) as others:
        check_undisturbed(others)
        if by == "cli":
            assert cli(server.data, "remove", "writer") == "removed user writer\n"
        else:
            with hoarddb.connect(server.url("admin", "admin-pw")) as admin:
                admin.execute({"op": "drop_user", "user": "writer"})
            assert all(c.revoked is not None for c in conns.open_on_server())  # at once, no reread to wait for
        check_ended(conns, "user 'writer' was removed", AuthFailedError)
        check_undisturbed(others)
    with hoarddb.connect(server.url("admin", "admin-pw")) as admin:
        assert admin["app"].Users.get("late") is None  # the pipelined write was refused, not run
    ended = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ending connection")]
    assert len(ended) == 3 and all(m.endswith("of user 'writer': the user was removed") for m in ended)
    assert metric(server, 'hoarddb_server_connections_rejected_total{reason="user_removed"}') == 3


@pytest.mark.parametrize("by", ["cli", "wire"])
def test_a_changed_password_ends_the_connections(server, by):
    with Connections(server, "writer", "writer-pw") as conns, \
            hoarddb.connect(server.url("reader", "reader-pw")) as others:
        if by == "cli":
            cli(server.data, "passwd", "writer", "--password-stdin", "--iterations", "4096", input="new-writer-pw\n")
        else:
            from hoarddb.wire import scram

            with hoarddb.connect(server.url("admin", "admin-pw")) as admin:
                admin.execute({"op": "update_user", "user": "writer",
                               "credentials": scram.make_credentials("new-writer-pw", 4096)})
        # the clients reconnect with the password they were given, the old one: refused clearly
        check_ended(conns, "password of user 'writer' was changed", AuthFailedError)
        check_undisturbed(others)
        with hoarddb.connect(server.url("writer", "new-writer-pw")) as again:
            assert again["app"].Users.get("u1")["Name"] == "Jane"
    assert metric(server, 'hoarddb_server_connections_rejected_total{reason="password_changed"}') == 3


def test_changed_roles_apply_at_the_next_request_without_reconnecting(server):
    with Connections(server, "writer", "writer-pw") as conns, \
            hoarddb.connect(server.url("reader", "reader-pw")) as others:
        assert cli(server.data, "role", "writer", "read:app") == "roles of writer: read:app\n"
        wait_for(lambda: all(c.core.principal.roles == [{"role": "read", "db": "app"}]
                             for c in conns.open_on_server()), "the new roles to reach the server")
        with pytest.raises(UnauthorizedError, match="readWrite"):
            conns.blocking["app"].Users.put({"_id_": "b"})
        with pytest.raises(UnauthorizedError, match="readWrite"):
            conns.runner.run(conns.aio["app"].Users.put({"_id_": "a"}))
        conns.raw.send_doc({"id": 20, "op": "put", "db": "app", "bucket": "Users", "args": {"doc": {"_id_": "r"}}})
        assert conns.raw.recv_doc()["codeName"] == "UNAUTHORIZED"
        # reads go on, on the same connections
        assert conns.blocking["app"].Users.get("u1")["Name"] == "Jane"
        assert conns.runner.run(conns.aio["app"].Users.get("u1"))["Name"] == "Jane"
        conns.raw.send_doc({"id": 21, "op": "get", "db": "app", "bucket": "Users", "args": {"key": "u1"}})
        assert conns.raw.recv_doc()["result"]["Name"] == "Jane"
        assert conns.blocking.execute({"op": "whoami"})["result"]["roles"] == ["read:app"]
        # raised again over the wire: allowed at once
        with hoarddb.connect(server.url("admin", "admin-pw")) as admin:
            admin.execute({"op": "update_user", "user": "writer", "roles": ["readWrite:app"]})
        conns.blocking["app"].Users.put({"_id_": "b"})
        conns.runner.run(conns.aio["app"].Users.put({"_id_": "a"}))
        conns.raw.send_doc({"id": 22, "op": "put", "db": "app", "bucket": "Users", "args": {"doc": {"_id_": "r"}}})
        assert conns.raw.recv_doc()["ok"] == 1
        assert len(conns.open_on_server()) == 3  # no reconnect
        check_undisturbed(others)


def test_a_password_changed_during_a_login_fails_that_login(server):
    """The keys are read at auth_start; a login whose password changed before its auth_continue
    would otherwise open a connection with the old password, after the change was applied."""
    from hoarddb.wire import scram

    with RawConnection("127.0.0.1", server.port, tls=True, timeout=30) as raw:
        raw.hello()
        client = scram.ScramClient("writer", "writer-pw")
        raw.send_doc({"id": 1, "op": "auth_start", "mechanism": "SCRAM-SHA-256", "payload": client.first()})
        first = raw.recv_doc()
        UserStore(server.data).set_password("writer", "new-writer-pw", iterations=4096)
        raw.send_doc({"id": 2, "op": "auth_continue", "payload": client.final(first["result"]["payload"])})
        assert raw.recv_doc()["codeName"] == "AUTH_FAILED"
    with hoarddb.connect(server.url("writer", "new-writer-pw")) as c:
        assert c.execute({"op": "whoami"})["result"]["user"] == "writer"
