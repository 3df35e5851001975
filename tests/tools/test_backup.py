"""hoarddb backup: a running server copies its data directory while writes go on; each bucket is one moment of it."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main
from hoarddb.errors import BadValueError
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerThread
from hoarddb.tools.check import check
from hoarddb.tools.online import backup


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def server(tmp_path):
    data = tmp_path / "data"
    UserStore(data).add("admin", "admin-password", ["admin"], iterations=4096)
    with ServerThread(data) as s:
        with hoarddb.connect(s.url("admin", "admin-password")) as c:
            db = c["app"]
            db.create_bucket("Users", indices=[{"field": "Email", "unique": True}],
                             store_fields=[{"name": "Files", "type": "blob"}, {"name": "Notes", "type": "lifo"}])
            db.create_bucket("Jobs", type="fifo")
            db.create_bucket("Stack", type="lifo")
            db.create_bucket("Alerts", type="heap")
            db.create_bucket("Photos", type="blob").put(b"\x89PNG" * 1000)
            db.Users.put({"_id_": "u0", "Email": "u0@x"})
            db.Users["u0"].Files.put(b"a file")
            db.Users["u0"].Notes.push({"t": "first"})
            c.create_database("empty")
        yield s


def test_a_backup_taken_under_writes_is_a_moment_of_each_bucket(server, tmp_path):
    stop, rounds = threading.Event(), []

    def writer():
        # each write keeps its bucket's invariant: Users' "last" names the highest document,
        # Jobs and Stack always hold pairs, Alerts as many as Users' documents less one
        with hoarddb.connect(server.url("admin", "admin-password")) as c:
            db, n = c["app"], 1
            while not stop.is_set():
                db.Users.batch_put([{"_id_": f"u{n}", "Email": f"u{n}@x"}, {"_id_": "last", "n": n}])
                db.Jobs.batch_push([{"n": n, "half": 1}, {"n": n, "half": 2}])
                db.Stack.batch_push([{"n": n}, {"n": n}])
                if n % 3 == 0:
                    db.Jobs.pop(limit=2)
                rounds.append(n)
                n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(rounds) < 5:
            stop.wait(0.01)
        result = run(["backup", "--out", tmp_path / "backup", "--port", server.port, "--tls-ca", server.cert,
                      "--user", "admin", "--password", "admin-password"])
        while len(rounds) < 10:  # writes went on during and after it
            stop.wait(0.01)
    finally:
        stop.set()
        thread.join()
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"backed up 5 bucket(s) into {tmp_path / 'backup'} in ")

    report = check(tmp_path / "backup")
    assert report.ok, report.lines()
    with hoarddb.open(tmp_path / "backup") as c:
        db = c["app"]
        assert c.databases() == ["app", "empty"]
        assert sorted(db.buckets()) == ["Alerts", "Jobs", "Photos", "Stack", "Users"]
        last = db.Users.get("last")["n"] if db.Users.get("last") else 0
        assert db.Users.count() == last + 1 + (1 if last else 0)  # u0..u{last}, and "last" itself
        assert db.Users.get(f"u{last}") is not None and db.Users.get(f"u{last + 1}") is None
        assert db.Jobs.length() % 2 == 0 and db.Stack.length() % 2 == 0
        assert b"".join(db.Photos.stream(db.Photos.list()[0]["_id_"])) == b"\x89PNG" * 1000
        assert [b"".join(db.Users["u0"].Files.stream(i["_id_"])) for i in db.Users["u0"].Files.list()] == [b"a file"]
        assert db.Users["u0"].Notes.pop() == {"t": "first"}
    with hoarddb.connect(server.url("admin", "admin-password")) as c:  # and the server went on serving
        assert c["app"].Users.get("last")["n"] >= 10


def test_a_backup_goes_into_a_new_folder_outside_the_data_directory(server, tmp_path):
    with hoarddb.connect(server.url("admin", "admin-password")) as c:
        with pytest.raises(BadValueError, match="absolute path"):
            backup(c, "relative/folder")
        with pytest.raises(BadValueError, match="inside the data directory"):
            backup(c, server.data / "copy")
        (tmp_path / "full").mkdir()
        (tmp_path / "full" / "x").write_text("x")
        with pytest.raises(BadValueError, match="not an empty folder"):
            backup(c, tmp_path / "full")
    result = run(["backup", "--out", tmp_path / "full", "--port", server.port, "--tls-ca", server.cert,
                  "--user", "admin", "--password", "admin-password"])
    assert result.exit_code == 2 and "BAD_VALUE" in result.output


def test_backup_of_an_embedded_database(tmp_path):
    with hoarddb.open(tmp_path / "data") as c:
        c["app"].create_bucket("T").batch_put([{"_id_": i} for i in range(5)])
    result = run(["backup", "--data", tmp_path / "data", "--out", tmp_path / "copy", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["buckets"] == [{"db": "app", "bucket": "T", "type": "hash"}]
    with hoarddb.open(tmp_path / "copy") as c:
        assert c["app"].T.count() == 5
