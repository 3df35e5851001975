"""What a stored document may be called inside: no field name that begins with $ or holds a dot, and dates within years 1 to 9999."""

from __future__ import annotations

import datetime

import pytest

import hoarddb
from hoarddb.errors import BadValueError

EST = datetime.timezone(datetime.timedelta(hours=-5))


@pytest.fixture
def db(tmp_path):
    with hoarddb.open(tmp_path / "d") as client:
        db = client["app"]
        db.create_bucket("U", type="hash")
        db.create_bucket("T", type="btree", key="k")
        db.create_bucket("Q", type="fifo")
        db.create_bucket("H", type="heap")
        yield db


BAD = [{"a.b": 1}, {"$x": 1}, {"n": {"a.b": 1}}, {"n": [{"$y": 2}]}, {"n": [[{"p.q": 1}]]}]


@pytest.mark.parametrize("doc", BAD, ids=["dot", "dollar", "nested-dot", "in-array", "deep"])
def test_every_write_refuses_a_dotted_or_dollar_field_name_and_writes_nothing(db, doc):
    writes = [
        (lambda: db.U.insert({"_id_": "k", **doc}), db.U),
        (lambda: db.U.put({"_id_": "k", **doc}), db.U),
        (lambda: db.U.batch_insert([{"_id_": "ok"}, {"_id_": "k", **doc}]), db.U),
        (lambda: db.T.insert({"k": 1, **doc}), db.T),
        (lambda: db.Q.push(doc), db.Q),
        (lambda: db.Q.batch_push([{"fine": 1}, doc]), db.Q),
        (lambda: db.H.push({"priority": 1, **doc}), db.H),
    ]
    for write, bucket in writes:
        with pytest.raises(BadValueError) as exc:
            write()
        assert exc.value.code == 2
        name = next(iter(doc)) if "n" not in doc else None
        assert "field names may not begin with '$' or hold a '.'" in exc.value.message
        if name:
            assert repr(name) in exc.value.message
        assert bucket.length() == 0


def test_an_update_that_would_store_a_dotted_name_is_refused_and_changes_nothing(db):
    db.U.insert({"_id_": "k", "a": 1})
    db.U.update({"_id_": "k"}, {"$set": {"x.y": 2}})  # a path: x is a document holding y
    assert db.U.get("k") == {"_id_": "k", "a": 1, "x": {"y": 2}}
    with pytest.raises(BadValueError, match="'p.q'"):
        db.U.update({"_id_": "k"}, {"$set": {"x": {"p.q": 3}}})
    assert db.U.get("k") == {"_id_": "k", "a": 1, "x": {"y": 2}}


def test_dotted_names_stay_allowed_in_filters_and_updates(db):
    db.U.insert({"_id_": "k", "a": {"b": 5}})
    assert db.U.find({"a.b": 5}) == [{"_id_": "k", "a": {"b": 5}}]
    assert db.U.count({"a.b": {"$gt": 4}}) == 1


def test_a_date_past_9999_in_utc_is_refused_as_a_date_out_of_range(db):
    late = datetime.datetime(9999, 12, 31, 23, tzinfo=EST)  # 9999-12-31 23:00 -05:00 is year 10000 in UTC
    with pytest.raises(BadValueError) as exc:
        db.U.insert({"_id_": "k", "when": late})
    assert "date out of range" in exc.value.message and "1 to 9999 in UTC" in exc.value.message
    assert "integer" not in exc.value.message
    assert db.U.length() == 0
    db.U.insert({"_id_": "k", "when": datetime.datetime(9999, 12, 31, 18, tzinfo=EST)})  # 23:00 UTC: fine


def test_a_dbref_keeps_its_dollar_names_and_nothing_else_does(db):
    """{$ref, $id, $db?} is how a DBRef is written (MongoDB's one use of $ names in a document): it is stored as one."""
    from bson.dbref import DBRef

    db.Q.push({"r": {"$ref": "users", "$id": 7}, "s": [{"$ref": "u", "$id": 1, "$db": "app", "note": "x"}]})
    assert db.Q.pop() == {"r": DBRef("users", 7), "s": [DBRef("u", 1, "app", note="x")]}
    for bad in ({"$ref": 5, "$id": 1}, {"$id": 1, "$ref": "u"}, {"$ref": "u"}, {"$ref": "u", "$id": 1, "$x": 2}):
        with pytest.raises(BadValueError, match="field names may not begin with"):
            db.Q.push({"r": bad})
    assert db.Q.length() == 0
