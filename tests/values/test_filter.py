"""compile_filter / matches / equality_fields: MongoDB's filter semantics."""

from __future__ import annotations

import datetime
import re

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.regex import Regex
from hypothesis import example, given, settings
from hypothesis import strategies as st

from . import values_strategies as vs
from hoarddb.errors import BadValueError
from hoarddb.values.filter import compile_filter, equality_fields, matches
from hoarddb.values.order import compare, type_rank, values_equal

UTC = datetime.timezone.utc

DOC = {
    "name": "Ann",
    "age": 30,
    "score": 7.5,
    "tags": ["a", "b"],
    "addr": {"city": "Oslo", "zip": "0150"},
    "items": [{"sku": "x", "qty": 2}, {"sku": "y", "qty": 5}],
    "matrix": [[1, 2], [3]],
    "nothing": None,
    "empty": [],
}


def m(flt, doc=DOC) -> bool:
    return matches(doc, flt)


# -- equality ----------------------------------------------------------------


def test_empty_filter_matches_everything():
    assert m({}) and m({}, {})


def test_implicit_equality_and_numbers_as_values():
    assert m({"name": "Ann"}) and not m({"name": "ann"})
    for v in (30, 30.0, Int64(30), Decimal128("30"), Decimal128("3.0E+1")):
        assert m({"age": v}) and m({"age": {"$eq": v}})
    assert not m({"age": "30"})
    assert m({"score": Decimal128("7.5")})
    assert m({"z": 0}, {"z": -0.0})
    assert m({"z": float("nan")}, {"z": Decimal128("NaN")})


def test_equality_is_and_over_fields():
    assert m({"name": "Ann", "age": 30}) and not m({"name": "Ann", "age": 31})


def test_dotted_paths():
    assert m({"addr.city": "Oslo"})
    assert not m({"addr.city": "Bergen"})
    assert m({"items.sku": "y"})          # through an array of documents
    assert m({"items.1.qty": 5})          # array position
    assert not m({"items.0.qty": 5})
    assert m({"tags.0": "a"}) and m({"tags.1": "b"}) and not m({"tags.2": "c"})
    assert m({"matrix.0": [1, 2]}) and m({"matrix.1.0": 3})
    assert not m({"matrix.0": 1})          # an array reached by a position is not looked into (MongoDB)
    assert m({"a.0": "field"}, {"a": [{"0": "field"}]})  # a numeric part also names fields of elements


def test_array_matches_when_an_element_or_the_whole_array_matches():
    assert m({"tags": "a"}) and m({"tags": "b"}) and not m({"tags": "c"})
    assert m({"tags": ["a", "b"]}) and not m({"tags": ["b", "a"]})
    assert m({"matrix": [3]})             # an element that is an array
    assert not m({"matrix": 3})           # only one level of arrays is looked into
    assert m({"empty": []}) and not m({"tags": []})


def test_query_document_is_exact_equality():
    assert m({"addr": {"city": "Oslo", "zip": "0150"}})
    assert not m({"addr": {"zip": "0150", "city": "Oslo"}})  # field order matters, as MongoDB
    assert not m({"addr": {"city": "Oslo"}})                  # no partial match
    assert m({"items": {"sku": "x", "qty": 2}})               # an element of the array


def test_null_matches_null_and_missing():
    assert m({"nothing": None}) and m({"missing": None}) and m({"addr.missing": None})
    assert not m({"name": None})
    assert m({"a": None}, {"a": [1, None]})
    assert not m({"a": None}, {"a": [1, 2]}) and not m({"empty": None})
    assert m({"x.y": None}, {"x": [{"y": 1}, {"z": 1}]})      # one element lacks y
    assert m({"missing": {"$eq": None}}) and not m({"missing": {"$ne": None}})
    assert m({"missing": {"$in": [None, 5]}})


def test_ne_and_nin_are_negations_over_the_whole_field():
    assert m({"age": {"$ne": 31}}) and not m({"age": {"$ne": 30.0}})
    assert not m({"tags": {"$ne": "a"}})      # an element equals "a"
    assert m({"missing": {"$ne": 1}})
    assert m({"tags": {"$nin": ["c", "d"]}}) and not m({"tags": {"$nin": ["b"]}})
    assert m({"missing": {"$nin": [1]}}) and not m({"missing": {"$nin": [None]}})


# -- ordering comparisons ----------------------------------------------------


def test_comparisons():
    assert m({"age": {"$gt": 29}}) and not m({"age": {"$gt": 30}}) and m({"age": {"$gte": 30}})
    assert m({"age": {"$lt": 30.5}}) and not m({"age": {"$lt": 30}}) and m({"age": {"$lte": Decimal128("30")}})
    assert m({"age": {"$gt": 20, "$lt": 40}}) and not m({"age": {"$gt": 20, "$lt": 25}})
    assert m({"name": {"$gt": "A", "$lt": "B"}})
    d = datetime.datetime(2024, 1, 1, tzinfo=UTC)
    assert m({"t": {"$gte": d}}, {"t": d}) and not m({"t": {"$gt": d}}, {"t": d})


def test_comparisons_only_within_the_type_bracket():
    assert not m({"name": {"$gt": 5}})          # a string is never > a number
    assert not m({"age": {"$lt": "z"}})         # a number is never < a string
    assert not m({"age": {"$gt": None}}) and not m({"flag": {"$lt": 1}}, {"flag": True})
    assert not m({"addr": {"$gt": 1}})
    assert m({"addr": {"$gt": {"city": "A"}}})


def test_comparisons_on_arrays_use_any_element():
    assert m({"tags": {"$gt": "a"}}) and not m({"tags": {"$gt": "b"}})
    assert m({"items.qty": {"$gt": 4}}) and not m({"items.qty": {"$gt": 5}})
    assert m({"a": {"$gt": 5, "$lt": 3}}, {"a": [1, 10]})  # different elements may satisfy each bound
    assert m({"matrix": {"$gt": [2]}})                      # whole-array comparison against an array


def test_comparisons_with_null_and_min_max_keys():
    assert m({"missing": {"$gte": None}}) and m({"missing": {"$lte": None}})
    assert not m({"missing": {"$gt": None}}) and not m({"missing": {"$lt": None}})
    assert m({"name": {"$gt": MinKey()}}) and m({"addr": {"$lt": MaxKey()}})
    assert m({"missing": {"$gt": MinKey()}}) and m({"missing": {"$lte": MaxKey()}})  # every value is, even none
    assert not m({"missing": {"$lt": MinKey()}}) and not m({"missing": {"$gte": MaxKey()}})


def test_nan_compares_only_equal():
    doc = {"x": float("nan")}
    assert m({"x": {"$gte": float("nan")}}, doc) and m({"x": {"$lte": Decimal128("NaN")}}, doc)
    assert not m({"x": {"$gt": float("nan")}}, doc) and not m({"x": {"$lt": 0}}, doc)
    assert not m({"x": {"$gt": float("nan")}}, {"x": 5}) and not m({"x": {"$lt": float("nan")}}, {"x": 5})


# -- $in, $exists, $and, $or, $nor, $not --------------------------------------


def test_in():
    assert m({"age": {"$in": [1, 30.0]}}) and not m({"age": {"$in": [1, 2]}})
    assert m({"tags": {"$in": ["z", "b"]}}) and not m({"tags": {"$in": []}})
    assert m({"name": {"$in": [re.compile("^A"), "x"]}})
    assert m({"addr": {"$in": [{"city": "Oslo", "zip": "0150"}]}})
    assert m({"age": {"$in": [Decimal128("30"), "x"]}})


def test_exists():
    assert m({"name": {"$exists": True}}) and not m({"name": {"$exists": False}})
    assert m({"missing": {"$exists": False}}) and m({"nothing": {"$exists": True}})
    assert m({"items.qty": {"$exists": True}}) and not m({"items.price": {"$exists": True}})
    assert m({"tags.1": {"$exists": 1}}) and m({"tags.5": {"$exists": 0}})


def test_logical_operators():
    assert m({"$and": [{"name": "Ann"}, {"age": 30}]}) and not m({"$and": [{"name": "Ann"}, {"age": 1}]})
    assert m({"$or": [{"name": "Bob"}, {"age": 30}]}) and not m({"$or": [{"name": "Bob"}, {"age": 1}]})
    assert m({"$nor": [{"name": "Bob"}, {"age": 1}]}) and not m({"$nor": [{"name": "Ann"}]})
    assert m({"$or": [{"$and": [{"age": {"$gt": 1}}, {"tags": "a"}]}], "name": "Ann"})


def test_not():
    assert m({"age": {"$not": {"$gt": 40}}}) and not m({"age": {"$not": {"$gt": 20}}})
    assert m({"missing": {"$not": {"$gt": 1}}})       # as MongoDB: $not also matches a missing field
    assert m({"name": {"$not": re.compile("^B")}}) and not m({"name": {"$not": Regex("^A")}})


# -- regex, $all, $size, $elemMatch ------------------------------------------


def test_regex():
    assert m({"name": re.compile("^a", re.I)}) and not m({"name": re.compile("^a")})
    assert m({"name": Regex("n{2}")}) and m({"tags": re.compile("b")})
    assert m({"name": {"$regex": "^A"}}) and m({"name": {"$regex": "^a", "$options": "i"}})
    assert not m({"age": {"$regex": "3"}})
    assert m({"r": Regex("^x", "i")}, {"r": Regex("^x", "i")})     # a stored regex equals the same regex
    assert m({"r": {"$eq": Regex("^x")}}, {"r": Regex("^x")}) and not m({"r": {"$eq": Regex("^x")}}, {"r": "xy"})


def test_all_size_elem_match():
    assert m({"tags": {"$all": ["b", "a"]}}) and not m({"tags": {"$all": ["a", "c"]}})
    assert not m({"tags": {"$all": []}})
    assert m({"tags": {"$size": 2}}) and not m({"tags": {"$size": 1}}) and m({"empty": {"$size": 0}})
    assert not m({"name": {"$size": 3}})
    assert m({"items": {"$elemMatch": {"sku": "y", "qty": {"$gt": 4}}}})
    assert not m({"items": {"$elemMatch": {"sku": "x", "qty": {"$gt": 4}}}})
    assert m({"s": {"$elemMatch": {"$gte": 80, "$lt": 85}}}, {"s": [70, 82, 90]})
    assert not m({"s": {"$elemMatch": {"$gte": 80, "$lt": 85}}}, {"s": [70, 90]})
    assert m({"s": {"$gte": 80, "$lt": 85}}, {"s": [70, 90]})    # without $elemMatch: any element per bound
    assert m({"items": {"$all": [{"$elemMatch": {"qty": 2}}, {"$elemMatch": {"qty": 5}}]}})


# -- MongoDB's own cases: regressions found by the differential audit against MongoDB's matcher ------
#
# Each expectation below is what MongoDB's server answers (its jstests: match_numeric_components.js,
# null_query_semantics.js, null2.js, index_bounds_minkey.js); hoardDB answered otherwise before.

# Shapes of a field "a" holding 42 at depth two, through documents and arrays.
_NUMERIC_SHAPES = {
    "scalar": 42, "array": [42], "doc0": {"0": 42}, "array_array": [[42]], "array_doc0": [{"0": 42}],
    "doc0_array": {"0": [42]}, "array_array_array": [[[42]]], "array_array_doc0": [[{"0": 42}]],
    "array_doc0_array": [{"0": [42]}], "doc0_array_array": {"0": [[42]]}, "array_doc0_array_array": [{"0": [[42]]}],
}


def _shapes_matching(flt) -> set:
    return {name for name, a in _NUMERIC_SHAPES.items() if matches({"a": a}, flt)}


def test_an_array_reached_by_a_position_is_not_looked_into():
    # "a.0" on [[42]] reaches the array [42] by its position: it equals [42], it does not hold 42.
    found = {"array", "doc0", "array_doc0", "doc0_array", "array_doc0_array"}
    assert _shapes_matching({"a.0": 42}) == found
    assert _shapes_matching({"a.0": {"$gt": 41}}) == found
    assert _shapes_matching({"a.0": {"$in": [41, 42]}}) == found
    assert _shapes_matching({"a.0": {"$all": [42]}}) == found
    assert _shapes_matching({"a.0": {"$ne": 42}}) == set(_NUMERIC_SHAPES) - found
    assert _shapes_matching({"a.0.0": 42}) == {"array_array", "array_doc0", "doc0_array", "array_array_doc0",
                                              "array_doc0_array"}
    assert m({"a.0": [42]}, {"a": [[42]]}) and not m({"a.0": [42]}, {"a": [[[42]]]})
    assert m({"tags.0": "a"}, {"tags": ["a"]}) and m({"a.0.b": 2}, {"a": [{"b": [1, 2]}]})  # a name still looks in


def test_elem_match_does_not_look_into_an_element_that_is_an_array():
    assert not m({"a": {"$elemMatch": {"$eq": 5}}}, {"a": [[5]]})
    assert m({"a": {"$elemMatch": {"$eq": [5]}}}, {"a": [[5]]})
    assert m({"f.0": {"$elemMatch": {"$eq": 5}}}, {"f": [[3, 5], [5, 7]]})
    assert not m({"f.0": {"$elemMatch": {"$eq": 5}}}, {"f": [[[0], [3, 5]]]})


def test_elem_match_of_a_document_condition_takes_an_array_element_as_a_document():
    # As MongoDB: an array element is then a document with fields "0", "1", ...
    assert m({"a": {"$elemMatch": {"b": None}}}, {"a": [[]]})
    assert m({"a": {"$elemMatch": {"0": 5}}}, {"a": [[5]]})
    assert not m({"a": {"$elemMatch": {"b": {"$ne": None}}}}, {"a": [[1]]})
    assert not m({"a": {"$elemMatch": {"b": None}}}, {"a": [5]})


def test_min_key_and_max_key_bounds_match_a_missing_field():
    assert m({"a": {"$gt": MinKey()}}, {}) and m({"a": {"$gte": MinKey()}}, {})
    assert m({"a": {"$lt": MaxKey()}}, {}) and m({"a": {"$lte": MaxKey()}}, {})
    assert not m({"a": {"$lt": MinKey()}}, {}) and not m({"a": {"$lte": MinKey()}}, {})
    assert not m({"a": {"$gt": MaxKey()}}, {}) and not m({"a": {"$gte": MaxKey()}}, {})
    assert not m({"a": {"$eq": MinKey()}}, {}) and not m({"a": {"$eq": MaxKey()}}, {})
    assert not m({"a": {"$not": {"$gt": MinKey()}}}, {})


def test_a_value_in_an_array_is_not_a_missing_field_beside_it():
    # {a: [5, {b: 5}]}: "a.b" reaches 5; the element 5 has no "b" but is not a document either.
    for doc in ({"a": [5, {"b": 5}]}, {"a": [{"b": 1}, 2]}, {"a": [[], {"b": 1}]}):
        assert not m({"a.b": None}, doc) and not m({"a.b": {"$in": [None]}}, doc)
        assert m({"a.b": {"$ne": None}}, doc) and m({"a.b": {"$exists": True}}, doc)
    assert m({"a.b": None}, {"a": [{}, {"b": 5}]})             # a document without "b" is a missing b
    assert m({"a.b": None}, {"a": [1, 2]}) and m({"a.b": None}, {"a": []})  # reaches nothing: our departure


def test_regex_operator_matches_a_stored_regex_as_a_regex_value_does():
    doc = {"r": Regex("^x", "i")}
    assert m({"r": Regex("^x", "i")}, doc)
    assert m({"r": {"$regex": "^x", "$options": "i"}}, doc) and m({"r": {"$regex": Regex("^x", "i")}}, doc)
    assert not m({"r": {"$regex": "^x"}}, doc)
    assert not m({"r": {"$not": {"$regex": "^x", "$options": "i"}}}, doc)


# -- validation ----------------------------------------------------------------


@pytest.mark.parametrize("bad,words", [
    ([("a", 1)], "must be a document"),
    ("a == 1", "must be a document"),
    ({"a": {"$foo": 1}}, "unknown filter operator '$foo'"),
    ({"$foo": []}, "unknown top-level filter operator '$foo'"),
    ({"$gt": 1}, "accepted: $and, $or, $nor"),
    ({"a": {"$in": 5}}, "$in on 'a' needs a list"),
    ({"a": {"$nin": "ab"}}, "$nin on 'a' needs a list"),
    ({"a": {"$all": 1}}, "needs a list"),
    ({"$and": []}, "$and needs a non-empty list of filter documents"),
    ({"$or": {"a": 1}}, "$or needs a non-empty list"),
    ({"$nor": [1]}, "$nor needs a non-empty list"),
    ({"$and": [{"a": {"$bad": 1}}]}, "unknown filter operator '$bad'"),
    ({"a": {"$not": 5}}, "$not on 'a' needs an operator document"),
    ({"a": {"$gt": 1, "b": 2}}, "mixes operators and field names"),
    ({"a": {"$and": [{"b": 1}]}}, "goes at the top of the filter"),
    ({"a": {"$size": -1}}, "$size"),
    ({"a": {"$size": 1.5}}, "$size"),
    ({"a": {"$regex": "("}}, "bad regular expression"),
    ({"a": {"$regex": "a", "$options": "q"}}, "accepted: i, m, s, x"),
    ({"a": {"$options": "i"}}, "needs a $regex"),
    ({"a": {"$in": [{"$gt": 1}]}}, "plain values"),
    ({"a": {"$elemMatch": 1}}, "$elemMatch"),
    ({"": 1}, "must not be empty"),
    ({"a..b": 1}, "empty part"),
    ({"a": object()}, "cannot be stored or compared"),
])
def test_bad_filters_are_refused_up_front(bad, words):
    with pytest.raises(BadValueError) as err:
        compile_filter(bad)
    assert err.value.code == 2
    assert words in err.value.message, err.value.message


def test_unknown_operator_message_lists_accepted():
    with pytest.raises(BadValueError) as err:
        compile_filter({"a": {"$foo": 1}})
    for op in ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$not"):
        assert op in err.value.message


def test_validation_happens_before_any_document():
    # the bad operator sits behind a branch that would never be evaluated
    with pytest.raises(BadValueError):
        compile_filter({"$or": [{"a": 1}, {"b": {"$foo": 1}}]})


# -- equality_fields ---------------------------------------------------------


def test_equality_fields():
    assert equality_fields({"a": 1, "b.c": "x", "d": {"$gt": 1}}) == {"a": 1, "b.c": "x"}
    assert equality_fields({"a": {"$eq": 5, "$lt": 9}}) == {"a": 5}
    assert equality_fields({"$and": [{"a": 1}, {"$and": [{"b": 2}]}], "c": {"k": 1}}) == \
        {"a": 1, "b": 2, "c": {"k": 1}}
    assert equality_fields({"$or": [{"a": 1}], "n": None}) == {"n": None}
    assert equality_fields({"a": re.compile("x")}) == {}
    assert equality_fields({}) == {}
    with pytest.raises(BadValueError):
        equality_fields({"a": {"$foo": 1}})


# -- properties ----------------------------------------------------------------


@settings(max_examples=150)
@given(vs.pool_scalars, vs.pool_scalars)
def test_comparison_operators_agree_with_compare_in_a_bracket(stored, q):
    doc = {"f": stored}
    same = type_rank(stored) == type_rank(q)
    c = compare(stored, q)
    nan = vs_is_nan(stored) or vs_is_nan(q)
    if same and not nan and not isinstance(q, (MinKey, MaxKey)):
        assert matches(doc, {"f": {"$gt": q}}) == (c > 0)
        assert matches(doc, {"f": {"$gte": q}}) == (c >= 0)
        assert matches(doc, {"f": {"$lt": q}}) == (c < 0)
        assert matches(doc, {"f": {"$lte": q}}) == (c <= 0)
    elif not same and not isinstance(q, (MinKey, MaxKey)):
        assert not any(matches(doc, {"f": {op: q}}) for op in ("$gt", "$gte", "$lt", "$lte"))
    if not isinstance(q, (Regex, re.Pattern)):
        assert matches(doc, {"f": q}) == values_equal(stored, q)
        assert matches(doc, {"f": {"$ne": q}}) != values_equal(stored, q)
        assert matches(doc, {"f": {"$in": [q]}}) == values_equal(stored, q)


def vs_is_nan(v) -> bool:
    from hoarddb.values.order import is_nan

    return is_nan(v)


@settings(max_examples=100)
@given(vs.bson_documents, st.sampled_from(["a", "b", "c", "a.a", "a.0", "b.b.a"]))
def test_exists_and_null_agree(doc, path):
    exists = matches(doc, {path: {"$exists": True}})
    assert exists != matches(doc, {path: {"$exists": False}})
    if not exists:
        assert matches(doc, {path: None})


# -- a plain Python model of the documented semantics, against the matcher ----------------------

_ABSENT = object()


def _model_candidates(doc, parts):
    """What a dotted path reaches, as docs/dev/values.md describes it, written independently of paths.py."""
    def walk(v, parts, by_position=False):
        if not parts:
            if isinstance(v, list) and not by_position:
                return v + [v]  # an array at the end counts as each of its elements and as itself...
            return [v]          # ...unless a position reached it: then as itself only
        p, rest = parts[0], parts[1:]
        if isinstance(v, dict):
            return walk(v[p], rest) if p in v else [_ABSENT]
        if isinstance(v, list):
            out = []
            if p.isdigit():  # a position, and also the field of that name in the array's documents
                if int(p) < len(v):
                    out += walk(v[int(p)], rest, by_position=True)
                for e in v:
                    if isinstance(e, dict) and p in e:
                        out += walk(e, parts)
                return out
            for e in v:  # a name looks into each document of the array (not into other elements)
                if isinstance(e, dict):
                    out += walk(e, parts)
            return out
        return [] if by_position else [_ABSENT]  # a name that reaches a scalar too early: missing

    return walk(doc, parts.split(".")) or [_ABSENT]  # a path that reaches nothing at all: missing


def _model_equal(c, q) -> bool:
    if q is None:
        return c is _ABSENT or c is None
    return c is not _ABSENT and compare(c, q) == 0


def _model_range(c, q, op) -> bool:
    if c is _ABSENT:
        if isinstance(q, (MinKey, MaxKey)):  # the bounds every value meets, as MongoDB: even none
            return op in (("$gt", "$gte") if isinstance(q, MinKey) else ("$lt", "$lte"))
        return q is None and op in ("$gte", "$lte")
    if not isinstance(q, (MinKey, MaxKey)):
        if type_rank(c) != type_rank(q):
            return False  # comparisons stay in their type bracket
        if vs_is_nan(c) or vs_is_nan(q):
            return op in ("$gte", "$lte") and vs_is_nan(c) and vs_is_nan(q)
    r = compare(c, q)
    return {"$gt": r > 0, "$gte": r >= 0, "$lt": r < 0, "$lte": r <= 0}[op]


def _model(doc, path, op, q) -> bool:
    cands = _model_candidates(doc, path)
    if op == "$eq":
        return any(_model_equal(c, q) for c in cands)
    if op == "$ne":
        return not any(_model_equal(c, q) for c in cands)
    if op == "$in":
        return any(_model_equal(c, x) for c in cands for x in q)
    if op == "$nin":
        return not any(_model_equal(c, x) for c in cands for x in q)
    if op == "$exists":
        return any(c is not _ABSENT for c in cands) == q
    return any(_model_range(c, q, op) for c in cands)


_plain = st.one_of(st.sampled_from([None, 1, 2.0, "a", float("nan"), MinKey(), MaxKey()]),
                   vs.pool_scalars.filter(lambda v: not isinstance(v, (Regex, re.Pattern))))
_field_values = st.recursive(_plain, lambda c: st.one_of(
    st.lists(c, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "0", "1"]), c, max_size=2)), max_leaves=5)
_model_docs = st.dictionaries(st.sampled_from(["a", "b"]), _field_values, max_size=2)
_OPS = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"]


@settings(max_examples=200, deadline=None)
@given(_model_docs, st.sampled_from(["a", "a.b", "a.0", "a.b.a", "a.0.b", "a.1.0", "b"]), st.sampled_from(_OPS),
       _plain, st.lists(_plain, max_size=3), st.booleans())
@example({"a": [1, 2]}, "a.b", "$eq", None, [], False)  # a path that reaches nothing counts as missing
@example({"a": [{"b": 1}, 2]}, "a.b", "$eq", None, [], False)  # ...but this one reaches 1 (MongoDB's null2.js)
@example({"a": [[1, 2]]}, "a.0", "$eq", 1, [], False)  # an array reached by a position is not looked into
@example({"b": 1}, "a", "$gt", None, [], False)  # $gt: null matches nothing, not even a missing field
@example({"b": 1}, "a", "$gt", MinKey(), [], False)  # $gt: MinKey matches everything, even a missing field
def test_operators_agree_with_a_python_model(doc, path, op, q, q_list, implicit):
    if op in ("$in", "$nin"):
        q = q_list
    elif op == "$exists":
        q = implicit
    flt = {path: q} if op == "$eq" and implicit and not isinstance(q, dict) else {path: {op: q}}
    assert matches(doc, flt) == _model(doc, path, op, q), flt
