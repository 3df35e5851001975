"""hoarddb check through a running server: every bucket checked over one moment of it while writes go on."""

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

from ..test_corruption import flip


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


def test_a_sound_server_checks_every_bucket_clean(server):
    result = run(["check", *admin(server)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1, result.output  # no bucket left for a stopped server's check
    assert lines[0].startswith(f"checked 4 bucket(s) of the server at 127.0.0.1:{server.port} while it served, in ")
    assert lines[0].endswith(" s: no problems")
    out = json.loads(run(["check", *admin(server), "--db", "app", "--json"]).output)
    assert out["ok"] is True and out["unchecked"] == []
    assert out["checked"] == [{"db": "app", "bucket": b, "type": t} for b, t in
                              (("Alerts", "heap"), ("Jobs", "fifo"), ("Users", "hash"))]


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


# -- queues and blobs: their files change under a read -------------------------------------------


def queues_and_blobs(c):
    app = c["app"]
    app.create_bucket("Q", type="fifo", segment_size=4096).batch_push([{"n": i, "pad": PAD} for i in range(40)])
    app.create_bucket("S", type="lifo", segment_size=4096).batch_push([{"n": i, "pad": PAD} for i in range(40)])
    b = app.create_bucket("B", type="blob")
    return [b.put(bytes([i]) * 5000) for i in range(5)]


PAD = "x" * 700  # about five entries per 4 KiB segment


def test_pushes_pops_puts_and_deletes_go_on_during_checks_and_none_is_reported(server):
    with hoarddb.connect(server.url("admin", "admin-password")) as c:
        queues_and_blobs(c)
    stop, done, errors = threading.Event(), {"q": 0, "s": 0, "b": 0}, []

    def writer(bucket):
        try:
            with hoarddb.connect(server.url("admin", "admin-password")) as c:
                b = c["app"][bucket]
                while not stop.is_set():
                    if bucket == "B":
                        ids = [b.put(b"y" * 3000) for _ in range(3)]
                        b.delete(ids[0])
                        b.delete(ids[1])
                    else:
                        b.batch_push([{"pad": PAD}] * 6)
                        b.pop(5)
                    done[bucket.lower()] += 1
        except BaseException as exc:  # the test fails with it below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("Q", "S", "B")]
    for t in threads:
        t.start()
    try:
        with hoarddb.connect(server.url("admin", "admin-password")) as c:
            reports = []
            while len(reports) < 5 or min(done.values()) < 10:
                reports.append(check_online(c, db="app"))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert all(r.ok and not r.unchecked for r in reports), [r.lines() for r in reports if not r.ok]
    assert {(b["bucket"], b["type"]) for b in reports[0].checked} >= {("Q", "fifo"), ("S", "lifo"), ("B", "blob")}


def test_a_segment_and_a_blob_damaged_on_disk_while_the_server_runs_are_reported_as_offline(tmp_path):
    from hoarddb.tools.check import check

    data = tmp_path / "data"
    users = UserStore(data)
    users.add("admin", "admin-password", ["admin"], iterations=4096)
    with ServerThread(data) as s:
        with hoarddb.connect(s.url("admin", "admin-password")) as c:
            ids = queues_and_blobs(c)
            for seg in (data / "app" / "Q" / "seg_00002.fifo", data / "app" / "S" / "seg_00002.lifo"):
                flip(seg, seg.stat().st_size // 2)  # sealed segments: not the last, not popped
            flip(data / "app" / "B" / ids[3], 100, 1)
            report = check_online(c, db="app")
            result = run(["check", "--port", s.port, "--tls-ca", s.cert, "--user", "admin", "--password",
                          "admin-password", "--db", "app"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[:-1] == report.lines()
    assert "3 problem(s)" in result.output.splitlines()[-1]
    online = {(p.db, p.bucket, p.file): p.problem for p in report.problems}
    assert set(online) == {("app", "Q", "app/Q/seg_00002.fifo"), ("app", "S", "app/S/seg_00002.lifo"),
                           ("app", "B", f"app/B/{ids[3]}")}
    offline = {(p.db, p.bucket, p.file): p.problem for p in check(data, db="app").problems}
    assert {k: offline.get(k) for k in online} == online  # the same findings, word for word
    assert "fails its checksum" in online[("app", "Q", "app/Q/seg_00002.fifo")]
    assert "is corrupt" in online[("app", "B", f"app/B/{ids[3]}")]
