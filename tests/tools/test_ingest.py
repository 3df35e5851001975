"""hoarddb.tools.ingest on real files: types kept, buckets named after files, every refusal placed exactly."""

from __future__ import annotations

import json

import bson
import pytest
from bson import Binary, Decimal128, Int64, ObjectId

from hoarddb.errors import BadValueError, CorruptDataError, DuplicateKeyError, InvalidArgumentError, NotFoundError
from hoarddb.hql import parser
from hoarddb.tools import ingest
from hoarddb.tools.ingest import create_statement, mongo_indices
from hoarddb.values.codec import MAX_DOCUMENT_SIZE, encode
from .toolfiles import mongo_documents, offsets, write_bson


def without_key(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "_id_"}


@pytest.fixture(params=["one process", "reader process"])
def reader(request, monkeypatch):
    """Read .bson files in this process, or in a second one (as files of 32 MiB and more are)."""
    import sys
    module = sys.modules["hoarddb.tools.ingest"]  # the package exports a function of the same name
    monkeypatch.setattr(module, "PARALLEL_MIN_BYTES", 0 if request.param == "reader process" else 1 << 60)
    return request.param


@pytest.mark.parametrize("gz", [False, True])
def test_a_mongodump_file_reads_back_type_for_type(client, tmp_path, gz, reader):
    docs = mongo_documents(30)
    name = "properties.bson.gz" if gz else "properties.bson"
    raws = write_bson(tmp_path / "dump" / name, docs, gz=gz)
    report = ingest(client, tmp_path / "dump" / name, into="app.properties")
    assert report.ok and report.documents == 30
    bucket = client["app"].properties
    assert bucket.describe()["type"] == "hash"
    for doc, raw in zip(docs, raws):
        got = bucket.get(doc["_id"])  # keyed by the ObjectId itself: db.properties.get(ObjectId("..."))
        assert got["_id_"] == doc["_id"] and isinstance(got["_id_"], ObjectId)
        assert encode(without_key(got)) == raw  # the same BSON, byte for byte: every type kept
    got = bucket.get(docs[3]["_id"])
    assert type(got["views"]) is Int64 and type(got["small64"]) is Int64 and type(got["rooms"]) is int
    assert isinstance(got["rent"], Decimal128) and got["createdAt"].tzinfo is not None
    assert got["digest"] == Binary(b"0123456789abcdef", 5) and got["history"][0] == [3, 4]


def test_the_hql_get_of_an_objectid_key_finds_the_document(client, tmp_path):
    docs = mongo_documents(2)
    write_bson(tmp_path / "p.bson", docs)
    ingest(client, tmp_path / "p.bson", into="app.p")
    request = parser.parse_statement(f'db.p.get(ObjectId("{docs[1]["_id"]}"))').to_request("app")
    assert client.execute(request)["result"]["name"] == "Property 1"


def test_jsonl_canonical_and_relaxed_load_with_their_types(client, tmp_path):
    oid1, oid2 = ObjectId(), ObjectId()
    (tmp_path / "events.jsonl").write_text(
        '{"_id": {"$oid": "%s"}, "n": {"$numberLong": "5"}, "at": {"$date": {"$numberLong": "1709209815000"}}, '
        '"m": {"$numberDecimal": "1.10"}, "b": {"$binary": {"base64": "AAE=", "subType": "80"}}}\n'
        '{"_id": {"$oid": "%s"}, "n": 5, "at": {"$date": "2024-02-29T12:30:15Z"}, "m": {"$numberDecimal": "1.10"}}\n'
        % (oid1, oid2))
    report = ingest(client, tmp_path / "events.jsonl", into_db="app")
    assert report.ok
    canonical, relaxed = client["app"].events.get(oid1), client["app"].events.get(oid2)
    assert type(canonical["n"]) is Int64 and type(relaxed["n"]) is int
    assert canonical["at"] == relaxed["at"] and canonical["m"] == relaxed["m"] == Decimal128("1.10")
    assert canonical["b"] == Binary(b"\x00\x01", 0x80)


def test_a_folder_loads_one_bucket_per_file_named_after_it(client, tmp_path):
    folder = tmp_path / "dump" / "app"
    write_bson(folder / "users.bson", [{"_id": i} for i in range(3)])
    write_bson(folder / "orders.bson.gz", [{"_id": i} for i in range(4)], gz=True)
    (folder / "events.jsonl").write_text('{"_id": 1}\n{"_id": 2}\n')
    (folder / "users.metadata.json").write_text('{"indexes": []}')
    (folder / "README.txt").write_text("not data")
    report = ingest(client, folder, into_db="shop")
    assert report.ok
    assert sorted(client["shop"].buckets()) == ["events", "orders", "users"]
    assert [client["shop"][b].length() for b in ("events", "orders", "users")] == [2, 4, 3]
    assert {b.bucket: b.documents for b in report.buckets} == {"events": 2, "orders": 4, "users": 3}
    assert all(b.seconds > 0 and b.bytes > 0 for b in report.buckets)


def test_a_dot_in_a_base_name_is_refused_without_allow_dots(client, tmp_path):
    write_bson(tmp_path / "d" / "events.2024.bson", [{"_id": 1}])
    with pytest.raises(BadValueError, match="--allow-dots"):
        ingest(client, tmp_path / "d", into_db="app")
    with pytest.raises(BadValueError, match="events.2024"):
        ingest(client, tmp_path / "d" / "events.2024.bson", into="app.events")
    assert client.databases() == []
    assert ingest(client, tmp_path / "d", into_db="app", allow_dots=True).ok
    assert client["app"].buckets() == ["events_2024"]


def test_usage_refusals_come_before_anything_is_written(client, tmp_path):
    write_bson(tmp_path / "d" / "a.bson", [{"_id": 1}])
    with pytest.raises(NotFoundError):
        ingest(client, tmp_path / "nope", into_db="app")
    with pytest.raises(InvalidArgumentError, match="--into-db"):
        ingest(client, tmp_path / "d")
    with pytest.raises(InvalidArgumentError, match="directory"):
        ingest(client, tmp_path / "d", into="app.a")
    with pytest.raises(InvalidArgumentError, match="DB.BUCKET"):
        ingest(client, tmp_path / "d" / "a.bson", into="app")
    with pytest.raises(BadValueError, match="blob"):
        ingest(client, tmp_path / "d", into_db="app", type="blob")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "app").mkdir()
    with pytest.raises(InvalidArgumentError, match="one folder per database"):
        ingest(client, tmp_path / "e", into_db="app")
    assert client.databases() == []


def test_type_chooses_new_buckets_and_never_changes_one_that_exists(client, tmp_path):
    write_bson(tmp_path / "scores.bson", [{"_id": i, "Score": 10 - i} for i in range(5)])
    client["app"].create_bucket("scores", type="btree", key="Score")
    report = ingest(client, tmp_path / "scores.bson", into="app.scores", type="hash")
    assert report.ok and client["app"].scores.describe()["type"] == "btree"
    assert any("does not change it" in n for n in report.buckets[0].notes)
    assert [d["Score"] for d in client["app"].scores.list()] == [6, 7, 8, 9, 10]
    write_bson(tmp_path / "jobs.bson", [{"priority": p, "n": p} for p in (1, 5, 3)])
    assert ingest(client, tmp_path / "jobs.bson", into="app.jobs", type="heap").ok
    assert [client["app"].jobs.pop()["n"] for _ in range(3)] == [5, 3, 1]


def test_running_again_over_a_hash_bucket_changes_nothing(client, tmp_path):
    docs = mongo_documents(10)
    write_bson(tmp_path / "p.bson", docs)
    ingest(client, tmp_path / "p.bson", into="app.p")
    before = client["app"].p.list(limit=100)
    assert ingest(client, tmp_path / "p.bson", into="app.p").ok
    assert client["app"].p.list(limit=100) == before and client["app"].p.length() == 10


def test_fifo_appends_and_asks_first(client, tmp_path):
    write_bson(tmp_path / "log.bson", [{"n": i} for i in range(3)])
    with pytest.raises(BadValueError, match="second copy"):
        ingest(client, tmp_path / "log.bson", into="app.log", type="fifo")
    asked = []
    report = ingest(client, tmp_path / "log.bson", into="app.log", type="fifo",
                    confirm=lambda m: asked.append(m) or False)
    assert report.cancelled and not report.ok and "second copy" in asked[0]
    assert client.databases() == []
    assert ingest(client, tmp_path / "log.bson", into="app.log", type="fifo", yes=True).ok
    assert ingest(client, tmp_path / "log.bson", into="app.log", confirm=lambda m: True).ok  # exists: fifo
    assert [d["n"] for d in client["app"].log.list()] == [0, 1, 2, 0, 1, 2]


def test_metadata_indexes_are_reported_as_a_statement_and_none_created(client, tmp_path):
    folder = tmp_path / "app"
    write_bson(folder / "users.bson", [{"_id": i, "email": f"u{i}@x"} for i in range(3)])
    (folder / "users.metadata.json").write_text(json.dumps({"indexes": [
        {"v": {"$numberInt": "2"}, "key": {"_id": {"$numberInt": "1"}}, "name": "_id_"},
        {"v": 2, "key": {"email": 1}, "name": "email_1", "unique": True},
        {"v": 2, "key": {"createdAt": 1}, "name": "createdAt_1", "expireAfterSeconds": {"$numberInt": "3600"}},
        {"v": 2, "key": {"company": 1, "name": -1}, "name": "company_1_name_-1"},
        {"v": 2, "key": {"city": 1}, "name": "by_city"},
        {"v": 2, "key": {"bio": "text"}, "name": "bio_text"},
        {"v": 2, "key": {"address.city": 1}, "name": "address.city_1"},
    ], "uuid": "x", "collectionName": "users"}))
    report = ingest(client, folder, into_db="app")
    rep = report.buckets[0]
    assert report.ok and client["app"].users.describe()["indexes"] == []
    assert rep.statement == (
        'create bucket users { type: hash, indices: [{field: "email", unique: true}, '
        '{field: "createdAt", expire_after_seconds: 3600}, {fields: ["company", "name"], desc: ["name"]}, '
        '{field: "city", name: "by_city"}] }')
    notes = " ".join(rep.notes)
    assert "text index" in notes and "nested" in notes and "descending" not in notes and "drop bucket users" in notes
    assert rep.statement in report.summary()

    # Declaring the bucket with the printed statement, then running the same ingest, fills it with its indexes.
    client["app"].drop_bucket("users")
    request = parser.parse_statement(rep.statement).to_request("app")
    client.execute(request)
    again = ingest(client, folder, into_db="app")
    assert again.ok and again.buckets[0].statement is None
    assert [ix["name"] for ix in client["app"].users.describe()["indexes"]] == [
        "email_1", "createdAt_1", "company_1_name_-1", "by_city"]
    with pytest.raises(DuplicateKeyError):
        client["app"].users.insert({"_id_": 99, "email": "u1@x"})


def test_create_statement_and_indices_from_metadata():
    indices, notes = mongo_indices({"indexes": [{"key": {"a": 1}, "name": "a_1", "unique": True,
                                                 "expireAfterSeconds": 5}]})
    assert indices == [{"field": "a", "unique": True}] and "unique and TTL" in notes[0]
    assert create_statement("B", "hash", []) == "create bucket B { type: hash, indices: [] }"


# -- refusals: file, document number, byte offset --------------------------------------


def test_a_truncated_file_stops_with_its_position_and_keeps_what_came_before(client, tmp_path, reader):
    raws = write_bson(tmp_path / "t.bson", [{"_id": i} for i in range(10)])
    data = (tmp_path / "t.bson").read_bytes()
    (tmp_path / "t.bson").write_bytes(data[:-3])
    report = ingest(client, tmp_path / "t.bson", into="app.t", on_error="skip")
    rep = report.buckets[0]
    assert not report.ok and rep.documents == 9 and client["app"].t.length() == 9
    (bad,) = rep.refused
    assert (bad.file, bad.number, bad.offset, bad.code) == (str(tmp_path / "t.bson"), 10, offsets(raws)[9], "TRUNCATED")
    assert "cannot be read past document 10" in rep.stopped
    assert f"t.bson: document 10 (byte {offsets(raws)[9]})" in report.summary()


def test_a_line_that_is_not_json_is_reported_with_line_and_offset(client, tmp_path):
    (tmp_path / "e.jsonl").write_text('{"_id": 1}\n\n{"_id": 2, oops}\n{"_id": 3}\n')
    report = ingest(client, tmp_path / "e.jsonl", into="app.e", on_error="skip")
    (bad,) = report.buckets[0].refused
    assert (bad.number, bad.line, bad.offset, bad.code) == (2, 3, 12, "NOT_JSON")
    assert "document 2, line 3 (byte 12)" in str(bad)
    assert client["app"].e.length() == 2


def test_a_document_over_16_mib_is_refused_with_its_position(client, tmp_path):
    big = bson.encode({"_id": 2, "blob": Binary(b"\0" * (MAX_DOCUMENT_SIZE + 1))})
    raws = write_bson(tmp_path / "big.bson", [{"_id": 1}, big, {"_id": 3}])
    report = ingest(client, tmp_path / "big.bson", into="app.big", on_error="skip")
    (bad,) = report.buckets[0].refused
    assert (bad.number, bad.offset, bad.code) == (2, offsets(raws)[1], "DOCUMENT_TOO_LARGE")
    assert sorted(d["_id_"] for d in client["app"].big.list()) == [1, 3]


def test_a_document_the_engine_finds_too_large_is_refused_alone(client, tmp_path):
    # Under 16 MiB in the file; over it once the hash key _id_ is added beside _id.
    pad = MAX_DOCUMENT_SIZE - len(bson.encode({"_id": "k" * 100, "p": b""})) - 10
    raws = write_bson(tmp_path / "edge.bson", [{"_id": 1}, {"_id": "k" * 100, "p": b"\0" * pad}, {"_id": 3}])
    report = ingest(client, tmp_path / "edge.bson", into="app.edge", on_error="skip")
    (bad,) = report.buckets[0].refused
    assert (bad.number, bad.offset, bad.code) == (2, offsets(raws)[1], "DOCUMENT_TOO_LARGE")
    assert client["app"].edge.length() == 2


def test_a_document_refused_by_a_unique_index_is_placed_exactly(client, tmp_path):
    client["app"].create_bucket("users", indices=[{"field": "email", "unique": True}])
    docs = [{"_id": i, "email": f"u{i}@x"} for i in range(10)]
    docs[7]["email"] = "u2@x"
    raws = write_bson(tmp_path / "users.bson", docs)
    report = ingest(client, tmp_path / "users.bson", into="app.users")
    rep = report.buckets[0]
    (bad,) = rep.refused
    assert (bad.number, bad.offset, bad.code) == (8, offsets(raws)[7], "DUPLICATE_KEY")
    assert "u2@x" in bad.reason and "position" not in bad.reason
    # stop (the default): everything before the bad document is in, nothing after it
    assert sorted(d["_id_"] for d in client["app"].users.list()) == list(range(7))
    assert "nothing after it was loaded" in rep.stopped and "--on-error skip" in rep.stopped


def test_a_document_without_a_key_is_refused_for_a_hash_bucket(client, tmp_path):
    write_bson(tmp_path / "k.bson", [{"_id": 1}, {"name": "no key"}, {"_id_": "own", "_id": 5}])
    report = ingest(client, tmp_path / "k.bson", into="app.k", on_error="skip")
    (bad,) = report.buckets[0].refused
    assert bad.number == 2 and bad.code == "NO_KEY"
    assert client["app"].k.get("own")["_id"] == 5  # _id_ wins over _id


def test_skip_loads_exactly_the_good_documents(client, tmp_path, reader):
    client["app"].create_bucket("users", indices=[{"field": "email", "unique": True}])
    client["app"].users.put({"_id_": 10_000, "email": "taken@x"})
    docs = [{"_id": i, "email": f"u{i}@x"} for i in range(2500)]
    bad = {}
    for i in (0, 150, 151, 999, 1000, 1700, 2499):
        docs[i]["email"] = "taken@x"
        bad[i] = "DUPLICATE_KEY"
    docs[40]["email"] = "u39@x"  # a duplicate inside one batch: the later one is refused
    bad[40] = "DUPLICATE_KEY"
    docs[333] = {"nokey": True}
    bad[333] = "NO_KEY"
    docs[1234] = {"_id": [1, 2]}  # an array cannot be a key
    bad[1234] = "BAD_VALUE"
    raws = write_bson(tmp_path / "users.bson", docs)
    report = ingest(client, tmp_path / "users.bson", into="app.users", on_error="skip", batch_size=100)
    rep = report.buckets[0]
    assert sorted((r.number, r.code) for r in rep.refused) == sorted((i + 1, c) for i, c in bad.items())
    assert all(r.offset == offsets(raws)[r.number - 1] for r in rep.refused)
    loaded = sorted(d["_id_"] for d in client["app"].users.find())
    assert loaded == sorted([i for i in range(2500) if i not in bad] + [10_000])
    assert rep.documents == 2500 - len(bad) and rep.stopped is None and not report.ok
    assert f"{len(bad)} document(s) not loaded" in report.summary()


def test_stop_loads_everything_before_the_first_bad_document_and_nothing_after(client, tmp_path):
    docs = [{"_id": i} for i in range(300)]
    docs[250] = {"_id": {"not": "a key"}}
    write_bson(tmp_path / "s.bson", docs)
    write_bson(tmp_path / "d" / "a.bson", [{"_id": 1}])
    report = ingest(client, tmp_path / "s.bson", into="app.s", batch_size=100)
    assert [r.number for r in report.buckets[0].refused] == [251]
    assert sorted(d["_id_"] for d in client["app"].s.find()) == list(range(250))


def test_stop_in_a_folder_leaves_the_files_after_it_unloaded_and_says_so(client, tmp_path):
    folder = tmp_path / "app"
    write_bson(folder / "a.bson", [{"_id": 1}, {"x": 1}])
    write_bson(folder / "b.bson", [{"_id": 1}])
    report = ingest(client, folder, into_db="app")
    assert [b.bucket for b in report.buckets] == ["a"] and "b.bson -> app.b" in report.summary()
    report = ingest(client, folder, into_db="app", on_error="skip")
    assert [b.bucket for b in report.buckets] == ["a", "b"] and client["app"].b.length() == 1


def test_progress_is_called_with_documents_and_bytes(client, tmp_path):
    write_bson(tmp_path / "p.bson", [{"_id": i} for i in range(2500)])
    seen = []
    ingest(client, tmp_path / "p.bson", into="app.p", progress=lambda r: seen.append((r.documents, r.bytes)))
    assert seen[0][0] == 1000 and seen[-1][0] == 2500 and seen[-1][1] == (tmp_path / "p.bson").stat().st_size


def test_a_file_nothing_can_be_read_from_refuses_the_run_before_anything_is_written(client, tmp_path):
    folder = tmp_path / "app"
    write_bson(folder / "a.bson", [{"_id": 1}])
    (folder / "b.json").write_text('[{"_id": 1, "n": ')  # a JSON array cut inside its first document
    (folder / "c.bson").write_text('{"_id": 1}\n')  # JSON named .bson
    (folder / "d.bson.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(CorruptDataError) as err:
        ingest(client, folder, into_db="app")
    message = err.value.message
    assert "nothing was written" in message and "move it out of the folder" in message
    assert "b.json: document 1, line 1 (byte 1): TRUNCATED" in message
    assert "c.bson: document 1 (byte 0): CORRUPT" in message and "name it .json" in message
    assert "d.bson.gz: document 1 (byte 0)" in message
    assert client.databases() == []  # not even the bucket of a.bson, which reads


def test_a_json_array_export_is_ingested(client, tmp_path):
    # mongoexport --jsonArray: one array of Extended JSON documents, read element by element
    (tmp_path / "users.json").write_text(
        '[\n{"_id": {"$oid": "5f1d7a2b9c1e4a3b2c1d0e0f"}, "n": 1},\n{"_id": 2, "n": {"$numberLong": "2"}},\n'
        '{"_id": 3, "n": 3,, },\n{"_id": 4}\n]\n')
    report = ingest(client, tmp_path / "users.json", into="app.users", on_error="skip")
    rep = report.buckets[0]
    assert rep.documents == 3 and len(rep.refused) == 1
    assert "users.json: document 3, line 4" in str(rep.refused[0])
    assert client["app"].users.get(2)["n"] == Int64(2) and client["app"].users.count() == 3
