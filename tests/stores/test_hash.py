"""The hash store through the public API: keys, duplicates, filters, updates, batches."""

from __future__ import annotations

import uuid

import pytest
from bson.int64 import Int64

import hoarddb
from hoarddb import errors


@pytest.fixture
def users(db):
    return db.create_bucket("User", type="hash")


def test_spec_example(users):
    users.insert({"_id_": "jane_doe", "Name": "Jane", "Email": "jane@example.com"})
    assert users.find({"_id_": "jane_doe"}) == [{"_id_": "jane_doe", "Name": "Jane", "Email": "jane@example.com"}]
    assert users.find({"Email": "jane@example.com"})[0]["Name"] == "Jane"
    assert users.update({"_id_": "jane_doe"}, {"$set": {"Name": "Janet"}}) == {"matched": 1, "modified": 1}
    assert users.get("jane_doe")["Name"] == "Janet"
    assert users.count() == 1
    assert users.delete({"_id_": "jane_doe"}) == {"deleted": 1}
    assert users.count() == 0


def test_insert_without_id_generates_a_uuid7(users):
    ident = users.insert({"Name": "x"})
    assert uuid.UUID(ident).version == 7
    assert users.get(ident) == {"_id_": ident, "Name": "x"}
    assert list(users.get(ident))[0] == "_id_"


def test_duplicate_id_is_refused_not_overwritten(users):
    users.insert({"_id_": "u1", "v": 1})
    with pytest.raises(hoarddb.DuplicateKeyError) as e:
        users.insert({"_id_": "u1", "v": 2})
    assert e.value.code == 0x0F and e.value.codeName == "DUPLICATE_KEY"
    assert '_id_ = "u1"' in e.value.message and "put" in e.value.message
    assert users.get("u1")["v"] == 1 and users.count() == 1


def test_numbers_are_one_key(users):
    users.insert({"_id_": 30})
    for same in (30.0, Int64(30)):
        with pytest.raises(errors.DuplicateKeyError):
            users.insert({"_id_": same})
    assert users.get(30.0) == {"_id_": 30}


def test_put_replaces_the_whole_document(users):
    users.insert({"_id_": "u1", "a": 1, "b": 2})
    assert users.put({"_id_": "u1", "a": 5}) == "u1"
    assert users.get("u1") == {"_id_": "u1", "a": 5}
    users.put({"_id_": "u2"})
    assert users.count() == 2
    with pytest.raises(errors.BadValueError, match="has none"):
        users.put({"a": 1})


def test_batch_insert_is_all_or_nothing(users):
    users.insert({"_id_": "b"})
    with pytest.raises(errors.DuplicateKeyError, match="position 1; nothing of the batch was written"):
        users.batch_insert([{"_id_": "a"}, {"_id_": "b"}, {"_id_": "c"}])
    assert users.count() == 1 and users.get("a") is None
    with pytest.raises(errors.DuplicateKeyError, match="position 2"):
        users.batch_insert([{"_id_": "x"}, {"_id_": "y"}, {"_id_": "x"}])
    assert users.count() == 1
    with pytest.raises(errors.NotADocumentError):
        users.batch_insert([{"_id_": "ok"}, 5])
    assert users.get("ok") is None
    assert users.batch_insert([{"_id_": "x"}, {"_id_": "y"}]) == ["x", "y"]
    assert users.count() == 3


def test_find_filters_and_operators(users):
    users.batch_insert([
        {"_id_": i, "age": i * 10, "tags": ["a", "b"] if i % 2 else ["c"], "addr": {"city": "X" if i < 3 else "Y"}}
        for i in range(6)
    ])
    assert [d["_id_"] for d in users.find({"age": {"$gte": 30}})] == [3, 4, 5]
    assert [d["_id_"] for d in users.find({"tags": "a"})] == [1, 3, 5]
    assert [d["_id_"] for d in users.find({"addr.city": "X", "age": {"$lt": 20}})] == [0, 1]
    assert users.count({"$or": [{"_id_": 0}, {"_id_": 5}]}) == 2
    assert len(users.find({}, limit=2)) == 2
    assert users.find({"missing": None}) == users.find()
    with pytest.raises(errors.BadValueError, match=r"\$foo"):
        users.find({"age": {"$foo": 1}})


def test_update_many_and_refusals(users):
    users.batch_insert([{"_id_": i, "n": i} for i in range(5)])
    assert users.update({"n": {"$gte": 2}}, {"$inc": {"n": 10}}) == {"matched": 3, "modified": 3}
    assert [d["n"] for d in users.find()] == [0, 1, 12, 13, 14]
    with pytest.raises(errors.BadValueError, match="put"):
        users.update({"_id_": 1}, {"n": 5})
    with pytest.raises(errors.BadValueError):
        users.update({"_id_": 1}, {"$set": {"_id_": 7}})
    assert users.get(1) == {"_id_": 1, "n": 1}


def test_delete_by_filter_and_by_key(users):
    users.batch_insert([{"_id_": i, "even": i % 2 == 0} for i in range(6)])
    assert users.delete({"even": True}) == {"deleted": 3}
    assert users.delete(1) == {"deleted": 1}
    assert users.count() == 2 and users.length() == 2


def test_bad_keys_are_refused(users):
    for bad in ([1], {"a": 1}, None):
        with pytest.raises(errors.BadValueError, match="key"):
            users.insert({"_id_": bad})
    with pytest.raises(errors.BadValueError, match="at most"):
        users.insert({"_id_": "x" * 600})
    assert users.count() == 0


def test_list_pages_in_key_order(users):
    users.batch_insert([{"_id_": f"k{i:02}"} for i in range(10)])
    page = users.list(limit=4)
    assert [d["_id_"] for d in page] == ["k00", "k01", "k02", "k03"]
    assert [d["_id_"] for d in users.list(after="k03", limit=3)] == ["k04", "k05", "k06"]


def test_types_survive(users, tmp_path):
    import datetime
    from bson import ObjectId, Decimal128
    doc = {"_id_": ObjectId(), "d": datetime.datetime(2026, 3, 14, tzinfo=datetime.timezone.utc),
           "dec": Decimal128("1.10"), "big": Int64(2**40), "u": uuid.uuid4(), "b": b"\x00\x01"}
    users.insert(doc)
    got = users.get(doc["_id_"])
    assert got == doc and isinstance(got["big"], Int64) and isinstance(got["dec"], Decimal128)


def test_document_over_16_mib_is_refused(users):
    with pytest.raises(errors.DocumentTooLargeError):
        users.insert({"_id_": "big", "data": b"x" * (16 * 1024 * 1024 + 1)})
    assert users.count() == 0


def test_reopen_keeps_documents_and_count(tmp_path):
    with hoarddb.open(tmp_path) as c:
        c["app"].create_bucket("U").batch_insert([{"_id_": i} for i in range(50)])
    with hoarddb.open(tmp_path) as c:
        assert c["app"].U.count() == 50 and c["app"].U.get(49) == {"_id_": 49}


def test_batch_put_replaces_all_or_none(db):
    b = db.create_bucket("U", type="hash", indices=[{"field": "E", "unique": True}])
    b.batch_insert([{"_id_": 1, "E": "a"}, {"_id_": 2, "E": "b"}])
    assert b.batch_put([{"_id_": 1, "E": "a2"}, {"_id_": 3, "E": "c"}]) == [1, 3]
    assert b.count() == 3 and b.get(1)["E"] == "a2"
    with pytest.raises(errors.DuplicateKeyError, match="position 1"):
        b.batch_put([{"_id_": 4, "E": "d"}, {"_id_": 5, "E": "b"}])
    assert b.get(4) is None
    with pytest.raises(errors.BadValueError, match="position 0"):
        b.batch_put([{"E": "x"}])
