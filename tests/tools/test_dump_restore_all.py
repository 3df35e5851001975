"""dump without a database writes every database; restore of a dump's top folder restores every database in it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main
from hoarddb.errors import BucketExistsError, CorruptDataError, InvalidArgumentError
from hoarddb.tools import dump, restore

from .toolfiles import contents, declaration, write_bson


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def three_databases(path):
    """app (two buckets), crm (one), and empty (none)."""
    with hoarddb.open(path) as c:
        c["app"].create_bucket("Users", indices=[{"field": "Email", "unique": True}])
        c["app"].Users.batch_put([{"_id_": f"u{i}", "Email": f"{i}@x"} for i in range(20)])
        c["app"].create_bucket("Jobs", type="fifo").batch_push([{"n": i} for i in range(5)])
        c["crm"].create_bucket("Leads", type="btree", key="Score").batch_insert([{"Score": s} for s in (3, 1, 2)])
        c.create_database("empty")


def test_dump_with_no_db_writes_every_database_and_restore_of_the_top_folder_brings_them_back(tmp_path):
    three_databases(tmp_path / "src")
    result = run(["dump", "--data", tmp_path / "src", "--out", tmp_path / "out"])
    assert result.exit_code == 0, result.output
    assert "dumped 28 document(s) in 3 bucket(s)" in result.output
    assert "database empty has no buckets" in result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["app", "crm", "empty"]
    assert not any((tmp_path / "out" / "empty").iterdir())

    result = run(["restore", tmp_path / "out", "--data", tmp_path / "dst"])
    assert result.exit_code == 0, result.output
    assert "restored 28 document(s) in 3 bucket(s)" in result.output
    assert "database empty: created empty" in result.output
    with hoarddb.open(tmp_path / "src") as src, hoarddb.open(tmp_path / "dst") as dst:
        assert dst.databases() == src.databases() == ["app", "crm", "empty"]
        for db in ("app", "crm"):
            assert sorted(dst[db].buckets()) == sorted(src[db].buckets())
            for name in src[db].buckets():
                assert declaration(dst[db], name) == declaration(src[db], name)
                assert contents(dst[db], name) == contents(src[db], name)
        assert dst["empty"].buckets() == []


def test_restore_of_a_top_folder_checks_every_database_before_writing_any(client, tmp_path):
    three_databases(tmp_path / "src")
    with hoarddb.open(tmp_path / "src") as src:
        assert dump(src, None, tmp_path / "out").ok
    (tmp_path / "out" / "crm" / "Leads.bson").write_bytes(b"\x01\x00\x00\x00")  # damaged: crm sorts after app
    with pytest.raises(CorruptDataError, match="Leads"):
        restore(client, tmp_path / "out")
    assert client.databases() == []  # app, checked first, was not written either

    (tmp_path / "out" / "crm" / "Leads.bson").unlink()
    (tmp_path / "out" / "crm" / "Leads.metadata.json").unlink()
    (tmp_path / "out" / "crm" / "notes.txt").write_text("not a dump")
    with pytest.raises(InvalidArgumentError, match="crm holds no <bucket>.metadata.json"):
        restore(client, tmp_path / "out")
    assert client.databases() == []


def test_a_top_folder_takes_neither_db_nor_bucket_and_an_existing_bucket_needs_drop(client, tmp_path):
    client["crm"].create_bucket("Leads", type="btree", key="Score")
    assert dump(client, None, tmp_path / "out").ok
    with pytest.raises(InvalidArgumentError, match="--db applies to one database: give its folder"):
        restore(client, tmp_path / "out", db="other")
    with pytest.raises(InvalidArgumentError, match="--bucket applies to one database"):
        restore(client, tmp_path / "out", buckets=["Leads"])
    with pytest.raises(BucketExistsError, match="--drop"):
        restore(client, tmp_path / "out")
    assert restore(client, tmp_path / "out", drop=True).ok


def test_dump_bucket_needs_db(tmp_path):
    three_databases(tmp_path / "src")
    result = run(["dump", "--data", tmp_path / "src", "--out", tmp_path / "out", "--bucket", "Users"])
    assert result.exit_code == 2 and "give it with --db" in result.output
    assert not (tmp_path / "out").exists()


def test_one_database_folder_still_restores_as_before(client, tmp_path):
    three_databases(tmp_path / "src")
    with hoarddb.open(tmp_path / "src") as src:
        dump(src, None, tmp_path / "out")
    report = restore(client, tmp_path / "out" / "app", db="copy")
    assert report.ok and sorted(client["copy"].buckets()) == ["Jobs", "Users"]
    assert client.databases() == ["copy"]


def test_a_mongodump_top_folder_is_told_apart(client, tmp_path):
    write_bson(tmp_path / "mongo" / "app" / "users.bson", [{"_id": 1}])
    with pytest.raises(InvalidArgumentError, match=r"nor in its folders \(app\).*hoarddb ingest .*app --into-db app"):
        restore(client, tmp_path / "mongo")


def test_dump_and_restore_print_json_reports(tmp_path):
    three_databases(tmp_path / "src")
    result = run(["dump", "--data", tmp_path / "src", "--out", tmp_path / "out", "--json"])
    out = json.loads(result.output)
    assert result.exit_code == 0 and out["action"] == "dump" and out["documents"] == 28
    assert sorted((b["db"], b["bucket"]) for b in out["buckets"]) == [("app", "Jobs"), ("app", "Users"),
                                                                      ("crm", "Leads")]
    result = run(["restore", tmp_path / "out", "--data", tmp_path / "dst", "--json"])
    out = json.loads(result.output)
    assert result.exit_code == 0 and out["ok"] is True and out["documents"] == 28
