"""Positional updates ($, $[], $[<id>] with arrayFilters), $setOnInsert and the document an upsert inserts."""

from __future__ import annotations

import mongomock
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoarddb.errors import BadValueError
from hoarddb.values.order import values_equal
from hoarddb.values.update import apply_update, compile_update, upsert_document, validate_update


# -- examples from MongoDB's pages --------------------------------------------------------

def test_dollar_updates_the_element_the_filter_matched():
    doc = {"_id": 1, "grades": [85, 80, 80]}
    assert apply_update(doc, {"$set": {"grades.$": 82}}, query={"_id": 1, "grades": 80}) == \
        {"_id": 1, "grades": [85, 82, 80]}
    doc = {"_id": 4, "grades": [{"grade": 80, "mean": 75, "std": 8}, {"grade": 85, "mean": 90, "std": 5},
                                {"grade": 85, "mean": 85, "std": 8}]}
    out = apply_update(doc, {"$set": {"grades.$.std": 6}}, query={"_id": 4, "grades.grade": 85})
    assert [g["std"] for g in out["grades"]] == [8, 6, 8]
    out = apply_update(doc, {"$inc": {"grades.$.std": 1}},
                       query={"grades": {"$elemMatch": {"grade": {"$lte": 90}, "mean": {"$gt": 80}}}})
    assert [g["std"] for g in out["grades"]] == [8, 6, 8]
    # inside an $and, and with other conditions beside it
    out = apply_update(doc, {"$set": {"grades.$.std": 0}}, query={"$and": [{"_id": 4}, {"grades.mean": 85}]})
    assert [g["std"] for g in out["grades"]] == [8, 5, 0]


def test_dollar_without_a_match_in_the_query_is_refused():
    with pytest.raises(BadValueError, match="did not find the match needed from the query"):
        apply_update({"a": [1, 2]}, {"$set": {"a.$": 5}}, query={"b": 1})
    with pytest.raises(BadValueError, match="did not find the match"):
        apply_update({"a": [1, 2]}, {"$set": {"a.$": 5}})


def test_all_positional_updates_every_element():
    assert apply_update({"grades": [85, 82, 80]}, {"$inc": {"grades.$[]": 10}}) == {"grades": [95, 92, 90]}
    doc = {"grades": [{"grade": 80, "mean": 75, "std": 8}, {"grade": 85, "mean": 90, "std": 6}]}
    out = apply_update(doc, {"$inc": {"grades.$[].std": -2}})
    assert [g["std"] for g in out["grades"]] == [6, 4]
    # nested: $[] twice
    out = apply_update({"m": [[1, 2], [3]]}, {"$mul": {"m.$[].$[]": 2}})
    assert out == {"m": [[2, 4], [6]]}
    assert apply_update({"a": []}, {"$set": {"a.$[]": 1}}) == {"a": []}


def test_filtered_positional_updates_with_array_filters():
    out = apply_update({"grades": [95, 102, 90, 150]}, {"$set": {"grades.$[element]": 100}},
                       array_filters=[{"element": {"$gte": 100}}])
    assert out == {"grades": [95, 100, 90, 100]}
    doc = {"grades": [{"grade": 80, "mean": 75, "std": 6}, {"grade": 85, "mean": 100, "std": 4},
                      {"grade": 85, "mean": 100, "std": 6}]}
    out = apply_update(doc, {"$set": {"grades.$[elem].mean": 100}}, array_filters=[{"elem.grade": {"$gte": 85}}])
    assert [g["mean"] for g in out["grades"]] == [75, 100, 100]
    out = apply_update(doc, {"$inc": {"grades.$[elem].std": -1}},
                       array_filters=[{"elem.grade": {"$gte": 80}, "elem.std": {"$gt": 5}}])
    assert [g["std"] for g in out["grades"]] == [5, 4, 5]
    doc = {"grades": [{"type": "quiz", "questions": [10, 8, 5]}, {"type": "quiz", "questions": [8, 9, 6]},
                      {"type": "hw", "questions": [5, 4, 3]}, {"type": "exam", "questions": [25, 10, 23, 0]}]}
    out = apply_update(doc, {"$inc": {"grades.$[t].questions.$[score]": 2}},
                       array_filters=[{"t.type": "quiz"}, {"score": {"$gte": 8}}])
    assert [g["questions"] for g in out["grades"]] == [[12, 10, 5], [10, 11, 6], [5, 4, 3], [25, 10, 23, 0]]
    out = apply_update(doc, {"$inc": {"grades.$[].questions.$[score]": 2}}, array_filters=[{"score": {"$gte": 8}}])
    assert [g["questions"] for g in out["grades"]] == [[12, 10, 5], [10, 11, 6], [5, 4, 3], [27, 12, 25, 0]]
    # an $or of one identifier
    out = apply_update({"a": [1, 5, 9]}, {"$set": {"a.$[x]": 0}}, array_filters=[{"$or": [{"x": 1}, {"x": 9}]}])
    assert out == {"a": [0, 5, 0]}


@pytest.mark.parametrize("update, filters, says", [
    ({"$set": {"a.$[x]": 1}}, None, "no array filter found for the identifier 'x'"),
    ({"$set": {"a.$[x]": 1}}, [{"x": 1}, {"y": 2}], "identifier 'y' is not used"),
    ({"$set": {"a.$[x]": 1}}, [{"x": 1}, {"x": 2}], "two filters for the identifier 'x'"),
    ({"$set": {"a.$[x]": 1}}, [{"x": 1, "y": 2}], "one identifier"),
    ({"$set": {"a.$[x]": 1}}, [{}], "non-empty"),
    ({"$set": {"a.$[x]": 1}}, {"x": 1}, "must be a list"),
    ({"$set": {"a.$[X]": 1}}, [{"X": 1}], "is not a field name"),
    ({"$set": {"a.$foo": 1}}, None, "is not a field name"),
    ({"$set": {"$.a": 1}}, None, "is not a field name"),
    ({"$set": {"a.$.b.$": 1}}, None, "too many positional"),
    ({"$rename": {"a.$": "b"}}, None, "no positional parts"),
    ({"$set": {"a.$[]": 1, "a.$[].b": 2}}, None, "conflict"),
])
def test_positional_refusals(update, filters, says):
    with pytest.raises(BadValueError, match=says):
        validate_update(update, filters)


def test_array_updates_need_an_array():
    with pytest.raises(BadValueError, match="must exist in the document"):
        apply_update({}, {"$set": {"a.$[]": 1}})
    with pytest.raises(BadValueError, match="not an array"):
        apply_update({"a": 5}, {"$set": {"a.$[]": 1}})


# -- upsert and $setOnInsert ---------------------------------------------------------------

def test_set_on_insert_applies_only_when_inserting():
    update = {"$set": {"item": "apple"}, "$setOnInsert": {"defaultQty": 100}}
    assert apply_update({"_id_": 1, "item": "x"}, update) == {"_id_": 1, "item": "apple"}
    assert apply_update({"_id_": 1}, update, inserting=True) == {"_id_": 1, "item": "apple", "defaultQty": 100}


def test_upsert_document_is_built_from_the_filters_equality_fields():
    update = compile_update({"$set": {"item": "apple"}, "$setOnInsert": {"defaultQty": 100}})
    assert upsert_document({"_id_": 1}, update) == {"_id_": 1, "item": "apple", "defaultQty": 100}
    doc = upsert_document({"name": "Ann", "age": {"$gt": 20}, "addr.city": "Oslo",
                           "$and": [{"tier": {"$eq": 2}}], "tag": {"$in": ["a"]}, "re": {"$regex": "x"}},
                          compile_update({"$inc": {"visits": 1}}))
    assert doc == {"name": "Ann", "addr": {"city": "Oslo"}, "tier": 2, "visits": 1}
    # the update wins over the filter's value of the same field
    assert upsert_document({"n": 1}, compile_update({"$set": {"n": 2}})) == {"n": 2}
    # the key comes first
    assert list(upsert_document({"a": 1, "_id_": "k"}, compile_update({"$set": {"b": 1}}))) == ["_id_", "a", "b"]
    with pytest.raises(BadValueError, match="did not find the match"):
        upsert_document({"a": 1}, compile_update({"$set": {"a.$": 2}}))


# -- mongomock as an oracle ----------------------------------------------------------------

_nums = st.integers(-50, 50)
_fields = st.sampled_from(["a", "b", "c.d"])
_ops = st.one_of(
    st.tuples(st.just("$set"), _fields, _nums),
    st.tuples(st.just("$inc"), _fields, _nums),
    st.tuples(st.just("$min"), _fields, _nums),
    st.tuples(st.just("$max"), _fields, _nums),
    st.tuples(st.just("$unset"), _fields, st.just("")),
    st.tuples(st.just("$push"), st.just("l"), _nums),
    st.tuples(st.just("$addToSet"), st.just("l"), _nums),
    st.tuples(st.just("$setOnInsert"), st.just("s"), _nums),
)


def _update_of(ops) -> dict:
    update: dict = {}
    seen = set()
    for op, field, value in ops:
        root = field.split(".")[0]
        if root in seen:
            continue
        seen.add(root)
        update.setdefault(op, {})[field] = value
    return update


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional={"a": _nums, "b": _nums, "c": st.fixed_dictionaries({"d": _nums}),
                                           "l": st.lists(_nums, max_size=3)}),
       st.lists(_ops, min_size=1, max_size=4))
def test_updates_agree_with_mongomock(doc, ops):
    update = _update_of(ops)
    coll = mongomock.MongoClient().db.c
    coll.insert_one(dict(doc, _id=1))
    coll.update_one({"_id": 1}, update)
    expected = coll.find_one({"_id": 1})
    got = apply_update(dict(doc, _id=1), update)
    assert values_equal(got, expected), (got, expected)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["x", "y", "z.w"]), _nums, max_size=3), st.lists(_ops, min_size=1, max_size=4))
def test_upserts_agree_with_mongomock(query, ops):
    update = _update_of(ops)
    if any(f.split(".")[0] in {q.split(".")[0] for q in query} for fields in update.values() for f in fields):
        return  # a field both pinned and updated: MongoDB refuses some of these, mongomock does not
    coll = mongomock.MongoClient().db.c
    result = coll.update_one(query, update, upsert=True)
    expected = coll.find_one({"_id": result.upserted_id})
    expected.pop("_id")
    got = upsert_document(query, compile_update(update))
    assert sorted(got) == sorted(expected) and all(values_equal(got[k], expected[k]) for k in got), (got, expected)
