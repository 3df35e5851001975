"""search and the planner (indexes.md, "Compound indexes" and "What search does, and how it says so")."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, strategies as st

import hoarddb
from hoarddb import errors

T = datetime.datetime(2026, 9, 29, 10, tzinfo=datetime.timezone.utc)


@pytest.fixture
def orders(db):
    b = db.create_bucket("Orders", type="hash", indices=[{"fields": ["CustomerID", "CreatedAt"]}])
    b.batch_insert([
        {"_id_": f"o{i}", "CustomerID": f"c{i % 3}", "CreatedAt": T + datetime.timedelta(hours=i), "Total": i}
        for i in range(12)
    ])
    return b


def test_a_compound_index_serves_a_prefix_of_its_fields(orders):
    got = orders.search({"CustomerID": "c1"})
    assert got.index_used == "CustomerID_1_CreatedAt_1"
    assert [d["_id_"] for d in got] == sorted(d["_id_"] for d in orders.find({"CustomerID": "c1"}))
    got = orders.search({"CustomerID": "c1", "CreatedAt": T + datetime.timedelta(hours=4)})
    assert got.index_used == "CustomerID_1_CreatedAt_1" and [d["_id_"] for d in got] == ["o4"]


def test_a_search_on_a_later_field_alone_does_not_use_it(orders):
    got = orders.search({"CreatedAt": T})
    assert got.index_used == "none — full scan" and [d["_id_"] for d in got] == ["o0"]


def test_every_predicate_is_still_checked(orders):
    got = orders.search({"CustomerID": "c1", "Total": {"$gt": 5}})
    assert got.index_used == "CustomerID_1_CreatedAt_1"
    assert sorted(d["Total"] for d in got) == [7, 10]


def test_find_always_reports_the_full_scan(orders):
    assert orders.find({"CustomerID": "c1"}).index_used == "none — full scan"


def test_no_filter_or_no_equality_scans(orders):
    assert orders.search().index_used == "none — full scan"
    assert orders.search({"Total": {"$gt": 3}}).index_used == "none — full scan"
    assert orders.search({"CustomerID": {"$ne": "c0"}}).index_used == "none — full scan"
    # a range on the first field uses the index (see test_ranges.py)
    assert orders.search({"CustomerID": {"$gt": "c0"}}).index_used == "CustomerID_1_CreatedAt_1"
    assert orders.search({"$or": [{"CustomerID": "c1"}]}).index_used == "none — full scan"
    assert orders.search({"$and": [{"CustomerID": "c1"}]}).index_used == "CustomerID_1_CreatedAt_1"
    assert orders.search({"CustomerID": {"$eq": "c1"}}).index_used == "CustomerID_1_CreatedAt_1"


def test_ties_more_coverage_then_unique_then_declared_first(db):
    b = db.create_bucket("B", type="hash", indices=[
        {"field": "A"}, {"fields": ["A", "B"]}, {"field": "C"}, {"field": "D", "unique": True}, {"field": "E"},
    ])
    b.insert({"_id_": 1, "A": 1, "B": 1, "C": 1, "D": 1, "E": 1})
    assert b.search({"A": 1, "B": 1}).index_used == "A_1_B_1"  # covers more
    assert b.search({"C": 1, "D": 1}).index_used == "D_1"  # unique wins a tie
    assert b.search({"E": 1, "C": 1}).index_used == "C_1"  # declared first
    assert b.search({"A": 1}).index_used == "A_1"  # A_1 and A_1_B_1 both cover one field: declared first
    for _ in range(3):  # the same every time
        assert b.search({"E": 1, "C": 1, "A": 1}).index_used == "A_1"


def test_explain_says_what_was_considered_and_examined(db):
    b = db.create_bucket("B", type="hash", indices=[{"field": "A"}, {"field": "B", "unique": True}, {"field": "Z"}])
    b.batch_insert([{"_id_": i, "A": i % 2, "B": i} for i in range(10)])
    got = b.search({"A": 1, "B": 3}, explain=True)
    ex = got.explain
    assert ex["index_used"] == "B_1" and [d["_id_"] for d in got] == [3]
    reasons = {c["index"]: c["reason"] for c in ex["considered"]}
    assert reasons["B_1"] == "chosen"
    assert "unique" in reasons["A_1"]
    assert "not fixed by equality" in reasons["Z_1"]
    assert ex["keys_examined"] == 1 and ex["docs_examined"] == 1 and ex["returned"] == 1
    assert ex["served"] == {"equality": ["B"]}
    # a range on an index's first field reads the entries in range (A > 0: the five 1s)
    ranged = b.search({"A": {"$gt": 0}}, explain=True).explain
    assert ranged["index_used"] == "A_1" and ranged["served"] == {"equality": [], "range": {"A": {"$gt": 0}}}
    assert ranged["docs_examined"] == 5 and ranged["keys_examined"] == 5
    scan = b.search({"C": {"$gt": 0}}, explain=True).explain
    assert scan["docs_examined"] == 10 and scan["keys_examined"] == 0 and scan["served"] == {}


def test_search_matches_array_elements_and_missing_fields_like_find(db):
    b = db.create_bucket("B", type="hash", indices=["Tags"])
    b.batch_insert([{"_id_": 1, "Tags": ["a", "b"]}, {"_id_": 2, "Tags": "a"}, {"_id_": 3}, {"_id_": 4, "Tags": None},
                    {"_id_": 5, "Tags": [["a"], "c"]}])
    for value in ("a", "b", None, ["a"], ["a", "b"], "zz"):
        got = b.search({"Tags": value})
        assert got.index_used == "Tags_1"
        assert got == list(b.find({"Tags": value})), value


def test_search_limit(orders):
    assert len(orders.search({"CustomerID": "c0"}, limit=2)) == 2


def test_search_on_a_bucket_without_indexes_scans(db):
    b = db.create_bucket("B", type="hash")
    b.insert({"_id_": 1, "A": 1})
    assert b.search({"A": 1}).index_used == "none — full scan"


def test_search_is_a_hash_verb(db):
    db.create_bucket("Q", type="fifo")
    with pytest.raises(errors.VerbNotSupportedError):
        db.Q.search({})


scalars = st.one_of(st.integers(-3, 3), st.sampled_from([1.0, 2.5, -0.0]), st.sampled_from(["a", "b"]), st.none())
values = st.one_of(scalars, st.lists(scalars, max_size=3))
documents = st.fixed_dictionaries({}, optional={"A": values, "B": values, "C": scalars})
filters = st.dictionaries(st.sampled_from(["A", "B", "C"]),
                          st.one_of(scalars, st.builds(lambda v: {"$eq": v}, scalars),
                                    st.builds(lambda v: {"$gte": v}, st.integers(-3, 3))), max_size=3)


@given(st.lists(documents, max_size=25), st.lists(filters, min_size=1, max_size=6))
def test_search_and_find_agree(tmp_path_factory, docs, fs):
    with hoarddb.open(tmp_path_factory.mktemp("s")) as c:
        b = c["app"].create_bucket("B", type="hash", indices=[{"fields": ["A", "C"]}, "B", {"field": "C"}])
        for i, d in enumerate(docs):
            try:
                b.insert(dict(d, _id_=i))
            except errors.BadValueError:
                pass  # arrays in two fields of one compound index are refused
        for f in fs:
            assert list(b.search(f)) == list(b.find(f)), f
