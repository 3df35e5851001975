"""Unique indexes (indexes.md, "Unique indexes" and "What unique means, exactly"): one test per rule."""

from __future__ import annotations

import datetime

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64

import hoarddb
from hoarddb import errors

SPEC_MESSAGE = (
    'Duplicate value for unique index "Email_1" on bucket "Users": Email = "dalek@example.com" '
    'is already used by document "u1". Change the value, update that document instead, or delete it first.'
)


@pytest.fixture
def users(db):
    return db.create_bucket("Users", type="hash", indices=[{"field": "Email", "unique": True}])


def test_second_insert_is_refused_with_the_spec_message_and_nothing_written(users):
    users.insert({"_id_": "u1", "Email": "dalek@example.com"})
    with pytest.raises(hoarddb.DuplicateKeyError) as e:
        users.insert({"_id_": "u2", "Email": "dalek@example.com"})
    assert e.value.message == SPEC_MESSAGE
    assert e.value.code == 0x0F and e.value.codeName == "DUPLICATE_KEY"
    assert (e.value.index, e.value.values, e.value.holder) == ("Email_1", {"Email": "dalek@example.com"}, "u1")
    assert users.get("u2") is None and users.count() == 1


def test_field_line_unique_is_the_same_index(db):
    users = db.create_bucket("Users", type="hash", fields=[{"name": "Email", "type": "string", "keywords": ["unique"]}])
    users.insert({"_id_": "u1", "Email": "dalek@example.com"})
    with pytest.raises(errors.DuplicateKeyError) as e:
        users.insert({"_id_": "u2", "Email": "dalek@example.com"})
    assert e.value.message == SPEC_MESSAGE


def test_one_bucket_uniqueness_is_per_bucket_and_per_database(client):
    for dbname in ("app", "other"):
        for name in ("Users", "Staff"):
            b = client[dbname].create_bucket(name, type="hash", indices=[{"field": "Email", "unique": True}])
            b.insert({"_id_": "u1", "Email": "dalek@example.com"})
    assert sum(client[d][n].count() for d in ("app", "other") for n in ("Users", "Staff")) == 4


@pytest.mark.parametrize("first, second", [
    (30, 30.0), (30, Int64(30)), (30.0, Int64(30)), (0, -0.0), (30, Decimal128("30")), (Decimal128("1.50"), 1.5),
])
def test_numbers_are_values_not_spellings(db, first, second):
    b = db.create_bucket("B", type="hash", indices=[{"field": "Age", "unique": True}])
    b.insert({"_id_": "a", "Age": first})
    with pytest.raises(errors.DuplicateKeyError):
        b.insert({"_id_": "b", "Age": second})


def test_different_numbers_are_different_values(db):
    b = db.create_bucket("B", type="hash", indices=[{"field": "Age", "unique": True}])
    b.batch_insert([{"_id_": i, "Age": v} for i, v in enumerate([30, 30.5, "30", 2**53 + 1, 2**53])])
    assert b.count() == 5


def test_a_missing_field_is_null_and_only_one_document_may_lack_it(users):
    users.insert({"_id_": "u1"})
    with pytest.raises(errors.DuplicateKeyError) as e:
        users.insert({"_id_": "u2", "Email": None})
    assert "Email = null" in e.value.message and 'document "u1"' in e.value.message
    with pytest.raises(errors.DuplicateKeyError, match="Email = null"):
        users.insert({"_id_": "u3"})


def test_updating_a_document_keeps_its_own_value(users):
    users.insert({"_id_": "u1", "Email": "a@x", "Name": "A"})
    assert users.update({"_id_": "u1"}, {"$set": {"Name": "B", "Email": "a@x"}}) == {"matched": 1, "modified": 1}
    users.put({"_id_": "u1", "Email": "a@x", "Name": "C"})
    assert users.get("u1")["Name"] == "C"


def test_a_batch_is_all_or_nothing_and_names_the_document_and_position(users):
    users.insert({"_id_": "u1", "Email": "taken@x"})
    with pytest.raises(errors.DuplicateKeyError) as e:
        users.batch_insert([{"_id_": "a", "Email": "new@x"}, {"_id_": "b", "Email": "taken@x"}])
    assert 'batch document "b" at position 1' in e.value.message
    assert users.count() == 1 and users.get("a") is None


def test_two_documents_of_one_batch_with_one_value_are_refused(users):
    with pytest.raises(errors.DuplicateKeyError) as e:
        users.batch_insert([{"_id_": "a", "Email": "x@x"}, {"_id_": "b", "Email": "y@x"}, {"_id_": "c", "Email": "x@x"}])
    assert 'already used by document "a"' in e.value.message and "position 2" in e.value.message
    assert users.count() == 0


def test_update_operators_reach_the_same_check(db):
    b = db.create_bucket("B", type="hash", indices=[{"field": "N", "unique": True}])
    b.batch_insert([{"_id_": "a", "N": 1}, {"_id_": "b", "N": 2}])
    for update in ({"$set": {"N": 2}}, {"$inc": {"N": 1}}, {"$max": {"N": 2}}, {"$rename": {"M": "N"}}):
        if "$rename" in update:
            b.update({"_id_": "a"}, {"$set": {"M": 2}})
        with pytest.raises(errors.DuplicateKeyError, match='already used by document "b"'):
            b.update({"_id_": "a"}, update)
    assert b.get("b")["N"] == 2 and b.get("a")["N"] == 1


def test_a_refused_multi_update_writes_nothing(db):
    b = db.create_bucket("B", type="hash", indices=[{"field": "N", "unique": True}])
    b.batch_insert([{"_id_": "a", "N": 1, "t": 0}, {"_id_": "b", "N": 2, "t": 0}, {"_id_": "c", "N": 3, "t": 0}])
    with pytest.raises(errors.DuplicateKeyError):
        b.update({}, {"$set": {"N": 9, "t": 1}})  # a takes 9, then b is refused
    assert [d["t"] for d in b.find()] == [0, 0, 0]


def test_a_multi_update_moving_one_document_off_a_value_and_another_onto_it_in_that_order_is_accepted(db):
    b = db.create_bucket("B", type="hash", indices=[{"field": "N", "unique": True}])
    b.batch_insert([{"_id_": "a", "N": 1}, {"_id_": "b", "N": 2}])
    assert b.update({}, {"$inc": {"N": -1}}) == {"matched": 2, "modified": 2}  # a: 1 -> 0, then b: 2 -> 1
    assert [d["N"] for d in b.find()] == [0, 1]
    with pytest.raises(errors.DuplicateKeyError):
        b.update({}, {"$inc": {"N": 1}})  # a: 0 -> 1 first, while b still holds 1
    assert [d["N"] for d in b.find()] == [0, 1]


def test_delete_frees_the_value(users):
    users.insert({"_id_": "u1", "Email": "a@x"})
    users.delete({"_id_": "u1"})
    users.insert({"_id_": "u2", "Email": "a@x"})


def test_compound_unique_makes_the_combination_unique(db):
    b = db.create_bucket("Orders", type="hash", indices=[{"fields": ["CustomerID", "CreatedAt"], "unique": True}])
    t = datetime.datetime(2026, 9, 29, 10, tzinfo=datetime.timezone.utc)
    b.insert({"_id_": "o1", "CustomerID": "c1", "CreatedAt": t})
    b.insert({"_id_": "o2", "CustomerID": "c1", "CreatedAt": t + datetime.timedelta(seconds=1)})
    b.insert({"_id_": "o3", "CustomerID": "c2", "CreatedAt": t})
    with pytest.raises(errors.DuplicateKeyError) as e:
        b.insert({"_id_": "o4", "CustomerID": "c1", "CreatedAt": t})
    assert 'CustomerID = "c1", CreatedAt = ISODate("2026-09-29T10:00:00Z")' in e.value.message
    assert e.value.values == {"CustomerID": "c1", "CreatedAt": t}


def test_array_elements_are_unique_values(db):
    b = db.create_bucket("B", type="hash", indices=[{"field": "Tags", "unique": True}])
    b.insert({"_id_": "a", "Tags": ["x", "y", "x"]})
    with pytest.raises(errors.DuplicateKeyError, match='Tags = "y"'):
        b.insert({"_id_": "b", "Tags": ["z", "y"]})
    b.insert({"_id_": "c", "Tags": "w"})


def test_insert_and_on_duplicate_update_can_branch_on_the_code(users):
    users.insert({"_id_": "u1", "Email": "a@x", "n": 1})
    try:
        users.insert({"_id_": "u9", "Email": "a@x", "n": 2})
    except hoarddb.DuplicateKeyError as e:
        assert e.code == 0x0F
        users.update({"_id_": e.holder}, {"$set": {"n": 2}})
    assert users.get("u1")["n"] == 2
