"""hoarddb ingest, dump and restore as commands: options, output, exit status, and one real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main
from .toolfiles import offsets, write_bson

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run(args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def test_ingest_a_folder_prints_a_summary_per_bucket(tmp_path):
    write_bson(tmp_path / "dump" / "app" / "users.bson", [{"_id": i} for i in range(5)])
    (tmp_path / "dump" / "app" / "users.metadata.json").write_text(
        '{"indexes": [{"v": 2, "key": {"email": 1}, "name": "email_1", "unique": true}]}')
    result = run(["ingest", tmp_path / "dump" / "app", "--into-db", "app", "--data", tmp_path / "data"])
    assert result.exit_code == 0, result.output
    assert "app.users" in result.output and "loaded 5 document(s) in 1 bucket(s)" in result.output
    assert 'create bucket users { type: hash, indices: [{field: "email", unique: true}] }' in result.output
    with hoarddb.open(tmp_path / "data") as c:
        assert c["app"].users.length() == 5


def test_ingest_skip_exits_1_and_lists_each_refusal(tmp_path):
    raws = write_bson(tmp_path / "e.bson", [{"_id": 1}, {"x": 2}, {"_id": 3}])
    result = run(["ingest", tmp_path / "e.bson", "--into", "app.e", "--on-error", "skip", "--data", tmp_path / "d"])
    assert result.exit_code == 1
    assert f"e.bson: document 2 (byte {offsets(raws)[1]}): NO_KEY" in result.output
    assert "loaded 2 document(s) in 1 bucket(s); 1 not loaded" in result.output


def test_ingest_into_a_fifo_needs_yes_when_not_on_a_terminal(tmp_path):
    write_bson(tmp_path / "log.bson", [{"n": 1}])
    result = run(["ingest", tmp_path / "log.bson", "--into", "app.log", "--type", "fifo", "--data", tmp_path / "d"])
    assert result.exit_code == 2 and "second copy" in result.output and "--yes" in result.output
    result = run(["ingest", tmp_path / "log.bson", "--into", "app.log", "--type", "fifo", "--yes",
                  "--data", tmp_path / "d"])
    assert result.exit_code == 0, result.output


def test_refusals_before_writing_exit_2(tmp_path):
    write_bson(tmp_path / "a.b.bson", [{"_id": 1}])
    result = run(["ingest", tmp_path / "a.b.bson", "--into", "app.x", "--data", tmp_path / "d"])
    assert result.exit_code == 2 and "--allow-dots" in result.output
    result = run(["ingest", tmp_path / "a.b.bson", "--into", "app.x"])
    assert result.exit_code == 2 and "--data DIR" in result.output
    result = run(["ingest", tmp_path / "a.b.bson", "--into", "app.x", "--data", tmp_path / "d", "--host", "h"])
    assert result.exit_code == 2 and "one of the two" in result.output


def test_dump_and_restore_round_trip_through_the_commands(tmp_path):
    with hoarddb.open(tmp_path / "data") as c:
        c["app"].create_bucket("Users", indices=[{"field": "Email", "unique": True}])
        c["app"].Users.batch_put([{"_id_": f"u{i}", "Email": f"{i}@x"} for i in range(30)])
        c["app"].create_bucket("Other", type="lifo").batch_push([{"n": 1}])
    result = run(["dump", "--data", tmp_path / "data", "--db", "app", "--out", tmp_path / "out", "--bucket", "Users"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out" / "app").iterdir()) == ["Users.bson", "Users.metadata.json"]
    result = run(["restore", tmp_path / "out" / "app", "--db", "app2", "--data", tmp_path / "data"])
    assert result.exit_code == 0, result.output
    assert "restored 30 document(s)" in result.output
    result = run(["restore", tmp_path / "out" / "app", "--db", "app2", "--data", tmp_path / "data"])
    assert result.exit_code == 2 and "--drop" in result.output
    with hoarddb.open(tmp_path / "data") as c:
        assert c["app2"].Users.describe()["indexes"][0]["unique"] is True


def test_a_corrupt_dump_exits_2_and_writes_nothing(tmp_path):
    with hoarddb.open(tmp_path / "data") as c:
        c["app"].create_bucket("T").batch_put([{"_id_": i} for i in range(3)])
    run(["dump", "--data", tmp_path / "data", "--db", "app", "--out", tmp_path / "out"])
    (tmp_path / "out" / "app" / "T.bson").write_bytes(b"\x01\x00\x00\x00")
    result = run(["restore", tmp_path / "out" / "app", "--db", "app2", "--data", tmp_path / "data"])
    assert result.exit_code == 2 and "CORRUPT_DATA" in result.output


def test_the_commands_are_registered_on_the_hoarddb_command(tmp_path):
    write_bson(tmp_path / "p.bson", [{"_id": 1}, {"_id": 2}])
    out = subprocess.run([sys.executable, "-m", "hoarddb", "ingest", str(tmp_path / "p.bson"), "--into", "app.p",
                          "--data", str(tmp_path / "d")], env=ENV, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "loaded 2 document(s)" in out.stdout
    helped = subprocess.run([sys.executable, "-m", "hoarddb", "--help"], env=ENV, capture_output=True, text=True,
                            timeout=60)
    assert all(name in helped.stdout for name in ("ingest", "dump", "restore"))


def test_an_unreadable_file_exits_2_and_creates_no_bucket(tmp_path):
    (tmp_path / "arr.json").write_text('[{"_id": 1, "a": "cut')
    result = run(["ingest", tmp_path / "arr.json", "--into-db", "app", "--data", tmp_path / "d"])
    assert result.exit_code == 2 and "CORRUPT_DATA" in result.output and "TRUNCATED" in result.output
    with hoarddb.open(tmp_path / "d") as c:
        assert c.databases() == []


def test_a_restore_refused_for_a_declaration_exits_2_and_writes_nothing(tmp_path):
    folder = tmp_path / "old" / "app"
    write_bson(folder / "A.bson", [{"_id_": 1}])
    (folder / "A.metadata.json").write_text('{"indexes": []}')
    write_bson(folder / "B.bson", [{"_id_": 1}])
    (folder / "B.metadata.json").write_text('{"type": "fifo", "indexes": ["Email"]}')
    result = run(["restore", folder, "--data", tmp_path / "d"])
    assert result.exit_code == 2 and "nothing was written" in result.output
    assert "B.metadata.json" in result.output and "BAD_VALUE" in result.output and "--bucket" in result.output
    with hoarddb.open(tmp_path / "d") as c:
        assert c.databases() == []
