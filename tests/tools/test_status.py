"""hoarddb ping and hoarddb status against real servers: insecure, TLS with logins, and none at all."""

from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerThread


def run(args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


@pytest.fixture
def secure(tmp_path):
    """A TLS server with an admin and a user who may read app only; app and crm hold buckets."""
    data = tmp_path / "secure"
    users = UserStore(data)
    users.add("admin", "admin-password", ["admin"], iterations=4096)
    users.add("reader", "reader-password", [{"role": "read", "db": "app"}], iterations=4096)
    with ServerThread(data) as server:
        with hoarddb.connect(server.url("admin", "admin-password")) as c:
            c["app"].create_bucket("Users", indices=[{"field": "Email"}]).batch_put(
                [{"_id_": i, "Email": f"{i}@x"} for i in range(12)])
            c["app"].create_bucket("Jobs", type="fifo").batch_push([{"n": 1}, {"n": 2}])
            c["crm"].create_bucket("Leads", type="btree", key="Score").insert({"Score": 1})
        yield server


def squeezed(output: str) -> str:
    """The output with each run of spaces made one (the label column's width varies)."""
    return "\n".join(" ".join(line.split()) for line in output.splitlines())


def tls(server):
    return ["--port", server.port, "--tls-ca", server.cert]


def test_ping_an_insecure_server(tmp_path):
    with ServerThread(tmp_path / "d", insecure=True) as server:
        result = run(["ping", "--port", server.port, "--insecure"])
        assert result.exit_code == 0, result.output
        assert f"127.0.0.1:{server.port}: hoardDB {hoarddb.__version__} answered in " in result.output
        assert "round trip" in result.output
        out = json.loads(run(["ping", "--port", server.port, "--insecure", "--json"]).output)
        assert out["answered"] is True and out["round_trip"] > 0 and out["server"].startswith("hoardDB")


def test_ping_needs_no_login_but_a_given_login_must_work(secure):
    result = run(["ping", *tls(secure)])
    assert result.exit_code == 0 and "asks for a login" in result.output
    result = run(["ping", *tls(secure), "--user", "admin", "--password", "admin-password"])
    assert result.exit_code == 0 and "round trip" in result.output
    result = run(["ping", *tls(secure), "--user", "admin", "--password", "wrong"])
    assert result.exit_code == 1 and "no answer: AUTH_FAILED" in result.output


def test_ping_with_nothing_listening_exits_1():
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run(["ping", "--port", port, "--insecure"])
    assert result.exit_code == 1 and f"127.0.0.1:{port}: no answer: " in result.output
    assert "cannot connect" in result.output


def test_status_shows_the_server_the_user_and_what_it_holds(secure):
    result = run(["status", *tls(secure), "--user", "admin", "--password", "admin-password"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["server", f"127.0.0.1:{secure.port}", "hoardDB", f"{hoarddb.__version__},",
                                "protocol", "1"]
    assert lines[1].split() == ["security", "TLS"] and lines[2].split() == ["user", "admin", "(admin)"]
    text = squeezed(result.output)
    assert "\ndatabases 2, 3 bucket(s), 15 entries" in text
    assert "\napp: 2 bucket(s) (1 fifo, 1 hash), 14 entries" in text
    assert "\ncrm: 1 bucket(s) (1 btree), 1 entries" in text
    assert "\nindexes 1 ready, 0 building, 0 conflicted, 0 unreadable" in text
    assert "\nttl backlog 0 document(s) past their time" in text

    out = json.loads(run(["status", *tls(secure), "--user", "admin", "--password", "admin-password",
                          "--json"]).output)
    assert out["user"] == "admin" and out["tls"] is True and out["protocol"] == 1
    assert [(d["name"], d["buckets"], d["entries"]) for d in out["databases"]] == [("app", 2, 14), ("crm", 1, 1)]
    assert out["indexes"]["ready"] == 1 and out["ttl_backlog"] == 0


def test_status_shows_a_user_only_what_they_may_see(secure):
    result = run(["status", *tls(secure), "--user", "reader"], env={"HOARDDB_PASSWORD": "reader-password"})
    assert result.exit_code == 0, result.output
    text = squeezed(result.output)
    assert "\nuser reader (read:app)" in text
    assert "\ndatabases 1, 2 bucket(s), 14 entries" in text and "crm" not in text
    assert "note: index and TTL figures need the metrics operation: UNAUTHORIZED" in result.output


def test_status_of_no_server_exits_1_and_says_why():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run(["status", "--port", port, "--insecure"])
    assert result.exit_code == 1 and "cannot connect" in result.output
