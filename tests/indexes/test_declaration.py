"""Declaring indexes (indexes.md, "Declaring an index"): every accepted form and every refusal, with its reason."""

from __future__ import annotations

import pytest

from hoarddb import errors


def indexes(bucket):
    return [ix["summary"] for ix in bucket.stats()["indexes"]]


def test_indices_is_a_list_of_names_or_objects(db):
    b = db.create_bucket("Users", type="hash", indices=["Email", {"fields": ["CustomerID", "CreatedAt"]},
                                                        {"field": "Seen", "expire_after_seconds": 3600}])
    assert indexes(b) == ["Email_1", "CustomerID_1_CreatedAt_1", "Seen_1 (ttl 3600s)"]


def test_stats_lists_indexes_as_the_spec_prints_them(db):
    b = db.create_bucket("Users", type="hash", fields=[{"name": "Email", "type": "string", "keywords": ["unique"]}],
                         indices=[{"fields": ["CustomerID", "CreatedAt"]},
                                  {"field": "CreatedAt", "expire_after_seconds": 3600}])
    assert ", ".join(indexes(b)) == "Email_1 (unique), CustomerID_1_CreatedAt_1, CreatedAt_1 (ttl 3600s)"
    assert [ix["state"] for ix in b.describe()["indexes"]] == ["ready"] * 3


def test_unknown_key_is_refused_naming_accepted_keys(db):
    with pytest.raises(errors.UnknownOptionError) as e:
        db.create_bucket("Users", type="hash", indices=[{"field": "Email", "uniqe": True}])
    for key in ("field", "fields", "name", "unique", "expire_after_seconds", "type", "desc"):
        assert key in e.value.message
    with pytest.raises(errors.DatabaseNotFoundError):
        db.buckets()  # nothing was created


@pytest.mark.parametrize("entry, reason", [
    ({"field": "CreatedAt", "unique": True, "expire_after_seconds": 60}, "cannot be unique"),
    ({"fields": ["A", "B"], "expire_after_seconds": 60}, "exactly one field"),
    ({"field": "A", "desc": True, "expire_after_seconds": 60}, "a TTL index cannot be desc"),
    ({"fields": ["A", "B"], "desc": ["C"]}, "desc names 'C', which is not one of the index's fields (A, B)"),
    ({"fields": ["A", "B", "A"]}, "names the field 'A' twice"),
    ({"field": "a.b"}, "top-level fields only"),
    ({"field": "A", "type": "hashed"}, 'may only be "range"'),
    ({"field": "A", "expire_after_seconds": -1}, "from 0 to 2147483647"),
    # NaN, infinity or a time no date can hold would break every later sweep pass
    ({"field": "A", "expire_after_seconds": float("nan")}, "from 0 to 2147483647"),
    ({"field": "A", "expire_after_seconds": float("inf")}, "from 0 to 2147483647"),
    ({"field": "A", "expire_after_seconds": 1e300}, "from 0 to 2147483647"),
    ({"field": "A", "expire_after_seconds": 10**30}, "from 0 to 2147483647"),
    ({"field": "A", "desc": 0}, "desc is true (every field descends), false, or a list of the index's fields"),
    ({"field": "A", "desc": "asc"}, "that descend, such as [\"A\"]; got 'asc'"),
    ({"field": "A", "unique": "yes"}, "true or false"),
    ({"name": "x"}, "exactly one of field"),
    (5, "field name or a document"),
])
def test_refused_declarations_say_why(db, entry, reason):
    with pytest.raises((errors.BadValueError, errors.UnknownOptionError)) as e:
        db.create_bucket("Users", type="hash", indices=[entry])
    assert reason in e.value.message
    assert "app" not in db._client.databases()


def test_two_indexes_on_the_same_fields_are_refused(db):
    with pytest.raises(errors.BadValueError, match="same fields"):
        db.create_bucket("U", type="hash", indices=["Email", {"field": "Email", "name": "other"}])
    with pytest.raises(errors.BadValueError, match="same fields"):
        db.create_bucket("U", type="hash", fields=[{"name": "Email", "type": "string", "keywords": ["unique"]}],
                         indices=["Email"])


def test_two_indexes_with_the_same_name_are_refused(db):
    with pytest.raises(errors.BadValueError, match="named 'idx'"):
        db.create_bucket("U", type="hash", indices=[{"field": "A", "name": "idx"}, {"field": "B", "name": "idx"}])


def test_range_type_is_accepted_with_a_warning_and_ignored(db):
    b = db.create_bucket("U", type="hash", indices=[{"field": "A", "type": "range"}])
    assert any("range" in w and "ignored" in w for w in b.warnings)
    assert indexes(b) == ["A_1"]


def test_a_name_can_be_given(db):
    b = db.create_bucket("U", type="hash", indices=[{"fields": ["A", "B"], "name": "by_ab", "unique": True}])
    assert indexes(b) == ["by_ab (unique)"]


@pytest.mark.parametrize("type_", ["fifo", "lifo", "btree", "heap", "blob"])
def test_only_hash_buckets_take_indexes(db, type_):
    with pytest.raises(errors.BadValueError, match="only hash buckets") as e:
        db.create_bucket("B", type=type_, indices=["A"])
    # the reason fits the type: a queue is not "already sorted by its key"
    assert ("already sorted by its key" in e.value.message) == (type_ == "btree")


def test_the_longest_ttl_is_accepted_and_sweeps(tmp_path):
    import hoarddb
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("S", type="hash", indices=[{"field": "At", "expire_after_seconds": 2**31 - 1}])
        b.batch_insert([{"_id_": "old", "At": -(2**31)}, {"_id_": "new", "At": 0}])
        assert c.sweep_ttl()["expired"] == 1
        assert [d["_id_"] for d in b.find()] == ["new"]


@pytest.mark.parametrize("name, reason", [
    ("Address.City", "top-level fields only"),
    ("$where", "not starting with $"),
    ("", "non-empty string"),
])
def test_a_unique_field_line_is_checked_like_an_indices_entry(db, name, reason):
    # Before, a field line "Address.City string unique" made an index of doc.get("Address.City"):
    # null for every document, so the second insert was refused as a duplicate of null.
    with pytest.raises(errors.BadValueError) as e:
        db.create_bucket("U", type="hash", fields=[{"name": name, "type": "string", "keywords": ["unique"]}])
    assert reason in e.value.message and "unique field line" in e.value.message
    assert "app" not in db._client.databases()


def test_unique_field_line_makes_a_unique_index_and_other_keywords_are_noted(db):
    b = db.create_bucket("Users", type="hash", fields=[
        {"name": "Email", "type": "string", "keywords": ["unique"]},
        {"name": "FirstName", "type": "string", "keywords": ["required"]},
    ])
    assert indexes(b) == ["Email_1 (unique)"]
    assert any("required" in w and "not enforced" in w for w in b.warnings)


def test_alter_bucket_cannot_add_an_index(db, client):
    db.create_bucket("Users", type="hash")
    for options in ({"indices": ["Email"]}, {"fields": [{"name": "Email", "type": "string", "keywords": ["unique"]}]}):
        with pytest.raises(errors.BadValueError, match="declare indexes when you create the bucket"):
            client.execute({"op": "alter_bucket", "db": "app", "bucket": "Users", "options": options})
    assert db.Users.stats()["indexes"] == []


def test_indexes_survive_reopen(tmp_path):
    import hoarddb
    with hoarddb.open(tmp_path) as c:
        c["app"].create_bucket("U", type="hash", indices=[{"field": "Email", "unique": True}])
        c["app"].U.insert({"_id_": "u1", "Email": "a@x"})
    with hoarddb.open(tmp_path) as c:
        with pytest.raises(errors.DuplicateKeyError):
            c["app"].U.insert({"_id_": "u2", "Email": "a@x"})
