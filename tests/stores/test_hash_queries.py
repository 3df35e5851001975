"""A hash bucket's queries, embedded and over the wire: sort/skip/limit/projection, distinct, aggregate,
upsert, multi, positional updates, find_and_modify, and the unique rules through all of them."""

from __future__ import annotations

import datetime
import itertools
import threading

import mongomock
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hoarddb
from hoarddb import errors
from hoarddb.testing import ServerThread

UTC = datetime.timezone.utc
_names = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerThread(tmp_path_factory.mktemp("queries") / "data", insecure=True) as s:
        yield s


@pytest.fixture(params=["embedded", "remote"])
def db(request, tmp_path):
    if request.param == "embedded":
        c = hoarddb.open(tmp_path / "data")
    else:
        c = hoarddb.connect(request.getfixturevalue("server").url())
    yield c[f"q{next(_names)}"]
    c.close()


@pytest.fixture
def tickets(db):
    b = db.create_bucket("Tickets", type="hash", indices=[{"field": "Category"}, {"field": "Code", "unique": True}])
    b.batch_insert([
        {"_id_": f"t{i}", "Category": ["repairs", "tax", "tenants"][i % 3], "Cost": i * 10, "Code": f"c{i}",
         "Tags": ["a", "b"][: i % 3], "Date": datetime.datetime(2024, 1, 1 + i, tzinfo=UTC)}
        for i in range(12)])
    return b


def ids(docs) -> list:
    return [d["_id_"] for d in docs]


def test_find_sorts_skips_limits_and_projects(tickets):
    newest = tickets.find({}, sort={"Date": -1}, limit=3)
    assert ids(newest) == ["t11", "t10", "t9"]
    assert ids(tickets.find({"Category": "tax"}, sort={"Cost": -1}, skip=1, limit=2)) == ["t7", "t4"]
    assert ids(tickets.find({}, sort={"Category": 1, "Cost": -1}, limit=5)) == ["t9", "t6", "t3", "t0", "t10"]
    assert tickets.find({"_id_": "t1"}, projection={"Cost": 1}) == [{"_id_": "t1", "Cost": 10}]
    assert tickets.find({"_id_": "t1"}, projection={"_id_": 0, "Tags": 0, "Date": 0, "Code": 0}) == \
        [{"Category": "tax", "Cost": 10}]
    assert len(tickets.find({}, skip=10)) == 2
    # search takes the same options, through its index
    assert ids(tickets.search({"Category": "repairs"}, sort={"Cost": -1}, limit=2)) == ["t9", "t6"]
    answer = tickets.search({"Category": "repairs"}, sort={"Cost": -1}, projection={"Cost": 1}, explain=True)
    assert answer == [{"_id_": f"t{i}", "Cost": i * 10} for i in (9, 6, 3, 0)]
    assert answer.index_used == "Category_1" and answer.explain["sort"] == "memory"


def test_find_refusals(tickets):
    with pytest.raises(errors.BadValueError, match="must be 1"):
        tickets.find({}, sort={"Date": "desc"})
    with pytest.raises(errors.BadValueError, match="skip must be a whole number"):
        tickets.find({}, skip=-1)
    with pytest.raises(errors.BadValueError, match="mixes inclusion and exclusion"):
        tickets.find({}, projection={"Cost": 1, "Tags": 0})
    with pytest.raises(errors.BadValueError, match="\\$slice is not supported"):
        tickets.find({}, projection={"Tags": {"$slice": 1}})


def test_a_sort_past_its_memory_is_refused_not_spilled(tmp_path):
    with hoarddb.open(tmp_path / "small", stage_memory_bytes=4096) as client:
        b = client["app"].create_bucket("B", type="hash")
        b.batch_insert([{"_id_": i, "pad": "x" * 100} for i in range(200)])
        with pytest.raises(errors.LimitExceededError, match="\\$sort holds more than its memory limit of 4096 bytes"):
            b.find({}, sort={"pad": 1})
        assert [d["_id_"] for d in b.find({}, sort={"_id_": -1}, limit=3)] == [199, 198, 197]  # a heap of three
        with pytest.raises(errors.LimitExceededError, match="\\$group holds more than its memory limit"):
            b.aggregate([{"$group": {"_id": None, "all": {"$push": "$pad"}}}])


def test_count_and_distinct(tickets):
    assert tickets.count({"Category": "tax"}) == 4
    assert tickets.distinct("Category") == ["repairs", "tax", "tenants"]
    assert tickets.distinct("Tags", {"Category": {"$ne": "tax"}}) == ["a", "b"]
    assert tickets.distinct("Nope") == []


def test_aggregate(tickets):
    out = tickets.aggregate([
        {"$match": {"Category": {"$in": ["repairs", "tax"]}}},
        {"$group": {"_id": "$Category", "total": {"$sum": "$Cost"}, "n": {"$count": {}},
                    "last": {"$max": "$Date"}}},
        {"$sort": {"total": -1}},
    ])
    assert out == [
        {"_id": "tax", "total": 10 + 40 + 70 + 100, "n": 4, "last": datetime.datetime(2024, 1, 11, tzinfo=UTC)},
        {"_id": "repairs", "total": 0 + 30 + 60 + 90, "n": 4, "last": datetime.datetime(2024, 1, 10, tzinfo=UTC)}]
    month = tickets.aggregate([{"$project": {"_id_": 0, "d": {"$dateToString": {"date": "$Date", "format": "%m-%d"}}}},
                               {"$sort": {"d": -1}}, {"$limit": 1}])
    assert month == [{"d": "01-12"}]
    assert tickets.aggregate([{"$unwind": "$Tags"}, {"$sortByCount": "$Tags"}]) == \
        [{"_id": "a", "count": 8}, {"_id": "b", "count": 4}]
    with pytest.raises(errors.BadValueError, match="unknown pipeline stage"):
        tickets.aggregate([{"$out": "x"}])


def test_a_leading_match_is_served_by_an_index(tickets):
    answer = tickets.aggregate([{"$match": {"Category": "tax"}}, {"$count": "n"}], explain=True)
    assert answer == [{"n": 4}]
    assert answer.index_used == "Category_1" and answer.explain["docs_examined"] == 4
    scan = tickets.aggregate([{"$count": "n"}])
    assert scan == [{"n": 12}] and scan.index_used == "none — full scan"


def test_update_multi_and_upsert(tickets):
    assert tickets.update({"Category": "tax"}, {"$inc": {"Cost": 1}}) == {"matched": 4, "modified": 4}
    assert tickets.update({"Category": "tax"}, {"$set": {"Seen": True}}, multi=False) == {"matched": 1, "modified": 1}
    assert tickets.count({"Seen": True}) == 1 and tickets.get("t1")["Seen"] is True
    r = tickets.update({"_id_": "new", "Category": "misc"}, {"$set": {"Cost": 5}, "$setOnInsert": {"Code": "c99"}},
                       upsert=True)
    assert r == {"matched": 0, "modified": 0, "upserted": "new"}
    assert tickets.get("new") == {"_id_": "new", "Category": "misc", "Cost": 5, "Code": "c99"}
    # matched now: $setOnInsert does nothing
    assert tickets.update({"_id_": "new"}, {"$set": {"Cost": 6}, "$setOnInsert": {"Code": "zzz"}}, upsert=True) == \
        {"matched": 1, "modified": 1}
    assert tickets.get("new")["Code"] == "c99"
    with pytest.raises(errors.BadValueError, match="upsert is true or false"):
        tickets.update({}, {"$set": {"a": 1}}, upsert="yes")


def test_unique_rules_hold_for_upserts_and_positional_updates(tickets):
    before = tickets.find({}, sort={"_id_": 1})
    with pytest.raises(errors.DuplicateKeyError, match="c3"):
        tickets.update({"_id_": "other"}, {"$set": {"Code": "c3"}}, upsert=True)
    with pytest.raises(errors.DuplicateKeyError):
        tickets.update({"_id_": "other", "Code": "c4"}, {"$set": {"x": 1}}, upsert=True)
    with pytest.raises(errors.DuplicateKeyError):
        tickets.find_and_modify({"_id_": "t1"}, {"$set": {"Code": "c2"}})
    tickets.update({"_id_": "t1"}, {"$set": {"Code": ["k1", "k2"]}})
    with pytest.raises(errors.DuplicateKeyError):
        tickets.update({"_id_": "t1", "Code": "k2"}, {"$set": {"Code.$": "c5"}})
    with pytest.raises(errors.DuplicateKeyError):
        tickets.update({"_id_": "t1"}, {"$set": {"Code.$[c]": "c6"}}, arrayFilters=[{"c": "k1"}])
    after = tickets.find({}, sort={"_id_": 1})
    assert [d for d in after if d["_id_"] != "t1"] == [d for d in before if d["_id_"] != "t1"]
    assert tickets.get("t1")["Code"] == ["k1", "k2"] and tickets.count() == 12


def test_positional_updates(tickets):
    tickets.insert({"_id_": "g", "grades": [85, 80, 80], "items": [{"q": 1}, {"q": 5}, {"q": 9}]})
    tickets.update({"_id_": "g", "grades": 80}, {"$set": {"grades.$": 82}})
    tickets.update({"_id_": "g"}, {"$inc": {"items.$[].q": 1}})
    tickets.update({"_id_": "g"}, {"$set": {"items.$[big].big": True}}, arrayFilters=[{"big.q": {"$gt": 5}}])
    assert tickets.get("g")["grades"] == [85, 82, 80]
    assert tickets.get("g")["items"] == [{"q": 2}, {"q": 6, "big": True}, {"q": 10, "big": True}]
    with pytest.raises(errors.BadValueError, match="no array filter found"):
        tickets.update({"_id_": "g"}, {"$set": {"items.$[x]": 1}})


def test_find_and_modify(tickets):
    assert tickets.find_and_modify({"_id_": "t1"}, {"$inc": {"Cost": 5}})["Cost"] == 10  # as it was
    assert tickets.find_and_modify({"_id_": "t1"}, {"$inc": {"Cost": 5}}, new=True)["Cost"] == 20
    job = tickets.find_and_modify({"Category": "tenants", "Taken": {"$exists": False}}, {"$set": {"Taken": 1}},
                                  sort={"Date": -1}, projection={"Date": 1, "_id_": 0})
    assert job == {"Date": datetime.datetime(2024, 1, 12, tzinfo=UTC)}
    assert tickets.find_and_modify({"_id_": "none"}, {"$set": {"a": 1}}) is None
    assert tickets.find_and_modify({"_id_": "n1"}, {"$set": {"Code": "n1"}}, upsert=True) is None
    assert tickets.find_and_modify({"_id_": "n2"}, {"$set": {"Code": "n2"}}, upsert=True, new=True) == \
        {"_id_": "n2", "Code": "n2"}
    gone = tickets.find_and_modify({"Category": "tax"}, remove=True, sort={"Cost": -1})
    assert gone["_id_"] == "t10" and tickets.get("t10") is None and tickets.count() == 13
    for kwargs, says in [({}, "needs an update"), ({"update": {"$set": {"a": 1}}, "remove": True}, "not both"),
                         ({"remove": True, "new": True}, "neither new nor upsert")]:
        with pytest.raises(errors.BadValueError, match=says):
            tickets.find_and_modify({"_id_": "t1"}, **kwargs)


def test_find_and_modify_is_atomic_under_threads(tmp_path):
    with hoarddb.open(tmp_path / "atomic") as client:
        b = client["app"].create_bucket("Counters", type="hash")
        seen: list = []

        def bump():
            for _ in range(25):
                seen.append(b.find_and_modify({"_id_": "c"}, {"$inc": {"n": 1}}, upsert=True, new=True)["n"])

        threads = [threading.Thread(target=bump) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(seen) == list(range(1, 101))
        assert b.get("c")["n"] == 100


def test_lookup_joins_a_bucket_of_the_same_database(db):
    orders = db.create_bucket("Orders", type="hash")
    stock = db.create_bucket("Stock", type="hash")
    orders.batch_insert([{"_id_": 1, "item": "almonds"}, {"_id_": 2, "item": "pecans"}])
    stock.batch_insert([{"_id_": "s1", "sku": "almonds", "instock": 120}, {"_id_": "s2", "sku": "bread"}])
    out = orders.aggregate([{"$lookup": {"from": "Stock", "localField": "item", "foreignField": "sku", "as": "stock"}},
                            {"$project": {"n": {"$size": "$stock"}}}])
    assert out == [{"_id_": 1, "n": 1}, {"_id_": 2, "n": 0}]
    with pytest.raises(errors.BucketNotFoundError):
        orders.aggregate([{"$lookup": {"from": "Nope", "localField": "a", "foreignField": "b", "as": "c"}}])
    db.create_bucket("Q", type="fifo")
    with pytest.raises(errors.BadValueError, match="joins hash buckets"):
        orders.aggregate([{"$lookup": {"from": "Q", "localField": "a", "foreignField": "b", "as": "c"}}])


_scalar = st.one_of(st.integers(-5, 5), st.sampled_from(["a", "b"]), st.none())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(docs=st.lists(st.fixed_dictionaries({}, optional={"a": _scalar, "b": _scalar}), min_size=1, max_size=12),
       sort=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([1, -1])), min_size=1, max_size=2,
                     unique_by=lambda t: t[0]),
       skip=st.integers(0, 4), limit=st.one_of(st.none(), st.integers(1, 5)),
       projection=st.sampled_from([None, {"a": 1}, {"b": 0}, {"a": 1, "_id_": 0}]),
       flt=st.sampled_from([{}, {"a": {"$gte": 0}}, {"b": {"$in": ["a", None]}}]))
def test_find_options_agree_with_mongomock(tmp_path_factory, docs, sort, skip, limit, projection, flt):
    with hoarddb.open(tmp_path_factory.mktemp("oracle") / "data") as client:
        b = client["app"].create_bucket("B", type="hash")
        b.batch_insert([dict(d, _id_=i) for i, d in enumerate(docs)])
        coll = mongomock.MongoClient().db.c
        coll.insert_many([dict(d, _id=i) for i, d in enumerate(docs)])
        spec = sort + [("_id_", 1)]
        got = b.find(flt, sort=dict(spec), skip=skip, limit=limit, projection=projection)
        mongo_projection = None if projection is None else {k.replace("_id_", "_id"): v for k, v in projection.items()}
        cursor = coll.find(flt, mongo_projection).sort([(k.replace("_id_", "_id"), d) for k, d in spec]).skip(skip)
        if limit is not None:
            cursor = cursor.limit(limit)
        expected = [{("_id_" if k == "_id" else k): v for k, v in d.items()} for d in cursor]
        assert [sorted(d.items(), key=str) for d in got] == [sorted(d.items(), key=str) for d in expected]


def test_a_lookup_past_the_stage_memory_is_refused(tmp_path):
    with hoarddb.open(tmp_path / "small", stage_memory_bytes=2000) as client:
        db = client["app"]
        db.create_bucket("Big", type="hash").batch_insert([{"_id_": i, "pad": "x" * 100} for i in range(50)])
        orders = db.create_bucket("Orders", type="hash")
        orders.insert({"_id_": 1, "k": 1})
        with pytest.raises(errors.LimitExceededError, match="\\$lookup from bucket 'Big' holds more than its memory "
                                                            "limit of 2000 bytes"):
            orders.aggregate([{"$lookup": {"from": "Big", "localField": "k", "foreignField": "_id_", "as": "b"}}])
