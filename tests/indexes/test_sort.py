"""Sorts served by an index (indexes.md, "Sorts"): the index is read in the sort's order and stops at the
limit, explain says so, and the answer is always the one find's in-memory sort gives."""

from __future__ import annotations

import datetime
import math

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from hypothesis import given, settings, strategies as st

import hoarddb
from hoarddb import errors

FULL_SCAN = "none — full scan"
T = datetime.datetime(2026, 9, 1, tzinfo=datetime.timezone.utc)


def ids(reply):
    return [d["_id_"] for d in reply]


@pytest.fixture
def tickets(db):
    b = db.create_bucket("Tickets", type="hash", indices=[
        {"fields": ["Category", "Date"]}, {"field": "Cost", "desc": True}, {"field": "Title", "sparse": True}])
    b.batch_insert([{"_id_": f"t{i:03}", "Category": ["plumbing", "roof", "garden"][i % 3],
                     "Date": T + datetime.timedelta(hours=i), "Cost": i % 50} for i in range(300)])
    return b


def test_the_ten_newest_of_a_category_read_ten_entries_backward(tickets):
    f, sort = {"Category": "roof"}, {"Date": -1}
    got = tickets.search(f, sort=sort, limit=10, explain=True)
    assert ids(got) == ids(tickets.find(f, sort=sort, limit=10)) == [f"t{i:03}" for i in range(298, 268, -3)]
    assert got.index_used == "Category_1_Date_1" and got.explain["sort"] == "index"
    assert got.explain["served"] == {"equality": ["Category"], "sort": {"index": "Date", "read": "backward"}}
    assert got.explain["keys_examined"] == got.explain["docs_examined"] == 10


def test_ascending_and_with_skip(tickets):
    f = {"Category": "garden"}
    got = tickets.search(f, sort={"Date": 1}, skip=5, limit=3, explain=True)
    assert ids(got) == ["t017", "t020", "t023"] == ids(tickets.find(f, sort={"Date": 1}, skip=5, limit=3))
    assert got.explain["served"]["sort"]["read"] == "forward" and got.explain["keys_examined"] == 8


def test_a_descending_index_is_read_forward_for_a_descending_sort_and_ties_come_in_key_order(tickets):
    got = tickets.search({}, sort={"Cost": -1}, limit=7, explain=True)
    assert ids(got) == ["t049", "t099", "t149", "t199", "t249", "t299", "t048"]
    assert ids(got) == ids(tickets.find({}, sort={"Cost": -1}, limit=7))
    assert got.index_used == "Cost_-1" and got.explain["served"]["sort"] == {"index": "Cost", "read": "forward"}
    up = tickets.search({}, sort={"Cost": 1}, limit=7, explain=True)
    assert ids(up) == ["t000", "t050", "t100", "t150", "t200", "t250", "t001"]
    assert up.explain["served"]["sort"]["read"] == "backward" and up.explain["keys_examined"] == 7


def test_a_range_on_the_sorted_field_is_read_in_order(tickets):
    f = {"Category": "roof", "Date": {"$lt": T + datetime.timedelta(hours=100)}}
    got = tickets.search(f, sort={"Date": -1}, limit=2, explain=True)
    assert ids(got) == ["t097", "t094"] == ids(tickets.find(f, sort={"Date": -1}, limit=2))
    assert got.explain["sort"] == "index" and got.explain["keys_examined"] == 2


def test_a_filter_no_index_serves_is_read_in_the_order_of_an_index_on_the_sort(tickets):
    f = {"Date": {"$type": "date"}, "Category": {"$ne": "roof"}}
    got = tickets.search(f, sort={"Cost": -1}, limit=3, explain=True)
    assert ids(got) == ids(tickets.find(f, sort={"Cost": -1}, limit=3)) == ["t099", "t149", "t249"]
    assert got.index_used == "Cost_-1" and got.explain["served"] == {"equality": [], "sort": {
        "index": "Cost", "read": "forward"}}
    assert got.explain["docs_examined"] == 5  # t049 and t199 are roof tickets
    assert got.explain["considered"][0]["index"] == "Cost_-1"
    assert got.explain["considered"][0]["reason"].startswith("chosen: it is ordered by 'Cost'")


def test_a_unique_index_serves_a_sort(db):
    b = db.create_bucket("U", type="hash", indices=[{"field": "Email", "unique": True}, {"fields": ["K", "N"],
                                                                                       "unique": True}])
    b.batch_insert([{"_id_": i, "Email": f"u{(i * 7) % 20:02}@x", "K": i % 2, "N": -i} for i in range(20)])
    got = b.search({}, sort={"Email": -1}, limit=3, explain=True)
    assert [d["Email"] for d in got] == ["u19@x", "u18@x", "u17@x"] and got.explain["keys_examined"] == 3
    got = b.search({"K": 1}, sort={"N": 1}, skip=1, limit=2, explain=True)
    assert ids(got) == [17, 15] == ids(b.find({"K": 1}, sort={"N": 1}, skip=1, limit=2))
    assert got.index_used == "K_1_N_1" and got.explain["sort"] == "index"


def test_later_sort_keys_are_sorted_in_memory_within_ties(tickets):
    sort = {"Cost": 1, "Date": -1}
    got = tickets.search({}, sort=sort, limit=8, explain=True)
    assert ids(got) == ids(tickets.find({}, sort=sort, limit=8))
    assert ids(got)[:6] == ["t250", "t200", "t150", "t100", "t050", "t000"]
    assert got.explain["sort"] == "index" and got.explain["served"]["sort"]["ties"] == "memory"
    assert got.explain["docs_examined"] == 12  # the two runs of Cost 0 and 1, 6 each


def test_which_sorts_fall_back_to_memory_and_why(tickets):
    cases = [
        ({"Category": "roof"}, {"Cost": -1}, "is not ordered by 'Cost'"),  # the filter's index is chosen
        ({}, {"Date": 1}, "no index that may serve this filter has 'Date' as its first field"),
        ({}, {"Title": 1}, "no index that may serve this filter has 'Title'"),  # sparse: it omits documents
        ({"Category": {"$in": ["roof"]}}, {"Category.x": 1}, "'Category.x'"),
        ({"Category": "roof", "Date": T}, {"Date": 1}, "is not ordered by 'Date' after the fields the filter fixes"),
    ]
    for f, sort, why in cases:
        got = tickets.search(f, sort=sort, limit=4, explain=True)
        assert got.explain["sort"] == "memory" and why in got.explain["sort_in_memory"], (f, sort)
        assert ids(got) == ids(tickets.find(f, sort=sort, limit=4)), (f, sort)


def test_a_sparse_index_serves_a_sort_when_the_filter_shows_every_match_has_an_entry(tickets):
    tickets.batch_insert([{"_id_": f"x{i}", "Title": f"leak {i % 4}"} for i in range(8)])
    f = {"Title": {"$exists": True}}
    got = tickets.search(f, sort={"Title": -1}, limit=3, explain=True)
    assert ids(got) == ["x3", "x7", "x2"] == ids(tickets.find(f, sort={"Title": -1}, limit=3))
    assert got.index_used == "Title_1" and got.explain["sort"] == "index"


def test_when_the_filter_pins_an_array_the_sort_is_done_in_memory(tickets):
    f = {"Category": ["roof"]}
    got = tickets.search(f, sort={"Date": -1}, limit=2, explain=True)
    assert got.explain["sort"] == "memory" and "pins an array" in got.explain["sort_in_memory"]


def test_arrays_sort_at_their_least_element_up_and_greatest_down(db):
    b = db.create_bucket("B", type="hash", indices=[{"field": "V"}])
    b.batch_insert([{"_id_": 1, "V": [5, 1]}, {"_id_": 2, "V": 3}, {"_id_": 3, "V": [2, 9]},
                    {"_id_": 4}, {"_id_": 5, "V": None}, {"_id_": 6, "V": [[0], "s"]}])
    assert ids(b.search({}, sort={"V": 1})) == [4, 5, 1, 3, 2, 6] == ids(b.find({}, sort={"V": 1}))
    assert ids(b.search({}, sort={"V": -1})) == [6, 3, 1, 2, 4, 5] == ids(b.find({}, sort={"V": -1}))
    got = b.search({}, sort={"V": -1}, limit=2, explain=True)
    assert got.explain["sort"] == "index" and got.explain["keys_examined"] == 3  # [0], then "s" of 6 again, then 9


def test_an_empty_array_sorts_before_null_so_the_index_does_not_serve_that_read(db):
    b = db.create_bucket("B", type="hash", indices=[{"fields": ["C", "V"]}])
    b.batch_insert([{"_id_": 1, "C": "a", "V": 2}, {"_id_": 2, "C": "a", "V": []}, {"_id_": 3, "C": "a"},
                    {"_id_": 4, "C": "b", "V": 1}])
    got = b.search({"C": "a"}, sort={"V": 1}, explain=True)
    assert ids(got) == [2, 3, 1] == ids(b.find({"C": "a"}, sort={"V": 1}))
    assert got.explain["sort"] == "memory" and "empty array in 'V'" in got.explain["sort_in_memory"]
    assert got.index_used == "C_1_V_1"  # the index still serves the filter
    # another category has no empty array: served
    assert b.search({"C": "b"}, sort={"V": 1}, explain=True).explain["sort"] == "index"
    # a read for the sort alone becomes a full scan
    whole = b.search({}, sort={"C": 1}, explain=True)
    assert whole.explain["sort"] == "index"
    b2 = db.create_bucket("B2", type="hash", indices=[{"field": "V"}])
    b2.batch_insert([{"_id_": 1, "V": 1}, {"_id_": 2, "V": []}])
    got = b2.search({"W": {"$exists": False}}, sort={"V": -1}, explain=True)
    assert ids(got) == [1, 2] and got.index_used == FULL_SCAN and got.explain["sort"] == "memory"


def test_an_index_that_also_serves_the_sort_wins_a_tie(db):
    b = db.create_bucket("B", type="hash", indices=[{"field": "C"}, {"fields": ["C", "D"]}])
    b.batch_insert([{"_id_": i, "C": i % 2, "D": -i} for i in range(10)])
    got = b.search({"C": 1}, sort={"D": 1}, limit=2, explain=True)
    assert got.index_used == "C_1_D_1" and ids(got) == [9, 7] and got.explain["sort"] == "index"
    lost = [c for c in got.explain["considered"] if c["index"] == "C_1"]
    assert lost and "which also serves the sort on 'D'" in lost[0]["reason"]
    assert b.search({"C": 1}, explain=True).index_used == "C_1"  # without a sort, the first declared


def test_aggregate_serves_a_leading_sort_from_an_index(tickets):
    pipeline = [{"$match": {"Category": "roof"}}, {"$sort": {"Date": -1}}, {"$limit": 3}, {"$project": {"Cost": 1}}]
    got = tickets.aggregate(pipeline, explain=True)
    assert got == [{"_id_": "t298", "Cost": 48}, {"_id_": "t295", "Cost": 45}, {"_id_": "t292", "Cost": 42}]
    assert got.index_used == "Category_1_Date_1" and got.explain["sort"] == "index"
    assert got.explain["keys_examined"] == got.explain["docs_examined"] == 3
    first = tickets.aggregate([{"$sort": {"Cost": -1}}, {"$skip": 1}, {"$limit": 2}], explain=True)
    assert ids(first) == ["t099", "t149"] and first.index_used == "Cost_-1" and first.explain["docs_examined"] == 3
    late = tickets.aggregate([{"$match": {"Category": "roof"}}, {"$limit": 5}, {"$sort": {"Date": -1}}], explain=True)
    assert "sort" not in late.explain and ids(late) == ["t013", "t010", "t007", "t004", "t001"]
    mem = tickets.aggregate([{"$match": {"Category": "roof"}}, {"$sort": {"Cost": 1}}, {"$limit": 2}], explain=True)
    assert mem.explain["sort"] == "memory" and ids(mem) == ["t100", "t250"]


# -- the index order is the in-memory order, on random documents ------------------------------------

SCALARS = st.one_of(
    st.none(), st.integers(-3, 3), st.floats(-3, 3, width=16), st.sampled_from([math.nan, math.inf, -0.0]),
    st.integers(-3, 3).map(Int64), st.sampled_from([Decimal128("1.5"), Decimal128("-0.0"), Decimal128("2")]),
    st.sampled_from(["", "a", "b", "ab", "é"]), st.booleans(),
    st.integers(0, 2).map(lambda d: T + datetime.timedelta(days=d)),
    st.sampled_from([ObjectId("000000000000000000000001"), ObjectId("000000000000000000000002"),
                     MinKey(), MaxKey(), b"x"]),
)
VALUES = st.one_of(SCALARS, SCALARS, st.lists(SCALARS, max_size=3), st.just([]),
                   st.lists(st.lists(SCALARS, max_size=2), max_size=2), st.fixed_dictionaries({"x": SCALARS}))
DOCS = st.lists(st.fixed_dictionaries({}, optional={
    "A": VALUES, "B": VALUES, "C": st.sampled_from(["x", "y", None])}), max_size=25)
DIRECTION = st.sampled_from([1, -1])
SORTS = st.one_of(
    st.builds(lambda d: {"A": d}, DIRECTION), st.builds(lambda d: {"B": d}, DIRECTION),
    st.builds(lambda d, e: {"A": d, "B": e}, DIRECTION, DIRECTION),
    st.builds(lambda d, e: {"B": d, "C": e}, DIRECTION, DIRECTION),
    st.builds(lambda d, e: {"C": d, "A": e}, DIRECTION, DIRECTION),
)
FILTERS = st.one_of(
    st.just({}), st.builds(lambda c: {"C": c}, st.sampled_from(["x", "y", None])),
    st.builds(lambda c, b: {"C": c, "B": {"$gte": b}}, st.sampled_from(["x", "y"]), SCALARS),
    st.builds(lambda a: {"A": {"$lt": a}}, SCALARS),
    st.builds(lambda a: {"A": {"$ne": a}}, SCALARS),
)


@settings(max_examples=80)
@given(docs=DOCS, queries=st.lists(st.tuples(FILTERS, SORTS, st.integers(0, 3), st.sampled_from([None, 1, 3, 30])),
                                   min_size=1, max_size=6), desc=st.booleans())
def test_an_index_served_sort_answers_as_the_in_memory_sort(tmp_path_factory, docs, queries, desc):
    with hoarddb.open(tmp_path_factory.mktemp("d")) as c:
        b = c["app"].create_bucket("B", type="hash", indices=[
            {"field": "A", "desc": desc}, {"fields": ["C", "B"], "desc": ["B"] if desc else False},
            {"fields": ["B", "A"], "desc": ["A"]}])
        for i, d in enumerate(docs):
            try:
                b.insert({"_id_": i, **d})
            except errors.BadValueError:  # arrays in two fields of one index
                pass
        for f, sort, skip, limit in queries:
            want = b.find(f, sort=sort, skip=skip, limit=limit)
            got = b.search(f, sort=sort, skip=skip, limit=limit, explain=True)
            assert ids(got) == ids(want), (f, sort, got.explain)
            stages = ([{"$match": f}] if f else []) + [{"$sort": sort}, {"$skip": skip}]
            stages += [{"$limit": limit}] if limit else []
            assert ids(b.aggregate(stages)) == ids(want), (f, sort)


def test_an_index_order_holds_no_memory_and_ties_only_what_their_sort_keeps(tmp_path):
    with hoarddb.open(tmp_path / "small", stage_memory_bytes=4096) as client:
        b = client["app"].create_bucket("B", type="hash", indices=[{"field": "C"}])
        b.batch_insert([{"_id_": i, "C": i % 2, "X": -i, "pad": "x" * 100} for i in range(200)])
        # the index gives the order: nothing is held, however many documents
        assert len(b.search({}, sort={"C": -1})) == 200
        # ties on C are sorted by X within each run, in a heap of skip + limit
        assert ids(b.search({}, sort={"C": 1, "X": 1}, skip=1, limit=2)) == [196, 194]
        with pytest.raises(errors.LimitExceededError, match="\\$sort holds more than its memory limit of 4096 bytes"):
            b.search({}, sort={"C": 1, "X": 1})  # a run of 100 documents sorted whole
