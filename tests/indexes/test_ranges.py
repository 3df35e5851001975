"""Ordered indexes (indexes.md, "Ranges" and "desc"): a range after the equality prefix is read from the index,
in either direction, and search still answers what find answers."""

from __future__ import annotations

import datetime
import math

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from hypothesis import given, settings, strategies as st

import hoarddb
from hoarddb import errors
from hoarddb.tools.check import check

FULL_SCAN = "none — full scan"
T = datetime.datetime(2026, 9, 1, tzinfo=datetime.timezone.utc)


def ids(reply):
    return [d["_id_"] for d in reply]


@pytest.fixture
def expenses(db):
    b = db.create_bucket("Expenses", type="hash", indices=[
        {"fields": ["Category", "Date"], "desc": ["Date"]}, {"field": "Amount"}])
    b.batch_insert([{"_id_": f"e{i:02}", "Category": ["rent", "repairs", "tax"][i % 3],
                     "Date": T + datetime.timedelta(days=i), "Amount": i * 10} for i in range(60)])
    return b


def test_a_range_after_the_equality_prefix_reads_only_the_entries_in_range(expenses):
    f = {"Category": "repairs", "Date": {"$gte": T + datetime.timedelta(days=30)}}
    got = expenses.search(f, explain=True)
    assert got.index_used == "Category_1_Date_-1" and ids(got) == ids(expenses.find(f))
    since = T + datetime.timedelta(days=30)
    assert got.explain["served"] == {"equality": ["Category"], "range": {"Date": {"$gte": since}}}
    assert got.explain["keys_examined"] == got.explain["docs_examined"] == len(got) == 10


@pytest.mark.parametrize("op, bound, n", [("$gt", 500, 9), ("$gte", 500, 10), ("$lt", 100, 10), ("$lte", 100, 11)])
def test_each_bound_reads_exactly_its_entries(expenses, op, bound, n):
    got = expenses.search({"Amount": {op: bound}}, explain=True)
    assert got.index_used == "Amount_1" and len(got) == n == got.explain["keys_examined"]
    assert ids(got) == ids(expenses.find({"Amount": {op: bound}}))


def test_with_two_bounds_one_is_read_and_the_other_checked(expenses):
    # an array [1, 7] meets {$gt: 2, $lt: 4} with two elements, so the index reads from the lower bound on
    f = {"Amount": {"$gt": 100, "$lt": 150}}
    got = expenses.search(f, explain=True)
    assert ids(got) == ["e11", "e12", "e13", "e14"] and got.explain["served"]["range"] == {"Amount": {"$gt": 100}}
    expenses.insert({"_id_": "arr", "Amount": [1, 700]})
    assert "arr" in ids(expenses.search(f)) and ids(expenses.search(f)) == ids(expenses.find(f))


def test_a_range_reads_only_its_own_type(expenses):
    expenses.batch_insert([{"_id_": "s", "Amount": "900"}, {"_id_": "n", "Amount": None}, {"_id_": "m"},
                           {"_id_": "d", "Amount": T}, {"_id_": "nan", "Amount": math.nan}])
    for f in ({"Amount": {"$gt": 550}}, {"Amount": {"$lt": "z"}}, {"Amount": {"$gte": T}},
              {"Amount": {"$lte": -1}}):
        got = expenses.search(f, explain=True)
        assert got.index_used == "Amount_1" and got.explain["keys_examined"] == len(got), f
        assert ids(got) == ids(expenses.find(f)), f
    # bounds every type (or no value) meets read no range: the filter is answered by a scan
    for f in ({"Amount": {"$gte": None}}, {"Amount": {"$lt": MaxKey()}}, {"Amount": {"$gt": MinKey()}},
              {"Amount": {"$gte": math.nan}}, {"Amount": {"$gt": [1]}}):
        got = expenses.search(f)
        assert got.index_used == FULL_SCAN and ids(got) == ids(expenses.find(f)), f


def test_an_equality_covering_more_fields_beats_a_range(db):
    b = db.create_bucket("B", type="hash", indices=[{"field": "A"}, {"fields": ["C", "A"]}, {"fields": ["C", "D"]}])
    b.batch_insert([{"_id_": i, "A": i, "C": i % 2, "D": i % 3} for i in range(12)])
    got = b.search({"C": 1, "A": {"$gt": 4}}, explain=True)
    assert got.index_used == "C_1_A_1" and ids(got) == [5, 7, 9, 11]
    assert "also reads a range of 'A'" in {c["index"]: c["reason"] for c in got.explain["considered"]}["C_1_D_1"]
    got = b.search({"C": 1, "D": 2, "A": {"$gt": 4}})
    assert got.index_used == "C_1_D_1" and ids(got) == [5, 11]


def test_desc_is_accepted_and_named(db):
    b = db.create_bucket("Tickets", type="hash", indices=[
        {"fields": ["Property", "Opened"], "desc": ["Opened"]}, {"field": "Score", "desc": True},
        {"field": "Due", "desc": True, "name": "by_due"}])
    assert [ix["summary"] for ix in b.stats()["indexes"]] == [
        "Property_1_Opened_-1", "Score_-1", "by_due (desc Due)"]
    assert b.describe()["indexes"][0]["desc"] == ["Opened"]
    b.batch_insert([{"_id_": i, "Property": "p1", "Opened": i, "Score": [i, -i], "Due": None} for i in range(5)])
    assert ids(b.search({"Score": 3})) == [3] and ids(b.search({"Score": [3, -3]})) == [3]
    assert ids(b.search({"Property": "p1", "Opened": {"$lte": 1}})) == [0, 1]
    with pytest.raises(errors.BadValueError, match="TTL index cannot be desc"):
        db.create_bucket("S", type="hash", indices=[{"field": "At", "desc": True, "expire_after_seconds": 5}])


def test_a_desc_index_survives_reopen_and_check(tmp_path):
    with hoarddb.open(tmp_path / "d") as c:
        b = c["app"].create_bucket("B", type="hash", indices=[{"fields": ["A", "B"], "desc": True, "unique": True},
                                                             {"fields": ["C", "B"], "desc": ["B"]}])
        b.batch_insert([{"_id_": i, "A": i % 4, "B": [i, str(i)], "C": i % 2} for i in range(40)])
        b.update({"_id_": 1}, {"$set": {"B": -1.5}})
        b.delete({"A": 2})
    assert check(tmp_path / "d").ok
    with hoarddb.open(tmp_path / "d") as c:
        b = c["app"].B
        assert [ix["state"] for ix in b.describe()["indexes"]] == ["ready", "ready"]
        f = {"C": 1, "B": {"$lt": 20}}
        assert b.search(f).index_used == "C_1_B_-1" and ids(b.search(f)) == ids(b.find(f))
        with pytest.raises(errors.DuplicateKeyError):
            b.insert({"_id_": "x", "A": 0, "B": 4})


# -- search over ranges gives find's answer -----------------------------------------------------

SCALARS = st.one_of(
    st.none(), st.integers(-5, 5), st.floats(-5, 5, width=16), st.sampled_from([math.nan, math.inf, -math.inf, -0.0]),
    st.integers(-5, 5).map(Int64),
    st.sampled_from([Decimal128("1.5"), Decimal128("-0.0"), Decimal128("2")]), st.sampled_from(["", "a", "b", "ab"]),
    st.booleans(), st.integers(0, 3).map(lambda d: T + datetime.timedelta(days=d)),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.lists(st.lists(SCALARS, max_size=2), max_size=2),
                   st.fixed_dictionaries({"x": SCALARS}))
BOUNDS = st.one_of(SCALARS, st.sampled_from([MinKey(), MaxKey()]), st.lists(SCALARS, max_size=2))
RANGE = st.dictionaries(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), BOUNDS, min_size=1, max_size=2)
DOCS = st.lists(st.fixed_dictionaries({}, optional={"A": VALUES, "B": VALUES, "C": st.sampled_from(["x", "y"])}),
                max_size=30)
FILTERS = st.one_of(
    st.builds(lambda r: {"A": r}, RANGE),
    st.builds(lambda c, r: {"C": c, "B": r}, st.sampled_from(["x", "y"]), RANGE),
    st.builds(lambda c, r, r2: {"C": c, "$and": [{"B": r}, {"B": r2}]}, st.sampled_from(["x", "y"]), RANGE, RANGE),
    st.builds(lambda a, r: {"A": a, "B": r}, SCALARS, RANGE),
)


@settings(max_examples=60)
@given(docs=DOCS, filters=st.lists(FILTERS, min_size=1, max_size=8), desc=st.booleans())
def test_search_over_ranges_answers_as_find(tmp_path_factory, docs, filters, desc):
    with hoarddb.open(tmp_path_factory.mktemp("d")) as c:
        b = c["app"].create_bucket("B", type="hash", indices=[
            {"field": "A", "desc": desc}, {"fields": ["C", "B"], "desc": ["B"] if desc else False},
            {"fields": ["A", "B"], "desc": ["A"] if desc else ["B"]}])
        for i, d in enumerate(docs):
            try:
                b.insert({"_id_": i, **d})
            except errors.BadValueError:  # arrays in two fields of one index
                pass
        for f in filters:
            got = b.search(f)
            assert ids(got) == ids(b.find(f)), (f, got.index_used)
