"""dump -> restore round trips of every store type and store field, with index declarations kept and enforced."""

from __future__ import annotations

import json

import pytest
from bson import json_util

from hoarddb.errors import (BucketExistsError, BucketNotFoundError, CorruptDataError, DuplicateKeyError,
                            IndexNotReadyError, InvalidArgumentError)
from hoarddb.tools import dump, restore
from .toolfiles import contents, declaration, fill, write_bson


def test_every_store_type_round_trips_with_order_priorities_and_declarations(client, tmp_path):
    fill(client["app"])
    report = dump(client, "app", tmp_path / "out")
    assert report.ok, report.summary()
    restored = restore(client, tmp_path / "out" / "app", db="app2")
    assert restored.ok, restored.summary()
    src, dst = client["app"], client["app2"]
    assert sorted(dst.buckets()) == sorted(src.buckets())
    for name in src.buckets():
        assert declaration(dst, name) == declaration(src, name), name
        assert contents(dst, name) == contents(src, name), name
    # pop order (heap priorities and ties, fifo and lifo ends) is the same
    assert [dst.Jobs.pop()["n"] for _ in range(6)] == [src.Jobs.pop()["n"] for _ in range(6)] == [1, 4, 3, 0, 2, 5]
    assert dst.Queue.pop(limit=50) == src.Queue.pop(limit=50)
    assert dst.Stack.pop(limit=50) == src.Stack.pop(limit=50)
    assert [d["n"] for d in dst.Board.list()] == [4, 1, 0, 2, 5, 3]


def test_store_fields_round_trip(client, tmp_path):
    fill(client["app"])
    dump(client, "app", tmp_path / "out", buckets=["Users"])
    assert (tmp_path / "out" / "app" / "Users.fields" / "Notes.bson").is_file()
    report = restore(client, tmp_path / "out" / "app", db="app2")
    assert report.ok, report.summary()
    src, dst = client["app"].Users, client["app2"].Users
    for key in ("u00", "u01", "u02", "u03"):
        for field in ("Notes", "Tasks", "Prefs"):
            assert dst[key][field].list() == src[key][field].list(), (key, field)
        assert dst[key].Tasks.pop(limit=10) == src[key].Tasks.pop(limit=10)
        assert dst[key].Notes.pop(limit=10) == src[key].Notes.pop(limit=10)
        # blobs keep their ids, so a document that names one still finds it
        assert dst[key].Files.list() == src[key].Files.list()
        assert [b"".join(dst[key].Files.stream(i["_id_"])) for i in dst[key].Files.list()] == \
            [b"".join(src[key].Files.stream(i["_id_"])) for i in src[key].Files.list()]


def test_a_restored_unique_index_still_refuses_and_a_ttl_index_still_expires(client, tmp_path):
    fill(client["app"])
    dump(client, "app", tmp_path / "out", buckets=["Users"])
    restore(client, tmp_path / "out" / "app", db="app2")
    users = client["app2"].Users
    with pytest.raises(DuplicateKeyError, match="Email_1"):
        users.insert({"_id_": "new", "Email": "u3@x"})
    assert users.search({"Company": "c1", "Name": "N4"}).index_used == "Company_1_Name_1"
    assert users.search({"City": "Leeds"}).index_used == "by_city"
    assert users.length() == 25
    client.sweep_ttl()
    assert users.length() == 20 and users.get("u00") is None and users.get("u05") is not None


def test_the_metadata_records_the_declaration_and_the_layout_is_as_documented(client, tmp_path):
    fill(client["app"])
    dump(client, "app", tmp_path / "out")
    folder = tmp_path / "out" / "app"
    meta = json_util.loads((folder / "Users.metadata.json").read_text())
    assert meta["format"] == 2 and meta["type"] == "hash" and meta["documents"] == 25
    assert {"name": "CreatedAt_1", "fields": ["CreatedAt"], "unique": False, "expire_after_seconds": 3600,
            "state": "ready"} in meta["indexes"]
    assert meta["fields"][0]["keywords"] == ["unique"] and meta["store_fields"][0] == {"name": "Notes", "type": "lifo"}
    assert meta["store_field_contents"]["fields"]["Notes"]["elements"] == 12
    photos = json_util.loads((folder / "Photos.metadata.json").read_text())
    assert len(photos["blobs"]["sha256"]) == 5
    assert all((folder / "Photos.blobs" / i).is_file() for i in photos["blobs"]["sha256"])
    assert json_util.loads((folder / "Queue.metadata.json").read_text())["options"] == {"segment_size": 4096}
    assert not any(p.name.endswith(".part") for p in folder.iterdir())


def test_an_old_format_dump_restores_its_index_names_as_plain_indexes(client, tmp_path):
    folder = tmp_path / "old" / "app"
    write_bson(folder / "Users.bson", [{"_id_": f"u{i}", "Email": "same@x", "Name": f"N{i}"} for i in range(3)])
    (folder / "Users.metadata.json").write_text(json.dumps({"indexes": ["Email", "Name"]}))
    report = restore(client, folder, db="app")
    assert report.ok, report.summary()
    indexes = client["app"].Users.describe()["indexes"]
    assert [(ix["name"], ix["fields"], ix["unique"], ix["expire_after_seconds"]) for ix in indexes] == [
        ("Email_1", ["Email"], False, None), ("Name_1", ["Name"], False, None)]
    assert "plain single-field indexes" in report.summary()
    assert client["app"].Users.search({"Email": "same@x"}).index_used == "Email_1"


def test_a_restore_whose_data_breaks_a_unique_index_leaves_it_conflicted_and_says_so(client, tmp_path):
    db = client["app"]
    db.create_bucket("Users")
    db.Users.batch_put([{"_id_": "u1", "Email": "dup@x"}, {"_id_": "u2", "Email": "dup@x"},
                        {"_id_": "u3", "Email": "ok@x"}])
    dump(client, "app", tmp_path / "out")
    meta_path = tmp_path / "out" / "app" / "Users.metadata.json"
    meta = json_util.loads(meta_path.read_text())
    meta["indexes"] = [{"name": "Email_1", "fields": ["Email"], "unique": True, "expire_after_seconds": None}]
    meta_path.write_text(json_util.dumps(meta))
    report = restore(client, tmp_path / "out" / "app", db="app2")
    (conflict,) = report.buckets[0].conflicts
    assert conflict["index"] == "Email_1" and sorted(conflict["documents"]) == ["u1", "u2"]
    assert not report.ok and "conflicted" in report.summary() and "dup@x" in report.summary()
    users = client["app2"].Users
    assert users.length() == 3  # every document is there; nothing was chosen for you
    assert users.describe()["indexes"][0]["state"] == "conflicted"
    with pytest.raises(IndexNotReadyError):
        users.search({"Email": "dup@x"})
    with pytest.raises(DuplicateKeyError):
        users.insert({"_id_": "u4", "Email": "dup@x"})


def test_a_damaged_dump_is_refused_before_anything_is_written(client, tmp_path):
    fill(client["app"])
    dump(client, "app", tmp_path / "out")
    data = tmp_path / "out" / "app" / "Jobs.bson"
    raw = bytearray(data.read_bytes())
    raw[20] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(CorruptDataError, match="Jobs.bson .*SHA-256"):
        restore(client, tmp_path / "out" / "app", db="app2")
    assert "app2" not in client.databases()


def test_a_truncated_file_in_an_old_dump_is_refused_with_its_position(client, tmp_path):
    folder = tmp_path / "old" / "app"
    write_bson(folder / "T.bson", [{"_id_": i} for i in range(5)])
    (folder / "T.bson").write_bytes((folder / "T.bson").read_bytes()[:-4])
    (folder / "T.metadata.json").write_text('{"type": "hash", "indexes": []}')
    with pytest.raises(CorruptDataError, match=r"document 5 \(byte 60\): truncated"):
        restore(client, folder, db="app")
    assert client.databases() == []


def test_a_missing_blob_file_is_refused(client, tmp_path):
    fill(client["app"])
    dump(client, "app", tmp_path / "out", buckets=["Photos"])
    next((tmp_path / "out" / "app" / "Photos.blobs").iterdir()).unlink()
    with pytest.raises(CorruptDataError, match="blob file"):
        restore(client, tmp_path / "out" / "app", db="app2")


def test_restore_refuses_a_bucket_that_exists_unless_drop(client, tmp_path):
    fill(client["app"])
    dump(client, "app", tmp_path / "out", buckets=["Jobs"])
    with pytest.raises(BucketExistsError, match="--drop"):
        restore(client, tmp_path / "out" / "app")
    client["app"].Jobs.pop(limit=6)
    report = restore(client, tmp_path / "out" / "app", drop=True)
    assert report.ok and client["app"].Jobs.length() == 6


def test_restore_tells_a_mongodump_folder_from_a_dump(client, tmp_path):
    folder = tmp_path / "mongo" / "app"
    write_bson(folder / "users.bson", [{"_id": 1}])
    (folder / "users.metadata.json").write_text('{"indexes": [{"v": 2, "key": {"_id": 1}, "name": "_id_"}]}')
    with pytest.raises(CorruptDataError, match="hoarddb ingest"):
        restore(client, folder, db="app")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgumentError, match="not a hoardDB dump"):
        restore(client, tmp_path / "empty", db="app")


def test_dump_of_an_unknown_bucket_is_refused(client, tmp_path):
    client["app"].create_bucket("A")
    with pytest.raises(BucketNotFoundError, match="Nope"):
        dump(client, "app", tmp_path / "out", buckets=["Nope"])


def test_an_old_format_dump_with_a_unique_field_line_also_in_its_indexes_restores(client, tmp_path):
    folder = tmp_path / "old" / "app"
    write_bson(folder / "Users.bson", [{"_id_": f"u{i}", "Email": f"{i}@x", "Name": "N"} for i in range(3)])
    (folder / "Users.metadata.json").write_text(json.dumps({
        "fields": [{"name": "Email", "type": "string", "keywords": ["unique"]}], "indexes": ["Email", "Name"]}))
    report = restore(client, folder, db="app")
    assert report.ok, report.summary()
    indexes = client["app"].Users.describe()["indexes"]
    assert [(ix["name"], ix["fields"], ix["unique"]) for ix in indexes] == [
        ("Email_1", ["Email"], True), ("Name_1", ["Name"], False)]
    with pytest.raises(DuplicateKeyError):
        client["app"].Users.insert({"_id_": "u9", "Email": "1@x"})


def test_a_declaration_this_hoarddb_refuses_refuses_the_whole_restore_and_writes_nothing(client, tmp_path):
    db = client["app"]
    db.create_bucket("A").batch_put([{"_id_": i} for i in range(3)])
    db.create_bucket("B", indices=[{"field": "T", "expire_after_seconds": 5}]).batch_put([{"_id_": 1}])
    dump(client, "app", tmp_path / "out")
    meta_path = tmp_path / "out" / "app" / "B.metadata.json"
    meta = json_util.loads(meta_path.read_text())
    meta["indexes"][0]["unique"] = True  # a unique TTL index: refused by create_bucket
    meta_path.write_text(json_util.dumps(meta))
    with pytest.raises(CorruptDataError, match=r"(?s)nothing was written.*B\.metadata\.json.*BAD_VALUE.*TTL"):
        restore(client, tmp_path / "out" / "app", db="app2")
    assert "app2" not in client.databases()  # not even A, which comes before B
    with pytest.raises(CorruptDataError, match="BAD_VALUE"):
        restore(client, tmp_path / "out" / "app", db="app", drop=True)
    assert db.A.length() == 3 and db.B.length() == 1  # --drop dropped nothing either


def test_a_restore_that_fails_midway_says_exactly_what_was_written(client, tmp_path):
    db = client["app"]
    db.create_bucket("A").batch_put([{"_id_": i} for i in range(3)])
    photos = db.create_bucket("Photos", type="blob")
    for n in range(2):
        photos.put(bytes([n]) * 100, name=f"p{n}")
    db.create_bucket("Z").batch_put([{"_id_": 1}])
    dump(client, "app", tmp_path / "out")
    blobs = tmp_path / "out" / "app" / "Photos.blobs"

    def progress(rep):  # a blob file disappears after the dump was checked
        if rep.bucket == "A":
            for p in blobs.iterdir():
                p.unlink()

    report = restore(client, tmp_path / "out" / "app", db="app2", progress=progress)
    assert not report.ok
    assert [b.bucket for b in report.buckets] == ["A", "Photos"]
    assert "FileNotFoundError" in report.buckets[1].error
    text = report.summary()
    assert "A: restored (3 entries)" in text and "Photos: declared, 0 entries loaded — incomplete" in text
    assert "Not written: Z" in text and "--drop --bucket Photos --bucket Z" in text
    assert client["app2"].buckets() == ["A", "Photos"]


def test_a_dump_that_skips_a_corrupt_blob_says_not_dumped(client, tmp_path):
    photos = client["app"].create_bucket("Photos", type="blob")
    ids = [photos.put(bytes([n]) * 5000, name=f"p{n}") for n in range(3)]
    blob_file = tmp_path / "data" / "app" / "Photos" / ids[1]
    raw = bytearray(blob_file.read_bytes())
    raw[10] ^= 1
    blob_file.write_bytes(bytes(raw))
    report = dump(client, "app", tmp_path / "out")
    text = report.summary()
    assert not report.ok
    assert "1 document(s) not dumped:" in text and f"Photos.blobs/{ids[1]}" in text and "CORRUPT_DATA" in text
    assert "dumped 2 document(s) in 1 bucket(s); 1 not dumped" in text and "not loaded" not in text


def test_a_blob_file_changed_after_the_dump_is_refused_before_anything_is_written(client, tmp_path):
    fill(client["app"])
    dump(client, "app", tmp_path / "out", buckets=["Photos", "Jobs"])
    blob = sorted((tmp_path / "out" / "app" / "Photos.blobs").iterdir())[-1]
    blob.write_bytes(blob.read_bytes()[:-1] + b"?")
    with pytest.raises(CorruptDataError, match="SHA-256"):
        restore(client, tmp_path / "out" / "app", db="app2")
    assert "app2" not in client.databases()


def test_a_corrupt_store_field_blob_is_left_out_and_the_rest_is_dumped(client, tmp_path):
    users = client["app"].create_bucket("Users", store_fields=[{"name": "Files", "type": "blob"}])
    users.batch_put([{"_id_": "u1"}, {"_id_": "u2"}])
    bad = users["u1"].Files.put(b"hello" * 100, name="a.txt")
    good = users["u2"].Files.put(b"fine", name="b.txt")
    client["app"].create_bucket("Z").put({"_id_": 1})
    blob_file = next(p for p in (tmp_path / "data" / "app" / "Users").rglob(bad))
    raw = bytearray(blob_file.read_bytes())
    raw[3] ^= 1
    blob_file.write_bytes(bytes(raw))
    report = dump(client, "app", tmp_path / "out")
    assert [b.bucket for b in report.buckets] == ["Users", "Z"] and report.buckets[1].ok
    (refusal,) = report.buckets[0].refused
    assert refusal.file == f"Users.fields/Files.blobs/{bad}" and refusal.code == "CORRUPT_DATA"
    assert "'u1'" in refusal.reason and "not dumped" in report.summary()
    folder = tmp_path / "out" / "app"
    assert not [p for p in folder.rglob("*.part")]
    restored = restore(client, folder, db="app2")
    assert restored.ok, restored.summary()
    assert client["app2"].Users["u1"].Files.list() == []
    assert b"".join(client["app2"].Users["u2"].Files.stream(good)) == b"fine"
