"""hoarddb check through a running server: LMDB buckets walked in read transactions while writes go on."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main
from hoarddb.errors import UnauthorizedError
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerThread
from hoarddb.tools.online import check_online


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def server(tmp_path):
    data = tmp_path / "data"
    users = UserStore(data)
    users.add("admin", "admin-password", ["admin"], iterations=4096)
    users.add("writer", "writer-password", [{"role": "readWrite", "db": "app"}], iterations=4096)
    with ServerThread(data) as s:
        with hoarddb.connect(s.url("admin", "admin-password")) as c:
            c["app"].create_bucket("Users", indices=[{"field": "Email", "unique": True}]).batch_put(
                [{"_id_": i, "Email": f"{i}@x"} for i in range(12)])
            c["app"].create_bucket("Alerts", type="heap").push({"priority": 3})
            c["app"].create_bucket("Jobs", type="fifo").push({"n": 1})
            c["crm"].create_bucket("Leads", type="btree", key="Score").insert({"Score": 1})
        yield s


def admin(server):
    return ["--port", server.port, "--tls-ca", server.cert, "--user", "admin", "--password", "admin-password"]


def test_a_sound_server_checks_clean_and_names_what_it_cannot_check_online(server):
    result = run(["check", *admin(server)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == ("app.Jobs: not checked online (a fifo bucket's files change under a read); "
                        "hoarddb check DIR checks it with the server stopped")
    assert lines[-1].startswith(f"checked 3 bucket(s) of the server at 127.0.0.1:{server.port} while it served")
    assert lines[-1].endswith(", 1 not checked online: no problems")
    out = json.loads(run(["check", *admin(server), "--db", "app", "--bucket", "Users", "--json"]).output)
    assert out["ok"] is True and out["checked"] == [{"db": "app", "bucket": "Users", "type": "hash"}]


def test_a_wrong_count_is_found_while_the_server_runs(server):
    engine = server.server.engine
    store = engine._store("app", "Users", engine.catalog.bucket("app", "Users"))
    store.kv.write(lambda txn: txn.put(b"Mcount", (999).to_bytes(8, "little")))  # damage, as a bug would leave
    result = run(["check", *admin(server), "--db", "app"])
    assert result.exit_code == 1, result.output
    assert "app.Users: app/Users/kv/data.mdb: its count says 999 entries, and 12 are there" in result.output
    assert "1 problem(s)" in result.output.splitlines()[-1]


def test_writes_go_on_while_the_check_reads(server):
    stop, written = threading.Event(), []

    def writer():
        with hoarddb.connect(server.url("admin", "admin-password")) as c:
            n = 100
            while not stop.is_set():
                c["app"].Users.put({"_id_": n, "Email": f"{n}@x"})
                written.append(n)
                n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with hoarddb.connect(server.url("admin", "admin-password")) as c:
            reports = [check_online(c, db="app") for _ in range(5)]
            while len(written) < 20:  # the writer gets on with it whatever the checks do
                stop.wait(0.01)
    finally:
        stop.set()
        thread.join()
    assert all(r.ok for r in reports), [r.lines() for r in reports]


def test_only_an_admin_may_check_and_a_bucket_needs_its_database(server):
    result = run(["check", "--port", server.port, "--tls-ca", server.cert, "--user", "writer",
                  "--password", "writer-password"])
    assert result.exit_code == 2 and "UNAUTHORIZED" in result.output
    with hoarddb.connect(server.url("writer", "writer-password")) as c, pytest.raises(UnauthorizedError):
        check_online(c)
    result = run(["check", *admin(server), "--bucket", "Users"])
    assert result.exit_code == 2 and "--db too" in result.output


def test_check_of_a_directory_is_unchanged(tmp_path):
    with hoarddb.open(tmp_path / "d") as c:
        c["app"].create_bucket("T").put({"_id_": 1})
    result = run(["check", tmp_path / "d"])
    assert result.exit_code == 0 and "no problems" in result.output
    result = run(["compact"])
    assert result.exit_code == 2 and "Missing argument 'DIR'" in result.output
