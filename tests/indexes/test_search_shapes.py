"""search's fast path (hoarddb.indexes.planner.Shapes): a flat filter of plain values is planned
once per shape, and an exact shape's index entries are not checked again — with the answers
the general path gives (indexes.md, "search")."""

from __future__ import annotations

import datetime
import math

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.regex import Regex
from hypothesis import given, strategies as st

import hoarddb
from hoarddb import errors
from hoarddb.indexes.planner import Shapes
from hoarddb.stores.hash import HashStore
from hoarddb.values.codec import encode


def same(a, b) -> bool:
    return [encode(d) for d in a] == [encode(d) for d in b]


def ids(found):
    return [d["_id_"] for d in found]


@pytest.fixture
def users(db):
    b = db.create_bucket("Users", type="hash", indices=[{"field": "Email", "unique": True}, "CompanyID",
                                                        {"fields": ["Co", "Dept"]}])
    b.batch_insert([
        {"_id_": f"u{i}", "Email": f"user{i}@example.com", "CompanyID": f"c{i % 3}", "Co": f"c{i % 2}",
         "Dept": f"d{i % 4}", "Name": f"N{i % 5}"}
        for i in range(12)
    ])
    return b


def test_a_cached_shape_does_not_keep_the_values_of_the_filter_that_made_it(users):
    for i in (3, 7, 3, 11):
        got = users.search({"Email": f"user{i}@example.com"})
        assert ids(got) == [f"u{i}"] and got.index_used == "Email_1"
    assert users.search({"Email": "nobody@example.com"}) == []
    for c in ("c0", "c2", "c1", "c0"):
        got = users.search({"CompanyID": c})
        assert got.index_used == "CompanyID_1"
        assert ids(got) == ids(users.find({"CompanyID": c})) and len(got) == 4
    for co, dept in (("c0", "d0"), ("c1", "d3"), ("c0", "d2"), ("c1", "d0")):
        got = users.search({"Co": co, "Dept": dept})
        assert got.index_used == "Co_1_Dept_1" and ids(got) == ids(users.find({"Co": co, "Dept": dept}))


def test_a_shape_is_its_field_names_in_order_and_both_orders_answer_alike(users):
    a = users.search({"Co": "c1", "Dept": "d1"}, explain=True)
    b = users.search({"Dept": "d1", "Co": "c1"}, explain=True)
    assert ids(a) == ids(b) == ["u1", "u5", "u9"]
    assert a.explain == b.explain


def test_a_unique_lookup_of_a_number_finds_it_by_value(db):
    b = db.create_bucket("N", type="hash", indices=[{"field": "K", "unique": True}])
    b.batch_insert([{"_id_": "one", "K": 1}, {"_id_": "half", "K": Decimal128("1.5")}, {"_id_": "zero", "K": -0.0},
                    {"_id_": "big", "K": Int64(2 ** 53 + 1)}, {"_id_": "nan", "K": float("nan")},
                    {"_id_": "s", "K": "1"}, {"_id_": "t", "K": True}])
    for value, want in ((1, ["one"]), (1.0, ["one"]), (1.5, ["half"]), (0, ["zero"]), (0.0, ["zero"]),
                        (2 ** 53 + 1, ["big"]), (float(2 ** 53 + 1), []), (math.nan, ["nan"]), ("1", ["s"]),
                        (True, ["t"]), (2, []), (False, [])):
        got = b.search({"K": value}, explain=True)
        assert got.index_used == "K_1"
        assert ids(got) == want == ids(b.find({"K": value})), value
        assert got.explain["keys_examined"] == len(want) and got.explain["docs_examined"] == len(want)


def test_null_finds_the_document_without_the_field_and_arrays_match_by_element(db):
    b = db.create_bucket("T", type="hash", indices=[{"field": "E", "unique": True}, "Tags"])
    b.batch_insert([{"_id_": 1, "E": "a", "Tags": ["x", "y"]}, {"_id_": 2, "E": "b", "Tags": "x"},
                    {"_id_": 3, "Tags": [None, "z"]}, {"_id_": 4, "E": ["c", "d"], "Tags": None}])
    assert ids(b.search({"E": None})) == [3]
    assert ids(b.search({"E": "d"})) == [4]
    for value in ("x", "y", "z", None, "w"):
        got = b.search({"Tags": value})
        assert got.index_used == "Tags_1" and ids(got) == ids(b.find({"Tags": value})), value


def test_extra_conditions_beside_the_index_are_still_checked(users):
    got = users.search({"CompanyID": "c1", "Name": "N2"}, explain=True)  # Name is not indexed
    assert got.index_used == "CompanyID_1" and ids(got) == ["u7"]
    assert got.explain["keys_examined"] == 4 and got.explain["docs_examined"] == 4 and got.explain["returned"] == 1
    got = users.search({"Email": "user7@example.com", "Name": "N0"})  # unique, and the document fails the rest
    assert got.index_used == "Email_1" and got == []
    assert ids(users.search({"Email": "user7@example.com", "Name": "N2"})) == ["u7"]
    got = users.search({"Co": "c1", "Name": "N1"})  # a prefix of a compound index, and more
    assert ids(got) == ids(users.find({"Co": "c1", "Name": "N1"})) == ["u1", "u11"]
    got = users.search({"CompanyID": "c1", "Dept": {"$gte": "d3"}})  # an operator: the general path
    assert got.index_used == "CompanyID_1" and ids(got) == ["u7"]


def test_a_compound_prefix_of_a_document_with_an_array_returns_it_once_in_key_order(db):
    b = db.create_bucket("C", type="hash", indices=[{"fields": ["A", "B"]}, {"fields": ["U", "V"], "unique": True}])
    b.batch_insert([{"_id_": "z", "A": 1, "B": [3, 1, 2], "U": 1, "V": [1, 2]}, {"_id_": "a", "A": 1, "B": 0, "U": 1},
                    {"_id_": "m", "A": 2, "B": 1, "U": 2, "V": 1}])
    got = b.search({"A": 1}, explain=True)
    # z's entries: one per element of B (3, 1, 2), and a's one: four keys, two documents
    assert ids(got) == ["a", "z"] and got.explain["keys_examined"] == 4 and got.explain["docs_examined"] == 2
    assert ids(b.search({"U": 1})) == ["a", "z"]
    assert ids(b.search({"U": 1, "V": 2})) == ["z"] and b.search({"U": 1, "V": 2}).index_used == "U_1_V_1"
    assert ids(b.search({"A": 1, "B": 2})) == ["z"]


def test_limit_and_explain_count_what_was_read(users):
    got = users.search({"CompanyID": "c2"}, limit=2, explain=True)
    assert ids(got) == ["u11", "u2"]  # key order: "u11" < "u2"
    assert got.explain["keys_examined"] == 4 and got.explain["docs_examined"] == 2 and got.explain["returned"] == 2
    got = users.search({"Email": "user4@example.com"}, limit=1, explain=True)
    assert ids(got) == ["u4"] and got.explain == {
        "index_used": "Email_1", "considered": got.explain["considered"], "served": {"equality": ["Email"]},
        "keys_examined": 1, "docs_examined": 1, "returned": 1}
    assert users.search({"Email": "none"}, explain=True).explain["keys_examined"] == 0


def test_explain_is_the_planners_and_a_callers_change_does_not_stick(users):
    first = users.search({"CompanyID": "c1", "Co": "c1"}, explain=True).explain
    assert [c["index"] for c in first["considered"]] == ["CompanyID_1", "Email_1", "Co_1_Dept_1"]
    assert first["considered"][0]["reason"] == "chosen"
    first["considered"][0]["reason"] = "changed"
    first["considered"].append({"index": "X"})
    again = users.search({"CompanyID": "c1", "Co": "c1"}, explain=True).explain
    assert again["considered"][0]["reason"] == "chosen" and len(again["considered"]) == 3
    general = users.search({"CompanyID": {"$eq": "c1"}, "Co": "c1"}, explain=True).explain
    assert general == again


def test_refusals_are_the_same_on_the_fast_path(client, users):
    with pytest.raises(errors.BadValueError, match="limit"):
        users.search({"Email": "user1@example.com"}, limit=0)
    with pytest.raises(errors.InvalidArgumentError, match="limit"):
        users.search({"Email": "user1@example.com"}, limit=True)
    with pytest.raises(errors.BadValueError, match="explain is true or false"):
        users.search({"Email": "user1@example.com"}, explain=1)
    store = client._executor._store("app", "Users")  # below the binding: the store's own checks
    for f in ({"Email": "user1@example.com"}, {"CompanyID": "c1"}, {"CompanyID": "c1", "Name": "N1"}):
        for bad in (True, 0, 1.0, 1 << 63):
            with pytest.raises(errors.HoardError, match="limit") as fast:
                store.search(f, limit=bad)
            with pytest.raises(errors.HoardError, match="limit") as general:
                store._search(f, limit=bad, explain=False)
            assert (type(fast.value), fast.value.message) == (type(general.value), general.value.message)
        for bad in (1, 0, None, "yes"):
            with pytest.raises(errors.BadValueError, match="explain is true or false"):
                store.search(f, explain=bad)
    with pytest.raises(errors.BadValueError, match="empty part"):
        users.search({"Email": "user1@example.com", "a..b": 1})
    with pytest.raises(errors.BadValueError, match="unknown top-level filter operator"):
        users.search({"$where": "1"})


def test_a_search_on_an_index_that_stops_being_ready_is_refused_though_its_shape_is_kept(tmp_path):
    with hoarddb.open(tmp_path) as c:
        b = c["app"].create_bucket("U", type="hash", indices=[{"field": "Email", "unique": True}])
        b.insert({"_id_": "u0", "Email": "a@a"})
        assert ids(b.search({"Email": "a@a"})) == ["u0"]
        b.load([{"_id_": "u1", "Email": "x@x"}, {"_id_": "u2", "Email": "x@x"}])
        with pytest.raises(errors.IndexNotReadyError):
            b.search({"Email": "a@a"})
        assert ids(b.find({"Email": "a@a"})) == ["u0"]


def test_filters_that_are_not_a_plain_shape_take_the_general_path(users):
    for f in ({"Email": Regex("^user1@")}, {"Email": {"$eq": "user1@example.com"}},
              {"$and": [{"Email": "user1@example.com"}]}, {"Tags": ["a"]}, {"Email.x": "a"}, {}):
        got = users.search(f)
        assert ids(got) == ids(users.find(f)), f
    assert users.search({"Email": {"$eq": "user1@example.com"}}).index_used == "Email_1"
    assert users.search({"Email": Regex("^user1@")}).index_used == "none — full scan"


def test_the_shape_cache_is_bounded_and_answers_alike_once_emptied(users, monkeypatch):
    monkeypatch.setattr(Shapes, "MAX", 3)
    for round_ in range(3):
        for extra in ("A", "B", "C", "D", "E"):
            got = users.search({"CompanyID": "c1", extra: None})
            assert ids(got) == ids(users.find({"CompanyID": "c1"})) and got.index_used == "CompanyID_1"


def test_shapes_are_kept_per_bucket(db):
    a = db.create_bucket("A", type="hash", indices=["K"])
    b = db.create_bucket("B", type="hash", indices=[{"field": "K", "unique": True}])
    a.batch_insert([{"_id_": 1, "K": 1}, {"_id_": 2, "K": 1}])
    b.insert({"_id_": 1, "K": 1})
    assert ids(a.search({"K": 1})) == [1, 2] and a.search({"K": 1}).index_used == "K_1"
    assert ids(b.search({"K": 1})) == [1] and b.search({"K": 1}).index_used == "K_1"
    db.drop_bucket("A")
    a = db.create_bucket("A", type="hash", indices=["J"])
    a.insert({"_id_": 1, "K": 1})
    assert a.search({"K": 1}).index_used == "none — full scan"


def test_the_python_api_binds_search_find_and_count_as_before(users):
    from collections import OrderedDict

    assert ids(users.search(OrderedDict(Email="user2@example.com"))) == ["u2"]  # a Mapping, not a dict
    with pytest.raises(errors.InvalidArgumentError, match="at most 1 argument"):
        users.search({"CompanyID": "c0"}, 1)  # limit is an option, by name or in an options document
    assert ids(users.search({"CompanyID": "c0"}, {"limit": 1})) == ["u0"]
    assert ids(users.search(filter={"CompanyID": "c0"}, limit=2)) == ["u0", "u3"]
    assert len(users.search()) == 12 and len(users.search(None)) == 12
    assert users.count({"CompanyID": "c0"}) == 4 and len(users.find({"CompanyID": "c0"})) == 4
    with pytest.raises(errors.InvalidArgumentError):
        users.search("user2@example.com")
    with pytest.raises(errors.InvalidArgumentError):
        users.search({"CompanyID": "c0"}, nope=1)


# -- the fast path finds what find finds, for every kind of value a document may hold ------

stored = st.one_of(
    st.integers(-2, 2), st.sampled_from([1.0, -0.0, 2.5, math.nan, math.inf]),
    st.sampled_from([Decimal128("1"), Decimal128("2.50"), Decimal128("NaN"), Decimal128("0.1"), Int64(2)]),
    st.sampled_from(["a", "b", "", "1"]), st.none(), st.booleans(),
    st.sampled_from([ObjectId("5f1d7c4e8b3c2a1d0e9f8a7b"), datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)]),
)
field_values = st.one_of(stored, st.lists(stored, max_size=3), st.just({"x": 1}))
docs_st = st.fixed_dictionaries({}, optional={"A": field_values, "B": field_values, "U": field_values,
                                              "N": stored})
queried = st.one_of(st.integers(-2, 3), st.sampled_from([1.0, -0.0, 2.5, 0.1, math.nan, math.inf]),
                    st.sampled_from(["a", "b", "", "1", "zz"]), st.none(), st.booleans(),
                    st.just(ObjectId("5f1d7c4e8b3c2a1d0e9f8a7b")))
flat_filters = st.dictionaries(st.sampled_from(["A", "B", "U", "N"]), queried, min_size=1, max_size=3)


@given(st.lists(docs_st, max_size=20), st.lists(flat_filters, min_size=1, max_size=8))
def test_flat_filters_find_what_find_finds(tmp_path_factory, docs, fs):
    with hoarddb.open(tmp_path_factory.mktemp("s")) as c:
        b = c["app"].create_bucket("B", type="hash", indices=[{"fields": ["A", "B"]}, {"field": "U", "unique": True},
                                                              "B"])
        for i, d in enumerate(docs):
            try:
                b.insert(dict(d, _id_=i))
            except (errors.BadValueError, errors.DuplicateKeyError):
                pass  # arrays in both fields of the compound index; a unique value taken
        for f in fs:
            got = b.search(f, explain=True)
            assert same(got, b.find(f)), f  # (as BSON: a NaN is not == itself)
            assert got.explain["returned"] == len(got) <= got.explain["docs_examined"]
            assert same(b.search(f, limit=1), list(got)[:1]), f
            store = c._executor._store("app", "B")
            for limit in (None, 1, 2):  # the fast path and the general one answer alike, explain and all
                fast, general = store.search(f, limit, True), store._search(f, limit, True)
                assert same(fast.result, general.result) and fast.extras == general.extras, (f, limit)


def test_shape_of_refuses_what_it_cannot_serve():
    s = Shapes([])
    for f in ({"A": [1]}, {"A": {"$gt": 1}}, {"A": Regex("a")}, {"A": Int64(1)}, {"A": Decimal128("1")},
              {"A": datetime.datetime(2026, 1, 1)}, {"$or": [{"A": 1}]}, {"a.b": 1}, {"": 1}, {1: 1}, [("A", 1)]):
        assert s.of(f) is None, f
    assert s.of({"A": 1, "B": "x", "C": None, "D": True, "E": 1.5}).index is None
    assert HashStore.search.__doc__  # the store keeps one public search
