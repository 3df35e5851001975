"""apply_update / validate_update: MongoDB's update operators, applied to a new document."""

from __future__ import annotations

import copy
import datetime
import re

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.regex import Regex
from bson.timestamp import Timestamp
from hypothesis import given, settings
from hypothesis import strategies as st

from . import values_strategies as vs
from hoarddb.errors import BadValueError
from hoarddb.values.order import values_equal
from hoarddb.values.paths import MISSING, get_path
from hoarddb.values.update import DOC_KEY, UPDATE_OPERATORS, apply_update, validate_update

UTC = datetime.timezone.utc
NOW = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def up(doc, update):
    before = copy.deepcopy(doc)
    result = apply_update(doc, update, now=NOW)
    assert doc == before, "apply_update must not change its input"
    return result


# -- $set / $unset ----------------------------------------------------------------


def test_set():
    assert up({"a": 1}, {"$set": {"a": 2, "b": "x"}}) == {"a": 2, "b": "x"}
    assert up({}, {"$set": {"a.b.c": 1}}) == {"a": {"b": {"c": 1}}}       # creates documents on the way
    assert up({"a": {"x": 1}}, {"$set": {"a.y": 2}}) == {"a": {"x": 1, "y": 2}}
    assert up({"a": [1, 2]}, {"$set": {"a.1": 9}}) == {"a": [1, 9]}
    assert up({"a": [1]}, {"$set": {"a.3": 9}}) == {"a": [1, None, None, 9]}  # pads with null
    assert up({"a": [{"b": 1}]}, {"$set": {"a.0.b": 2}}) == {"a": [{"b": 2}]}
    assert up({"a": {}}, {"$set": {"a.0": 1}}) == {"a": {"0": 1}}           # a number names a field in a doc


def test_set_copies_the_value():
    value = {"k": [1]}
    result = up({}, {"$set": {"a": value}})
    result["a"]["k"].append(2)
    assert value == {"k": [1]}


def test_result_shares_nothing_with_input():
    doc = {"a": {"b": [1, {"c": 2}]}}
    result = up(doc, {"$set": {"x": 1}})
    result["a"]["b"][1]["c"] = 99
    assert doc["a"]["b"][1]["c"] == 2


def test_set_refusals():
    with pytest.raises(BadValueError, match="cannot create field 'b'"):
        up({"a": 5}, {"$set": {"a.b": 1}})
    with pytest.raises(BadValueError, match="traverse the array"):
        up({"a": [1]}, {"$set": {"a.b": 1}})
    with pytest.raises(BadValueError, match="cannot create field"):
        up({"a": None}, {"$set": {"a.b": 1}})


def test_unset():
    assert up({"a": 1, "b": 2}, {"$unset": {"a": ""}}) == {"b": 2}
    assert up({"a": {"b": 1, "c": 2}}, {"$unset": {"a.b": 1}}) == {"a": {"c": 2}}
    assert up({"a": 1}, {"$unset": {"x.y": 1, "z": 1}}) == {"a": 1}         # missing: nothing to do
    assert up({"a": [1, 2, 3]}, {"$unset": {"a.1": 1}}) == {"a": [1, None, 3]}
    assert up({"a": 5}, {"$unset": {"a.b": 1}}) == {"a": 5}


# -- $inc / $mul ------------------------------------------------------------------


def test_inc():
    r = up({"n": 1}, {"$inc": {"n": 2}})
    assert r == {"n": 3} and type(r["n"]) is int
    r = up({"n": 1}, {"$inc": {"n": 0.5}})
    assert r == {"n": 1.5} and type(r["n"]) is float
    r = up({"n": 1.5}, {"$inc": {"n": 1}})
    assert type(r["n"]) is float
    assert up({}, {"$inc": {"n": 5, "a.b": -1}}) == {"n": 5, "a": {"b": -1}}
    r = up({"n": Int64(1)}, {"$inc": {"n": 1}})
    assert type(r["n"]) is Int64 and r["n"] == 2
    r = up({"n": Decimal128("1.1")}, {"$inc": {"n": 1}})
    assert r["n"] == Decimal128("2.1")
    r = up({"n": 1}, {"$inc": {"n": Decimal128("0.25")}})
    assert r["n"] == Decimal128("1.25")
    assert up({"a": [1, 2]}, {"$inc": {"a.1": 10}}) == {"a": [1, 12]}
    r = up({"n": 2**40}, {"$inc": {"n": 2**40}})
    assert r["n"] == 2**41 and type(r["n"]) is int


def test_inc_refusals():
    with pytest.raises(BadValueError, match="not a number"):
        up({"n": "1"}, {"$inc": {"n": 1}})
    with pytest.raises(BadValueError, match="overflows"):
        up({"n": 2**63 - 1}, {"$inc": {"n": 1}})


def test_mul():
    assert up({"n": 3}, {"$mul": {"n": 4}}) == {"n": 12}
    r = up({"n": 3}, {"$mul": {"n": 0.5}})
    assert r["n"] == 1.5 and type(r["n"]) is float
    r = up({}, {"$mul": {"n": 7}})
    assert r == {"n": 0} and type(r["n"]) is int                             # missing: 0 of the same type
    assert type(up({}, {"$mul": {"n": 7.0}})["n"]) is float
    assert up({"n": Decimal128("1.5")}, {"$mul": {"n": 2}})["n"] == Decimal128("3.0")
    with pytest.raises(BadValueError, match="not a number"):
        up({"n": [1]}, {"$mul": {"n": 2}})


# -- $min / $max -------------------------------------------------------------------


def test_min_max():
    assert up({"n": 5}, {"$min": {"n": 3}}) == {"n": 3}
    assert up({"n": 5}, {"$min": {"n": 8}}) == {"n": 5}
    assert up({"n": 5}, {"$max": {"n": 8}}) == {"n": 8}
    assert up({"n": 5}, {"$max": {"n": 5.0}}) == {"n": 5}                    # equal: unchanged
    assert up({}, {"$min": {"n": 1}, "$max": {"m": 2}}) == {"n": 1, "m": 2}
    assert up({"n": "a"}, {"$min": {"n": 1}}) == {"n": 1}                     # BSON order across types
    d1, d2 = datetime.datetime(2020, 1, 1, tzinfo=UTC), datetime.datetime(2021, 1, 1, tzinfo=UTC)
    assert up({"d": d1}, {"$max": {"d": d2}}) == {"d": d2}


# -- arrays ----------------------------------------------------------------------------


def test_push():
    assert up({"a": [1]}, {"$push": {"a": 2}}) == {"a": [1, 2]}
    assert up({}, {"$push": {"a": 1}}) == {"a": [1]}
    assert up({"a": [1]}, {"$push": {"a": [2, 3]}}) == {"a": [1, [2, 3]]}      # a list is one element
    assert up({"a": [1]}, {"$push": {"a": {"$each": [2, 3]}}}) == {"a": [1, 2, 3]}
    assert up({"a": [1, 4]}, {"$push": {"a": {"$each": [2, 3], "$position": 1}}}) == {"a": [1, 2, 3, 4]}
    assert up({"a": [1, 4]}, {"$push": {"a": {"$each": [9], "$position": -1}}}) == {"a": [1, 9, 4]}
    assert up({"a": [3, 1]}, {"$push": {"a": {"$each": [2], "$sort": 1}}}) == {"a": [1, 2, 3]}
    assert up({"a": [3, 1]}, {"$push": {"a": {"$each": [2], "$sort": -1, "$slice": 2}}}) == {"a": [3, 2]}
    assert up({"a": [1, 2, 3]}, {"$push": {"a": {"$each": [4], "$slice": -2}}}) == {"a": [3, 4]}
    assert up({"a": [1]}, {"$push": {"a": {"$each": [], "$slice": 0}}}) == {"a": []}
    items = [{"s": 3}, {"s": 1}, {}]
    assert up({"a": items}, {"$push": {"a": {"$each": [{"s": 2}], "$sort": {"s": 1}}}}) == \
        {"a": [{}, {"s": 1}, {"s": 2}, {"s": 3}]}
    with pytest.raises(BadValueError, match="not an array"):
        up({"a": 1}, {"$push": {"a": 2}})


def test_add_to_set():
    assert up({"a": [1, 2]}, {"$addToSet": {"a": 2.0}}) == {"a": [1, 2]}      # 2.0 is already there
    assert up({"a": [1]}, {"$addToSet": {"a": 3}}) == {"a": [1, 3]}
    assert up({}, {"$addToSet": {"a": {"$each": [1, 1, 2]}}}) == {"a": [1, 2]}
    assert up({"a": [{"x": 1}]}, {"$addToSet": {"a": {"x": 1}}}) == {"a": [{"x": 1}]}
    with pytest.raises(BadValueError, match="not an array"):
        up({"a": "s"}, {"$addToSet": {"a": 1}})


def test_pull():
    assert up({"a": [1, 2, 1, 3]}, {"$pull": {"a": 1}}) == {"a": [2, 3]}
    assert up({"a": [1, 2.0, Int64(2)]}, {"$pull": {"a": 2}}) == {"a": [1]}
    assert up({"a": [1, 5, 9]}, {"$pull": {"a": {"$gte": 5}}}) == {"a": [1]}
    assert up({"a": [1, "x", 9]}, {"$pull": {"a": {"$in": ["x", 9]}}}) == {"a": [1]}
    docs = [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}, 7]
    assert up({"a": docs}, {"$pull": {"a": {"k": 2}}}) == {"a": [{"k": 1, "v": "a"}, 7]}  # a condition
    assert up({"a": docs}, {"$pull": {"a": {"k": {"$lt": 2}}}}) == {"a": [{"k": 2, "v": "b"}, 7]}
    assert up({"a": [[1, 2], [3]]}, {"$pull": {"a": [1, 2]}}) == {"a": [[3]]}
    assert up({}, {"$pull": {"a": 1}}) == {}
    with pytest.raises(BadValueError, match="not an array"):
        up({"a": 1}, {"$pull": {"a": 1}})


def test_pull_with_an_empty_document_removes_every_document():
    # Regression: {} is a filter every document element matches (MongoDB's $pull), not the value {}.
    assert up({"a": [{"x": 1}, 2, {}, [3], "s"]}, {"$pull": {"a": {}}}) == {"a": [2, [3], "s"]}


def test_pull_with_a_regex_removes_the_strings_it_matches():
    # Regression: as in a filter, a regex matches strings by its pattern (and a stored regex equal to it).
    doc = {"a": ["apple", "Avocado", "pear", 5, Regex("^a"), ["abc"]]}
    assert up(doc, {"$pull": {"a": Regex("^a")}}) == {"a": ["Avocado", "pear", 5]}
    assert up(doc, {"$pull": {"a": re.compile("^a", re.I)}}) == {"a": ["pear", 5, Regex("^a")]}


def test_pull_all_and_pop():
    assert up({"a": [1, 2, 3, 1]}, {"$pullAll": {"a": [1, 3.0]}}) == {"a": [2]}
    assert up({"a": [1, 2, 3]}, {"$pop": {"a": 1}}) == {"a": [1, 2]}
    assert up({"a": [1, 2, 3]}, {"$pop": {"a": -1}}) == {"a": [2, 3]}
    assert up({"a": []}, {"$pop": {"a": 1}}) == {"a": []}


# -- $rename / $currentDate ------------------------------------------------------------------


def test_rename():
    assert up({"a": 1, "b": 2}, {"$rename": {"a": "c"}}) == {"b": 2, "c": 1}
    assert up({"a": {"x": 1}}, {"$rename": {"a.x": "b.y"}}) == {"a": {}, "b": {"y": 1}}
    assert up({"b": 2}, {"$rename": {"a": "c"}}) == {"b": 2}                 # missing source: nothing
    assert up({"a": 1, "c": 5}, {"$rename": {"a": "c"}}) == {"c": 1}         # overwrites the target
    with pytest.raises(BadValueError, match="through the array"):
        up({"a": [{"x": 1}]}, {"$rename": {"a.0.x": "y"}})


def test_current_date():
    r = up({}, {"$currentDate": {"d": True, "t": {"$type": "timestamp"}, "e": {"$type": "date"}}})
    assert r["d"] == NOW.replace(microsecond=123000) and r["e"] == r["d"]
    assert r["t"] == Timestamp(int(NOW.timestamp()), 1)
    r = apply_update({}, {"$currentDate": {"d": True}})
    assert abs(r["d"] - datetime.datetime.now(UTC)) < datetime.timedelta(seconds=5)


def test_an_update_refused_halfway_changes_nothing():
    # The $push and $set before the failing $inc are applied to a copy that is thrown away.
    doc = {"n": "x", "tags": ["a"], "k": 1}
    before = copy.deepcopy(doc)
    with pytest.raises(BadValueError) as err:
        apply_update(doc, {"$push": {"tags": "b"}, "$set": {"k": 2}, "$inc": {"n": 1}})
    assert doc == before
    assert err.value.code == 2
    assert err.value.message == """$inc of 'n': the field holds string "x", not a number"""  # BSON type names


def test_several_operators_apply_in_order():
    r = up({"n": 1, "tags": ["a"], "old": 1},
           {"$inc": {"n": 1}, "$push": {"tags": "b"}, "$set": {"x.y": 1}, "$unset": {"old": 1}})
    assert r == {"n": 2, "tags": ["a", "b"], "x": {"y": 1}}


# -- refusals -------------------------------------------------------------------------


@pytest.mark.parametrize("bad,words", [
    ([1], "must be a document of operators"),
    (None, "must be a document of operators"),
    ({}, "must not be empty"),
    ({"a": 1}, "to replace a whole document use put"),
    ({"$set": {"a": 1}, "b": 2}, "to replace a whole document use put"),
    ({"$foo": {"a": 1}}, "unknown update operator '$foo'; accepted: $set, $unset, $inc"),
    ({"$set": 5}, "$set needs a non-empty document"),
    ({"$set": {}}, "$set needs a non-empty document"),
    ({"$inc": {"a": "1"}}, "$inc of 'a' needs a number"),
    ({"$inc": {"a": True}}, "$inc of 'a' needs a number"),
    ({"$mul": {"a": None}}, "$mul of 'a' needs a number"),
    ({"$set": {"a": 1}, "$inc": {"a": 1}}, "conflict"),
    ({"$set": {"a": 1}, "$unset": {"a.b": 1}}, "conflict"),
    ({"$set": {"a.b": 1, "a": {}}}, "conflict"),
    ({"$rename": {"a": "b"}, "$set": {"b.c": 1}}, "conflict"),
    ({"$set": {DOC_KEY: 1}}, "'_id_'"),
    ({"$unset": {DOC_KEY: 1}}, "document's key"),
    ({"$set": {DOC_KEY + ".x": 1}}, "document's key"),
    ({"$rename": {"a": DOC_KEY}}, "document's key"),
    ({"$rename": {DOC_KEY: "a"}}, "document's key"),
    ({"$rename": {"a": 5}}, "new field name as a string"),
    ({"$rename": {"a": "a"}}, "to itself"),
    ({"$set": {"a.$x.b": 1}}, "is not a field name"),
    ({"$set": {"": 1}}, "must not be empty"),
    ({"$set": {"a..b": 1}}, "empty part"),
    ({"$pop": {"a": 2}}, "$pop of 'a' takes 1"),
    ({"$pullAll": {"a": 1}}, "list of values"),
    ({"$currentDate": {"a": "now"}}, "$currentDate of 'a' takes true"),
    ({"$currentDate": {"a": {"$type": "time"}}}, "$currentDate"),
    ({"$push": {"a": {"$each": 1}}}, "$each needs a list"),
    ({"$push": {"a": {"$slice": 1}}}, "$each is required"),
    ({"$push": {"a": {"$each": [], "$bad": 1}}}, "accepted modifiers: $each, $position, $slice, $sort"),
    ({"$push": {"a": {"$each": [], "$slice": 1.5}}}, "$slice needs a whole number"),
    ({"$push": {"a": {"$each": [], "$sort": 2}}}, "$sort directions"),
    ({"$addToSet": {"a": {"$each": [1], "$slice": 1}}}, "accepted modifier: $each"),
    ({"$pull": {"a": {"$foo": 1}}}, "unknown operator '$foo' in $pull"),
])
def test_bad_updates_are_refused(bad, words):
    with pytest.raises(BadValueError) as err:
        validate_update(bad)
    assert err.value.code == 2
    assert words in err.value.message, err.value.message
    with pytest.raises(BadValueError):
        apply_update({"a": [1]}, bad)


def test_unknown_operator_lists_all_accepted():
    with pytest.raises(BadValueError) as err:
        validate_update({"$bit": {"a": 1}})
    for op in UPDATE_OPERATORS:
        assert op in err.value.message


def test_valid_updates_pass_validation():
    validate_update({"$set": {"a": 1, "b.c": 2}, "$inc": {"n": Decimal128("1")}, "$rename": {"x": "y"},
                     "$push": {"l": {"$each": [1], "$sort": {"k": -1}, "$slice": -5, "$position": 0}},
                     "$currentDate": {"t": True}})


# -- properties ----------------------------------------------------------------------------


@settings(max_examples=100)
@given(vs.bson_documents, st.sampled_from(["a", "b", "n.m"]), vs.bson_values)
def test_set_then_read_back_then_unset(doc, path, value):
    doc.pop("n", None)
    before = copy.deepcopy(doc)
    parts = tuple(path.split("."))
    result = apply_update(doc, {"$set": {path: value}})
    assert values_equal(doc, before)
    assert values_equal(get_path(result, parts), value)
    assert get_path(apply_update(result, {"$unset": {path: 1}}), parts) is MISSING


@settings(max_examples=100)
@given(st.one_of(vs.ints, vs.floats, vs.decimals), st.one_of(vs.ints, vs.floats, vs.decimals))
def test_inc_result_type(a, b):
    try:
        r = apply_update({"n": a}, {"$inc": {"n": b}})["n"]
    except BadValueError as err:
        assert "overflows" in err.message and type(a) is int and type(b) is int
        return
    if isinstance(a, Decimal128) or isinstance(b, Decimal128):
        assert type(r) is Decimal128
    elif isinstance(a, float) or isinstance(b, float):
        assert type(r) is float
    else:
        assert type(r) is int and r == a + b
