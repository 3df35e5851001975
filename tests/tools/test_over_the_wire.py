"""ingest, dump and restore against a running server: the same functions and commands, through hoarddb.connect."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main
from hoarddb.testing import ServerThread
from hoarddb.tools import dump, ingest, restore
from hoarddb.values.codec import encode
from .toolfiles import contents, declaration, fill, mongo_documents, write_bson


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """An insecure server in this process whose TTL sweeper is off (fill() holds documents past their TTL)."""
    before = os.environ.get("HOARDDB_TTL_SWEEP_SECONDS")
    os.environ["HOARDDB_TTL_SWEEP_SECONDS"] = "0"
    try:
        with ServerThread(tmp_path_factory.mktemp("wire") / "data", insecure=True) as s:
            yield s
    finally:
        if before is None:
            os.environ.pop("HOARDDB_TTL_SWEEP_SECONDS", None)
        else:
            os.environ["HOARDDB_TTL_SWEEP_SECONDS"] = before


@pytest.fixture
def remote(server):
    with hoarddb.connect(server.url()) as c:
        yield c
        for name in c.databases():
            c.drop_database(name)


def test_ingest_through_the_wire_keeps_every_type(remote, tmp_path):
    docs = mongo_documents(12)
    raws = write_bson(tmp_path / "p.bson", docs)
    report = ingest(remote, tmp_path / "p.bson", into="app.p")
    assert report.ok
    for doc, raw in zip(docs, raws):
        got = remote["app"].p.get(doc["_id"])
        assert encode({k: v for k, v in got.items() if k != "_id_"}) == raw


def test_dump_and_restore_through_the_wire_round_trip_every_store_type(remote, tmp_path):
    fill(remote["app"])
    assert dump(remote, "app", tmp_path / "out").ok
    report = restore(remote, tmp_path / "out" / "app", db="app2")
    assert report.ok, report.summary()
    for name in remote["app"].buckets():
        assert declaration(remote["app2"], name) == declaration(remote["app"], name)
        assert contents(remote["app2"], name) == contents(remote["app"], name)


def test_the_commands_take_a_server(server, tmp_path):
    write_bson(tmp_path / "c.bson", [{"_id": i} for i in range(7)])
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "c.bson"), "--into", "cli.c", "--url", server.url()])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["dump", "--db", "cli", "--out", str(tmp_path / "out"), "--host", "127.0.0.1",
                                       "--port", str(server.port), "--insecure"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "cli" / "c.metadata.json").is_file()
    with hoarddb.connect(server.url()) as c:
        assert c["cli"].c.length() == 7
        c.drop_database("cli")


def test_a_blob_larger_than_a_message_restores_into_a_server_keeping_its_id(remote, tmp_path):
    """Restore sends each blob as a one-blob load, uploaded in chunks like a put."""
    big = os.urandom(17 * 1024 * 1024)  # over one 16 MiB message
    with hoarddb.open(tmp_path / "src") as c:
        ident = c["app"].create_bucket("Photos", type="blob").put(big, name="big.bin")
        dump(c, "app", tmp_path / "out")
    report = restore(remote, tmp_path / "out" / "app", db="app2")
    assert report.ok, report.summary()
    assert remote["app2"].Photos.info(ident)["size"] == len(big)
    assert b"".join(remote["app2"].Photos.stream(ident)) == big


def test_a_dump_of_large_documents_from_a_server_asks_for_smaller_pages(remote, tmp_path):
    """A page of 1000 documents of 6 MiB is over one message: it is asked for again, smaller."""
    users = remote["big"].create_bucket("Users", store_fields=[{"name": "Notes", "type": "fifo"}])
    for i in range(3):
        users.put({"_id_": i, "pad": str(i) * (6 * 1024 * 1024)})
    users[0].Notes.push({"pad": "n" * (6 * 1024 * 1024)})
    users[0].Notes.push({"pad": "m" * (6 * 1024 * 1024)})
    users[0].Notes.push({"pad": "o" * (6 * 1024 * 1024)})
    report = dump(remote, "big", tmp_path / "out")
    assert report.ok, report.summary()
    assert report.buckets[0].documents == 3
    restored = restore(remote, tmp_path / "out" / "big", db="big2")
    assert restored.ok, restored.summary()
    assert remote["big2"].Users.get(2)["pad"] == "2" * (6 * 1024 * 1024)
    notes = remote["big2"].Users[0].Notes  # one element per answer: three are over one message
    assert [notes.list(after=k, limit=1)[0]["pad"][0] for k in range(3)] == ["n", "m", "o"]
