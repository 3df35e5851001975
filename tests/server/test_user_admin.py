"""Managing users: a role change (CLI and set_roles), hints that name commands that do what they say,
a minimum password length, and refusals that suggest nothing wrong."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hoarddb
from hoarddb.errors import BadValueError, DatabaseNotFoundError, InvalidArgumentError, NotFoundError, UnauthorizedError, UnknownOptionError
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerThread

from .server_users import add_users

REPO = Path(__file__).resolve().parents[2]


def hoarddb_cli(*args, input=None, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("HOARDDB_")}
    full.update(PYTHONPATH=str(REPO), **env)
    return subprocess.run([sys.executable, "-m", "hoarddb.cli", *args], capture_output=True, text=True,
                          env=full, input=input, timeout=60)


def wait_for(condition, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("admin") / "data"
    add_users(data)
    with ServerThread(data) as server:
        with hoarddb.connect(server.url("admin", "admin-pw")) as admin:
            admin["app"].create_bucket("Users", type="hash").insert({"_id_": "u1"})
        yield server


def test_the_unauthorized_hint_names_the_role_command_and_it_works(server):
    UserStore(server.data).add("carol", "carol-password", ["read:app"], iterations=4096)
    with hoarddb.connect(server.url("carol", "carol-password")) as carol:
        with pytest.raises(UnauthorizedError) as refused:
            carol["app"].Users.put({"_id_": "c1"})
        assert "`hoarddb user role carol ROLE...`" in refused.value.message
        # do what the hint says, while the server runs: the open connection may write at its next request
        done = hoarddb_cli("user", "role", "carol", "readWrite:app", "read:reports", "--data", str(server.data))
        assert done.returncode == 0, done.stderr
        assert done.stdout == "roles of carol: readWrite:app, read:reports\n"
        wait_for(lambda: carol.execute({"op": "whoami"})["result"]["roles"] == ["readWrite:app", "read:reports"],
                 "the roles to reach the connection")
        carol["app"].Users.put({"_id_": "c1"})
        done = hoarddb_cli("user", "role", "carol", "none", "--data", str(server.data))
        assert done.stdout == "roles of carol: none\n"
        wait_for(lambda: carol.execute({"op": "whoami"})["result"]["roles"] == [], "no roles")
        with pytest.raises(UnauthorizedError, match="has no roles"):
            carol["app"].Users.get("u1")


def test_the_role_command_refuses_what_it_cannot_do(server):
    data = str(server.data)
    unknown = hoarddb_cli("user", "role", "carol2", "read:app", "--data", data)
    assert unknown.returncode == 1 and "no user 'carol2'" in unknown.stderr and "hoarddb user list" in unknown.stderr
    bad = hoarddb_cli("user", "role", "reader", "superuser", "--data", data)
    assert bad.returncode == 1 and "unknown role 'superuser'" in bad.stderr
    assert UserStore(server.data).get("reader")["roles"] == [{"role": "read", "db": "app"}]  # unchanged
    assert hoarddb_cli("user", "role", "reader", "--data", data).returncode == 2  # a role is needed ("none": none)


def test_set_roles_over_the_wire(server):
    UserStore(server.data).add("dave", "dave-password", ["read:app"], iterations=4096)
    with hoarddb.connect(server.url("dave", "dave-password")) as dave, \
            hoarddb.connect(server.url("admin", "admin-pw")) as admin:
        with pytest.raises(UnauthorizedError, match="admin"):
            dave.execute({"op": "set_roles", "user": "dave", "roles": ["admin"]})
        answer = admin.execute({"op": "set_roles", "user": "dave", "roles": ["readWrite:app"]})
        assert answer["result"] == {"name": "dave", "roles": ["readWrite:app"]}
        dave["app"].Users.put({"_id_": "d1"})  # at once: no reread to wait for, no reconnect
        with pytest.raises(InvalidArgumentError, match="'roles' must be a list"):
            admin.execute({"op": "set_roles", "user": "dave", "roles": "admin"})
        with pytest.raises(BadValueError, match="set_roles needs 'roles'"):
            admin.execute({"op": "set_roles", "user": "dave"})
        with pytest.raises(UnknownOptionError, match="unknown role"):
            admin.execute({"op": "set_roles", "user": "dave", "roles": ["root"]})
        with pytest.raises(NotFoundError):
            admin.execute({"op": "set_roles", "user": "nobody", "roles": []})
        assert {"name": "dave", "roles": ["readWrite:app"]} in admin.execute({"op": "list_users"})["result"]


def test_adding_a_user_that_exists_names_the_commands_that_change_it(tmp_path):
    data = str(tmp_path / "data")
    assert hoarddb_cli("user", "add", "ann", "--role", "read:app", "--data", data, "--iterations", "4096",
                       HOARDDB_PASSWORD="ann-password").returncode == 0
    again = hoarddb_cli("user", "add", "ann", "--role", "admin", "--data", data, HOARDDB_PASSWORD="x")
    assert again.returncode == 1
    assert "`hoarddb user passwd ann`" in again.stderr and "`hoarddb user role ann ROLE...`" in again.stderr
    # (refused before the password: "x" would be too short, and that is not what it says)
    assert "characters" not in again.stderr


def test_a_short_password_is_refused_with_the_reason(tmp_path):
    data = str(tmp_path / "data")
    short = hoarddb_cli("user", "add", "bob", "--role", "read:app", "--data", data, HOARDDB_PASSWORD="abc12")
    assert short.returncode == 1
    assert "5 characters, fewer than the 8 required" in short.stderr and "HOARDDB_MIN_PASSWORD_LENGTH" in short.stderr
    assert not (tmp_path / "data" / "_users" / "users.bson").exists() or UserStore(data).get("bob") is None
    ok = hoarddb_cli("user", "add", "bob", "--role", "read:app", "--data", data, "--iterations", "4096",
                     HOARDDB_PASSWORD="abc12", HOARDDB_MIN_PASSWORD_LENGTH="4")
    assert ok.returncode == 0, ok.stderr
    passwd = hoarddb_cli("user", "passwd", "bob", "--password-stdin", "--data", data, input="1234567\n")
    assert passwd.returncode == 1 and "7 characters, fewer than the 8 required" in passwd.stderr


def test_a_short_first_admin_password_stops_the_start(tmp_path, monkeypatch):
    monkeypatch.setenv("HOARDDB_ADMIN_PASSWORD", "admin")
    with pytest.raises(BadValueError, match="HOARDDB_ADMIN_PASSWORD.*5 characters, fewer than the 8"):
        ServerThread(tmp_path / "data").start()
    assert not UserStore(tmp_path / "data").users()
    with ServerThread(tmp_path / "data", min_password_length=5):
        assert [u["name"] for u in UserStore(tmp_path / "data").users()] == ["admin"]


def test_dropping_a_missing_database_does_not_suggest_creating_it(tmp_path):
    with hoarddb.open(tmp_path / "db") as db:
        with pytest.raises(DatabaseNotFoundError) as missing:
            db.drop_database("nope")
    assert "create" not in missing.value.message and "nothing to drop" in missing.value.message
    shell = hoarddb_cli("shell", "--data", str(tmp_path / "db"), "-e", "drop database nope")
    out = shell.stdout + shell.stderr
    assert "nothing to drop" in out and "show databases" in out and "create" not in out
