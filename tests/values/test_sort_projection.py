"""Sort specifications and projections: MongoDB's rules by hand, mongomock as an oracle for the rest."""

from __future__ import annotations

import datetime

import mongomock
import pytest
from bson.min_key import MinKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoarddb.errors import BadValueError
from hoarddb.values.order import values_equal
from hoarddb.values.projection import compile_projection
from hoarddb.values.sort import sort_documents

UTC = datetime.timezone.utc


def order(docs, spec, limit=None):
    return [d["_id"] for d in sort_documents(docs, spec, limit)]


# -- sort ----------------------------------------------------------------------------------

def test_sort_by_several_keys_in_mongodbs_order_of_types():
    docs = [
        {"_id": 1, "v": "b", "w": 1}, {"_id": 2, "v": 2, "w": 1}, {"_id": 3, "v": None, "w": 2},
        {"_id": 4, "w": 1}, {"_id": 5, "v": {"a": 1}}, {"_id": 6, "v": True}, {"_id": 7, "v": 1.5},
        {"_id": 8, "v": datetime.datetime(2024, 1, 1, tzinfo=UTC)}, {"_id": 9, "v": "a"}, {"_id": 10, "v": MinKey()},
    ]
    # MinKey < null = missing < numbers < strings < objects < bool < date
    assert order(docs, {"v": 1}) == [10, 3, 4, 7, 2, 9, 1, 5, 6, 8]
    assert order(docs, {"v": -1}) == [8, 6, 5, 1, 9, 2, 7, 3, 4, 10]
    assert order(docs, {"w": -1, "v": 1}) == [3, 4, 2, 1, 10, 7, 9, 5, 6, 8]
    assert order(docs, [("w", 1), ("_id", -1)])[:4] == [10, 9, 8, 7]
    assert order(docs, {"v": 1}, limit=3) == [10, 3, 4]


def test_arrays_sort_by_their_least_or_greatest_element():
    docs = [{"_id": 1, "a": [3, 1]}, {"_id": 2, "a": 2}, {"_id": 3, "a": []}, {"_id": 4},
            {"_id": 5, "a": [0, 9]}, {"_id": 6, "a": [[0]]}]
    # ascending: [] (before null), missing, 0, 1, 2, then the array [0] (an array sorts after numbers)
    assert order(docs, {"a": 1}) == [3, 4, 5, 1, 2, 6]
    # descending: [0] , 9, 3, 2, missing, []
    assert order(docs, {"a": -1}) == [6, 5, 1, 2, 4, 3]
    # a dotted path through an array of documents
    docs = [{"_id": 1, "l": [{"x": 5}, {"x": 1}]}, {"_id": 2, "l": [{"x": 3}]}, {"_id": 3, "l": [{"y": 1}]}]
    assert order(docs, {"l.x": 1}) == [3, 1, 2]
    assert order(docs, {"l.x": -1}) == [1, 2, 3]


@pytest.mark.parametrize("spec, says", [
    ({}, "at least one field"),
    ({"a": 2}, "must be 1"),
    ({"a": True}, "must be 1"),
    ({"a": "asc"}, "must be 1"),
    ({"a": {"$meta": "textScore"}}, "must be 1"),
    ("a", "must be a document"),
    ({"$a": 1}, "may not begin"),
    ({"a..b": 1}, "empty part"),
])
def test_sort_refusals(spec, says):
    with pytest.raises(BadValueError, match=says):
        sort_documents([], spec)


_scalar = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False), st.sampled_from(["a", "b", "B", ""]),
                    st.none())
_sort_docs = st.lists(st.fixed_dictionaries({}, optional={"a": _scalar, "b": _scalar,
                                                           "c": st.fixed_dictionaries({}, optional={"d": _scalar})}),
                      min_size=1, max_size=10)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_sort_docs, st.lists(st.tuples(st.sampled_from(["a", "b", "c.d"]), st.sampled_from([1, -1])), min_size=1,
                            max_size=3, unique_by=lambda t: t[0]))
def test_sort_agrees_with_mongomock(docs, spec):
    docs = [dict(d, _id=i) for i, d in enumerate(docs)]
    coll = mongomock.MongoClient().db.c
    coll.insert_many([dict(d) for d in docs])
    spec = spec + [("_id", 1)]  # ties broken the same way
    assert order(docs, dict(spec)) == [d["_id"] for d in coll.find().sort(spec)]


# -- projection ----------------------------------------------------------------------------

DOC = {"_id_": "k", "name": "Ann", "address": {"city": "Oslo", "zip": "0150", "geo": {"lat": 1, "lng": 2}},
       "items": [{"sku": "x", "qty": 2}, {"sku": "y"}, 7, [{"sku": "z"}]], "notes": "n"}


def test_inclusion_keeps_the_key_and_the_named_fields_in_document_order():
    assert compile_projection({"notes": 1, "name": 1})(DOC) == {"_id_": "k", "name": "Ann", "notes": "n"}
    assert compile_projection({"address.city": 1, "_id_": 0})(DOC) == {"address": {"city": "Oslo"}}
    assert compile_projection({"address": {"geo.lat": 1}, "_id_": 0})(DOC) == {"address": {"geo": {"lat": 1}}}
    # into each document of an array; other elements dropped, nested arrays looked into
    assert compile_projection({"items.sku": 1, "_id_": 0})(DOC) == \
        {"items": [{"sku": "x"}, {"sku": "y"}, [{"sku": "z"}]]}
    # a path to nothing gives nothing
    assert compile_projection({"nope.x": 1})(DOC) == {"_id_": "k"}
    assert compile_projection({"name.x": 1})(DOC) == {"_id_": "k"}
    assert compile_projection({"_id_": 1})(DOC) == {"_id_": "k"}
    assert compile_projection({"name": True, "notes": 5})(DOC) == {"_id_": "k", "name": "Ann", "notes": "n"}


def test_exclusion_drops_the_named_fields():
    assert compile_projection({"address": 0, "items": 0})(DOC) == {"_id_": "k", "name": "Ann", "notes": "n"}
    assert compile_projection({"_id_": 0, "address.geo": 0, "items.qty": 0, "notes": False, "name": 0})(DOC) == \
        {"address": {"city": "Oslo", "zip": "0150"}, "items": [{"sku": "x"}, {"sku": "y"}, 7, [{"sku": "z"}]]}
    assert compile_projection({"_id_": 0})(DOC) == {k: v for k, v in DOC.items() if k != "_id_"}


def test_computed_fields():
    shape = compile_projection({"name": 1, "city": "$address.city", "n": {"$size": "$items"}, "_id_": 0})
    assert shape(DOC) == {"name": "Ann", "city": "Oslo", "n": 4}
    assert compile_projection({"x": {"$literal": 1}, "y": "$$REMOVE"})(DOC) == {"_id_": "k", "x": 1}


@pytest.mark.parametrize("spec, says", [
    ({"a": 1, "b": 0}, "mixes inclusion and exclusion"),
    ({"a": 0, "b": "$x"}, "mixes inclusion and exclusion"),
    ({"a": 1, "a.b": 1}, "path collision"),
    ({"a.b": 1, "a": 1}, "path collision"),
    ({}, "at least one field"),
    ([("a", 1)], "must be a document"),
    ({"a.$": 1}, "positional projection"),
    ({"$a": 1}, "may not begin"),
])
def test_projection_refusals(spec, says):
    with pytest.raises(BadValueError, match=says):
        compile_projection(spec)


def test_find_projection_refuses_find_only_operators_by_name():
    with pytest.raises(BadValueError, match="\\$slice is not supported"):
        compile_projection({"items": {"$slice": 2}}, expressions=False)
    with pytest.raises(BadValueError, match="\\$elemMatch is not supported"):
        compile_projection({"items": {"$elemMatch": {"sku": "x"}}}, expressions=False)
    with pytest.raises(BadValueError, match="must be 1 \\(keep\\) or 0"):
        compile_projection({"items": "$x"}, expressions=False)


_leaf = st.one_of(st.integers(-3, 3), st.text(max_size=2), st.none())
_nested = st.fixed_dictionaries({}, optional={"x": _leaf, "y": _leaf,
                                              "z": st.fixed_dictionaries({}, optional={"w": _leaf, "v": _leaf})})
_proj_docs = st.lists(st.fixed_dictionaries({}, optional={"a": _leaf, "b": _nested, "c": st.lists(_nested, max_size=2)}),
                      min_size=1, max_size=5)
_paths = st.sampled_from(["a", "b", "b.x", "b.z", "b.z.w", "c", "c.x", "c.z.v", "d"])


def _no_collision(paths) -> bool:
    return not any(p != q and q.startswith(p + ".") for p in paths for q in paths)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_proj_docs, st.lists(_paths, min_size=1, max_size=3, unique=True).filter(_no_collision), st.booleans(),
       st.booleans())
def test_projection_agrees_with_mongomock(docs, paths, include, hide_id):
    docs = [dict(d, _id=i) for i, d in enumerate(docs)]
    coll = mongomock.MongoClient().db.c
    coll.insert_many([dict(d) for d in docs])
    spec = {p: 1 if include else 0 for p in paths}
    if hide_id:
        spec["_id"] = 0
    shape = compile_projection(spec)
    expected = list(coll.find({}, spec))
    got = [shape(d) for d in docs]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert values_equal(_sorted(g), _sorted(e)), (spec, g, e)


def _sorted(value):
    """Field order aside (mongomock keeps the projection's, MongoDB and hoardDB the document's)."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value
