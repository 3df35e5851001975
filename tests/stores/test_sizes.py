"""What buckets take on disk and what their data fills: small buckets stay small, and stats say both."""

from __future__ import annotations

import bson

import hoarddb
from hoarddb.storage.framing import HEADER_SIZE as FRAME_HEADER_SIZE

KIB = 1024


def test_a_queue_of_a_few_entries_keeps_small_files(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        q = client["app"].create_bucket("q", type="fifo")
        q.push({"a": 1})
        q.pop()
        stats = q.stats()
        assert stats["entries"] == 0 and stats["data_bytes"] == 0
        assert stats["bytes"] < 64 * KIB  # it preallocated 1 MiB after the first push
        docs = [{"n": i, "pad": "x" * 100} for i in range(2000)]
        q.batch_push(docs)
        stats = q.stats()
        assert stats["data_bytes"] == sum(len(bson.encode(d)) + FRAME_HEADER_SIZE for d in docs)
        assert stats["data_bytes"] < stats["bytes"] <= 2 * stats["data_bytes"] + 64 * KIB


def test_a_small_hash_bucket_takes_little_and_says_what_its_data_fills(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        h = client["app"].create_bucket("h")
        docs = [{"_id_": i, "x": "y" * 20} for i in range(200)]
        h.batch_put(docs)
        stats = h.stats()
        assert sum(len(bson.encode(d)) for d in docs) <= stats["data_bytes"] < stats["bytes"]
        assert stats["bytes"] < 256 * KIB  # a log preallocated 1 MiB ahead of itself
        described = h.describe()
        assert (described["bytes"], described["data_bytes"]) == (stats["bytes"], stats["data_bytes"])


def test_every_store_type_reports_data_bytes(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        db = client["app"]
        db.create_bucket("l", type="lifo").batch_push([{"a": i} for i in range(10)])
        db.create_bucket("b", type="blob").put(b"x" * 1000)
        db.create_bucket("t", type="btree", key="k").insert({"k": 1})
        db.create_bucket("p", type="heap").push({"priority": 2, "a": 1})
        assert db.l.stats()["data_bytes"] == 10 * (len(bson.encode({"a": 0})) + FRAME_HEADER_SIZE)
        assert db.b.stats()["data_bytes"] == 1000
        for name in ("t", "p"):
            stats = db[name].stats()
            assert 0 < stats["data_bytes"] <= stats["bytes"], name


def test_the_shell_prints_bytes_on_disk_and_of_data(tmp_path):
    import io

    from hoarddb.shell import run_script

    out = io.StringIO()
    with hoarddb.open(tmp_path / "d") as client:
        client["app"].create_bucket("q", type="lifo").push({"a": 1})
        assert run_script(client, "use app\ndescribe bucket q\ndb.q.stats()\n", out=out, err=io.StringIO()) == 0
        on_disk = client["app"].q.stats()["bytes"]
    size = len(bson.encode({"a": 1})) + FRAME_HEADER_SIZE
    assert out.getvalue().count(f"Bytes:    {on_disk} on disk, {size} of data") == 2
