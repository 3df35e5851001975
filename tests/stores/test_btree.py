"""The btree store through the public API: sort keys, order over mixed values, ties, ranges."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

import hoarddb
from hoarddb import errors
from hoarddb.values.order import compare


def test_leaderboard_spec_example(db):
    board = db.create_bucket("Leaderboard", type="btree")
    board.insert({"Score": 100, "User": "jane"})
    board.insert({"Score": 85, "User": "bob"})
    board.insert({"Score": 92, "User": "alice"})
    assert board.get({"Score": 92})["User"] == "alice"
    assert [d["User"] for d in board.range({"Score": {"$gte": 90}})] == ["alice", "jane"]
    assert board.first()["User"] == "bob"
    assert board.last()["User"] == "jane"
    assert board.length() == 3


def test_declared_key_and_missing_key(db):
    board = db.create_bucket("B", type="btree", key="Score")
    board.insert({"User": "x", "Score": 5})
    board.insert({"User": "y", "Score": 1})
    assert board.first()["User"] == "y"
    with pytest.raises(errors.MissingKeyError, match="Score"):
        board.insert({"User": "z"})
    assert board.length() == 2
    with pytest.raises(errors.BadValueError, match="keyed by 'Score'"):
        board.range({"User": {"$gte": "a"}})


def test_id_keys_and_bare_bounds(db):
    days = db.create_bucket("ExpenseByDate", type="btree")
    for key in ["2026-02-28/a", "2026-03-01/b", "2026-03-14/c", "2026-03-31/d", "2026-04-01/e"]:
        days.insert({"_id_": key, "Amount": 1})
    got = days.range({"$gte": "2026-03-01", "$lt": "2026-04"})
    assert [d["_id_"] for d in got] == ["2026-03-01/b", "2026-03-14/c", "2026-03-31/d"]
    assert [d["_id_"] for d in days.range({"$prefix": "2026-03"})] == ["2026-03-01/b", "2026-03-14/c", "2026-03-31/d"]
    # the spec's $lte "2026-03-31" misses the 31st: "2026-03-31/d" sorts after "2026-03-31"
    assert [d["_id_"] for d in days.range({"$gte": "2026-03-01", "$lte": "2026-03-31"})][-1] == "2026-03-14/c"


def test_ties_coexist_in_insertion_order(db):
    board = db.create_bucket("B", type="btree", key="Score")
    for user in ["a", "b", "c"]:
        board.insert({"Score": 10, "User": user})
    board.insert({"Score": 10.0, "User": "d"})
    assert [d["User"] for d in board.range({"Score": 10})] == ["a", "b", "c", "d"]
    assert board.get({"Score": 10})["User"] == "a"
    assert board.delete({"Score": 10}) == {"deleted": 4}
    assert board.length() == 0


def test_type_bracketing_in_range(db):
    b = db.create_bucket("B", type="btree", key="k")
    b.batch_insert([{"k": 95}, {"k": "zzz"}, {"k": 89.5}, {"k": None}])
    assert [d["k"] for d in b.range({"k": {"$gte": 90}})] == [95]
    assert [d["k"] for d in b.range({"k": {"$lt": 90}})] == [89.5]


def test_range_limit_reverse_and_refusals(db):
    b = db.create_bucket("B", type="btree", key="k")
    b.batch_insert([{"k": i} for i in range(10)])
    assert [d["k"] for d in b.range({"k": {"$gt": 2, "$lte": 6}})] == [3, 4, 5, 6]
    assert [d["k"] for d in b.range({"k": {"$gt": 2}}, limit=2, reverse=True)] == [9, 8]
    assert [d["k"] for d in b.range()] == list(range(10))
    with pytest.raises(errors.BadValueError, match=r"\$regex"):
        b.range({"k": {"$regex": "x"}})
    with pytest.raises(errors.BadValueError):
        b.range({"k": 1, "j": 2})


def test_list_after_key(db):
    b = db.create_bucket("B", type="btree")
    b.batch_insert([{"_id_": f"2026-03-{d:02}/x"} for d in range(1, 8)])
    assert [d["_id_"] for d in b.list(after="2026-03-03/x", limit=2)] == ["2026-03-04/x", "2026-03-05/x"]
    assert [d["_id_"] for d in b.list(after="2026-03-", limit=1)] == ["2026-03-01/x"]


def test_empty_bucket(db):
    b = db.create_bucket("B", type="btree")
    assert b.first() is None and b.last() is None and b.range() == [] and b.get("x") is None


numbers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=True),
)
keys = st.one_of(numbers, st.text(max_size=8))


@given(st.lists(keys, min_size=1, max_size=40))
def test_order_matches_value_order(tmp_path_factory, values):
    path = tmp_path_factory.mktemp("bt")
    with hoarddb.open(path) as c:
        b = c["app"].create_bucket("B", type="btree", key="k")
        b.batch_insert([{"k": v, "i": i} for i, v in enumerate(values)])
        got = [d["k"] for d in b.range()]
        import functools
        expected = sorted(values, key=functools.cmp_to_key(compare))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert compare(g, e) == 0
        assert b.first()["k"] == got[0] or compare(b.first()["k"], got[0]) == 0
        assert compare(b.last()["k"], got[-1]) == 0
        assert [d["k"] for d in b.range(reverse=True)] == list(reversed(got))


def test_negative_and_fractional_floats_sort(db):
    b = db.create_bucket("B", type="btree", key="k")
    vals = [-1.5, 2, -3, 0.25, -0.0, -1e300, 1e300, -2**62, 7.5, -math.inf, math.inf]
    b.batch_insert([{"k": v} for v in vals])
    assert [d["k"] for d in b.range()] == sorted(vals)


bound_values = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False), st.sampled_from(["", "a", "b", "ba"]))


@given(st.lists(st.one_of(bound_values, st.just(float("nan")), st.none()), max_size=25),
       st.dictionaries(st.sampled_from(["$gt", "$gte", "$lt", "$lte", "$eq"]), bound_values, max_size=2))
def test_range_is_exactly_the_filter(tmp_path_factory, keys, bounds):
    from hoarddb.values.filter import matches
    with hoarddb.open(tmp_path_factory.mktemp("r")) as c:
        b = c["app"].create_bucket("B", type="btree", key="k")
        if keys:
            b.batch_insert([{"k": k, "i": i} for i, k in enumerate(keys)])
        got = sorted(d["i"] for d in b.range({"k": bounds}))
        want = sorted(i for i, k in enumerate(keys) if matches({"k": k}, {"k": bounds}))
        assert got == want


def test_a_named_key_on_an_undeclared_btree_never_reaches_entries_keyed_by_another_field(db, tmp_path):
    board = db.create_bucket("Board", type="btree")  # no key: each entry sorts by its _id_, else its first field
    board.insert({"Score": 100, "User": "jane"})
    board.insert({"Score": 85, "User": "bob"})
    # "User" names no entry's key: refused, never the Score-keyed entry whose value is 100
    with pytest.raises(errors.BadValueError, match="sort by 'Score'") as e:
        board.delete({"User": 100})
    assert e.value.code == 2
    assert board.length() == 2 and board.get({"Score": 100})["User"] == "jane"
    with pytest.raises(errors.BadValueError, match="sort by 'Score'"):
        board.get({"User": 85})
    with pytest.raises(errors.BadValueError, match="sort by 'Score'"):
        board.range({"User": {"$gte": 0}})
    assert board.get({"User": "jane"}) is None  # no entry has the key "jane" at all
    assert board.range({"User": {"$gte": 1000}}) == []
    # the field they do sort by, and a bare key, still work
    assert [d["User"] for d in board.range({"Score": {"$gte": 0}})] == ["bob", "jane"]
    assert board.get(85)["User"] == "bob"
    assert board.delete({"Score": 85}) == {"deleted": 1}
    assert board.length() == 1


def test_entries_with_one_key_from_different_fields_are_told_apart(db):
    b = db.create_bucket("Mixed", type="btree", store_fields=[{"name": "Log", "type": "fifo"}])
    b.insert({"_id_": 7, "n": "by id"})
    b.insert({"Score": 7, "n": "by score"})
    assert b.get({"Score": 7})["n"] == "by score"
    assert b.get({"_id_": 7})["n"] == "by id"
    assert [d["n"] for d in b.range({"Score": {"$gte": 0}})] == ["by score"]
    assert [d["n"] for d in b.range({"$gte": 0})] == ["by id", "by score"]
    b[7].Log.push({"x": 1})
    # deleting the Score entry leaves the _id_ entry, and the stores hanging from key 7 with it
    assert b.delete({"Score": 7}) == {"deleted": 1}
    assert b.get(7)["n"] == "by id"
    assert b[7].Log.length() == 1
    assert b.delete(7) == {"deleted": 1}
    assert b.length() == 0
    b.insert({"_id_": 7})
    assert b[7].Log.length() == 0  # the last entry with the key took its stores
