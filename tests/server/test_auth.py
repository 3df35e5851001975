"""Users and roles over the wire: authenticate before anything, each role allows what it says and no more."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hoarddb
from hoarddb.errors import AuthFailedError, NotFoundError, UnauthorizedError
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerThread
from hoarddb.testing.raw import RawConnection
from hoarddb.wire import scram

from .server_users import login

REPO = Path(__file__).resolve().parents[2]


def connect(server, user, password):
    return hoarddb.connect(server.url(user, password))


@pytest.fixture(scope="module")
def seeded(secure_server):
    with connect(secure_server, "admin", "admin-pw") as admin:
        admin["app"].create_bucket("Users", type="hash").insert({"_id_": "u1", "Name": "Jane"})
        admin["other"].create_bucket("Secrets", type="hash").insert({"_id_": "s1"})
    return secure_server


def test_read_user_reads_and_cannot_write(seeded):
    with connect(seeded, "reader", "reader-pw") as c:
        assert c["app"].Users.get("u1")["Name"] == "Jane"
        assert c["app"].Users.count() >= 1
        assert c["app"].Users.describe()["type"] == "hash"
        with pytest.raises(UnauthorizedError, match="readWrite") as e:
            c["app"].Users.insert({"_id_": "u2"})
        assert e.value.code == 28
        with pytest.raises(UnauthorizedError):
            c["app"].create_bucket("New")
        assert c["app"].Users.get("u2") is None


def test_user_of_one_database_cannot_read_another(seeded):
    with connect(seeded, "writer", "writer-pw") as c:
        c["app"].Users.put({"_id_": "w1"})
        with pytest.raises(UnauthorizedError, match="'other'"):
            c["other"].Secrets.get("s1")
        with pytest.raises(UnauthorizedError):
            c["other"].buckets()
        assert c.databases() == ["app"]
    with connect(seeded, "other", "other-pw") as c:
        assert c.databases() == ["other"]
        with pytest.raises(UnauthorizedError):
            c["app"].Users.get("u1")


def test_db_admin_manages_buckets_not_documents(seeded):
    with connect(seeded, "dba", "dba-pw") as c:
        c["app"].create_bucket("Tmp", type="fifo")
        assert "Tmp" in c["app"].buckets()
        with pytest.raises(UnauthorizedError):
            c["app"].Users.get("u1")
        c["app"].drop_bucket("Tmp")
        with pytest.raises(UnauthorizedError, match="admin"):
            c.metrics()


def test_admin_only_operations(seeded):
    with connect(seeded, "writer", "writer-pw") as c:
        for op in ({"op": "list_users"}, {"op": "sweep_ttl"}, {"op": "whatever"}):
            with pytest.raises(UnauthorizedError):
                c.execute(op)
        assert c.execute({"op": "whoami"})["result"] == {"user": "writer", "roles": ["readWrite:app"]}
    with connect(seeded, "admin", "admin-pw") as c:
        assert {u["name"] for u in c.execute({"op": "list_users"})["result"]} >= {"admin", "reader"}
        assert "hoarddb_indexes{state=\"ready\"}" in c.metrics()


def test_admin_manages_users_over_the_wire(seeded):
    with connect(seeded, "admin", "admin-pw") as c:
        c.execute({"op": "create_user", "user": "remote", "roles": ["read:app"],
                   "credentials": scram.make_credentials("remote-pw", 4096)})
    with connect(seeded, "remote", "remote-pw") as r:
        assert r["app"].Users.get("u1")
    with connect(seeded, "admin", "admin-pw") as c:
        c.execute({"op": "update_user", "user": "remote", "roles": ["readWrite:app"]})
        c.execute({"op": "drop_user", "user": "remote"})
        with pytest.raises(NotFoundError):
            c.execute({"op": "drop_user", "user": "remote"})
    with pytest.raises(AuthFailedError):
        connect(seeded, "remote", "remote-pw")


def test_failed_login_is_delayed_and_says_nothing(seeded):
    messages = []
    for user, password in (("admin", "wrong"), ("nobody", "admin-pw")):
        started = time.monotonic()
        with pytest.raises(AuthFailedError) as e:
            connect(seeded, user, password)
        assert time.monotonic() - started >= 0.3
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "wrong" not in messages[0].replace("wrong password", "")


def test_authenticate_before_anything(seeded):
    port = seeded.port
    with RawConnection("127.0.0.1", port, tls=True) as raw:
        raw.send_doc({"id": 1, "op": "list_databases"})
        assert raw.recv_doc()["codeName"] == "PROTOCOL_ERROR" and raw.recv_doc() is None
    with RawConnection("127.0.0.1", port, tls=True) as raw:
        assert raw.hello()["result"]["auth"] == ["SCRAM-SHA-256"]
        for i, op in enumerate(["list_databases", "insert", "drop_bucket", "create_user", "chunk", "metrics"]):
            raw.send_doc({"id": 10 + i, "op": op, "db": "app", "bucket": "Users", "args": {"doc": {"_id_": "x"}}})
            assert raw.recv_doc()["codeName"] == "UNAUTHORIZED"
    with connect(seeded, "admin", "admin-pw") as c:
        assert c["app"].Users.get("x") is None and "Users" in c["app"].buckets()


def test_a_refused_upload_does_not_hold_the_connection(seeded):
    """A put with upload: true that the user may not run is refused; the chunks the client
    sends after it are dropped and the connection goes on (it used to stop reading for good
    once four chunks were buffered for an upload that would never run)."""
    with connect(seeded, "admin", "admin-pw") as admin:
        admin["app"].create_bucket("Files", type="blob")
    with RawConnection("127.0.0.1", seeded.port, tls=True, timeout=30) as raw:
        login(raw, "reader", "reader-pw")
        raw.send_doc({"id": 10, "op": "put", "db": "app", "bucket": "Files", "upload": True, "args": {}})
        assert raw.recv_doc()["codeName"] == "UNAUTHORIZED"
        for _ in range(8):
            raw.send_doc({"id": 10, "op": "chunk", "data": b"y" * 1000})
        raw.send_doc({"id": 10, "op": "chunk", "data": b"", "end": True})
        raw.send_doc({"id": 11, "op": "get", "db": "app", "bucket": "Users", "args": {"key": "u1"}})
        assert raw.recv_doc()["result"]["Name"] == "Jane"
        assert all(not c.uploads for c in seeded.call(lambda: list(seeded.server.connections)))
    with connect(seeded, "admin", "admin-pw") as admin:
        assert admin["app"].Files.length() == 0


def test_cli_user_management(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), HOARDDB_PASSWORD="cli-secret-pw")
    data = str(tmp_path / "data")

    def run(*args, input=None):
        return subprocess.run([sys.executable, "-m", "hoarddb.cli", "user", *args, "--data", data],
                              capture_output=True, text=True, env=env, input=input, timeout=60)

    added = run("add", "ann", "--role", "readWrite:app", "--role", "read:other", "--iterations", "4096")
    assert added.returncode == 0, added.stderr
    assert "added user ann (readWrite:app, read:other)" in added.stdout
    assert run("add", "ann", "--role", "admin").returncode == 1
    assert "unknown role" in run("add", "bob", "--role", "superuser").stderr
    assert run("list").stdout.strip() == "ann\treadWrite:app, read:other"
    raw = (tmp_path / "data" / "_users" / "users.bson").read_bytes()
    assert b"cli-secret-pw" not in raw
    assert run("passwd", "ann", "--password-stdin", "--iterations", "4096", input="new-password\n").returncode == 0
    store = UserStore(data)
    creds = store.get("ann")["credentials"]
    assert creds == scram.make_credentials("new-password", 4096, creds["salt"])
    assert run("remove", "ann").returncode == 0
    assert run("remove", "ann").returncode == 1 and run("list").stdout == ""


def test_admin_from_environment_at_first_start(tmp_path, monkeypatch):
    monkeypatch.setenv("HOARDDB_ADMIN_PASSWORD", "first-admin-pw")
    with ServerThread(tmp_path / "data") as server:
        with connect(server, "admin", "first-admin-pw") as c:
            assert c.execute({"op": "whoami"})["result"]["roles"] == ["admin"]
    monkeypatch.setenv("HOARDDB_ADMIN_PASSWORD", "changed")
    with ServerThread(tmp_path / "data") as server:  # only at the first start
        with pytest.raises(AuthFailedError):
            connect(server, "admin", "changed")


def test_users_added_while_running_can_log_in(secure_server):
    UserStore(secure_server.data).add("late", "late-pw", ["read:app"], iterations=4096)
    with connect(secure_server, "late", "late-pw") as c:
        assert c.execute({"op": "whoami"})["result"]["user"] == "late"
