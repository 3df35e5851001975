"""Aggregation pipelines and expressions: MongoDB's documented examples, memory limits, refusals, mongomock as an oracle."""

from __future__ import annotations

import datetime

import mongomock
import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoarddb.errors import BadValueError, LimitExceededError
from hoarddb.values.expression import compile_expression
from hoarddb.values.keys import encode_key
from hoarddb.values.order import values_equal
from hoarddb.values.pipeline import Limits, compile_pipeline, run_pipeline

UTC = datetime.timezone.utc


def run(docs, pipeline, **kw):
    return list(run_pipeline(docs, pipeline, **kw))


SALES = [  # MongoDB's $group page
    {"_id": 1, "item": "abc", "price": Decimal128("10"), "quantity": 2, "date": datetime.datetime(2014, 3, 1, 8, tzinfo=UTC)},
    {"_id": 2, "item": "jkl", "price": Decimal128("20"), "quantity": 1, "date": datetime.datetime(2014, 3, 1, 9, tzinfo=UTC)},
    {"_id": 3, "item": "xyz", "price": Decimal128("5"), "quantity": 10, "date": datetime.datetime(2014, 3, 15, 9, tzinfo=UTC)},
    {"_id": 4, "item": "xyz", "price": Decimal128("5"), "quantity": 20, "date": datetime.datetime(2014, 4, 4, 11, tzinfo=UTC)},
    {"_id": 5, "item": "abc", "price": Decimal128("10"), "quantity": 10, "date": datetime.datetime(2014, 4, 4, 21, tzinfo=UTC)},
    {"_id": 6, "item": "def", "price": Decimal128("7.5"), "quantity": 5, "date": datetime.datetime(2015, 6, 4, 5, tzinfo=UTC)},
    {"_id": 7, "item": "def", "price": Decimal128("7.5"), "quantity": 10, "date": datetime.datetime(2015, 9, 10, 8, tzinfo=UTC)},
    {"_id": 8, "item": "abc", "price": Decimal128("10"), "quantity": 5, "date": datetime.datetime(2016, 2, 6, 20, tzinfo=UTC)},
]


def test_group_examples():
    assert run(SALES, [{"$group": {"_id": None, "count": {"$count": {}}}}]) == [{"_id": None, "count": 8}]
    out = run(SALES, [{"$group": {"_id": "$item", "totalSaleAmount": {"$sum": {"$multiply": ["$price", "$quantity"]}}}},
                      {"$match": {"totalSaleAmount": {"$gte": 100}}}, {"$sort": {"_id": 1}}])
    assert out == [{"_id": "abc", "totalSaleAmount": Decimal128("170")}, {"_id": "def", "totalSaleAmount": Decimal128("112.5")},
                   {"_id": "xyz", "totalSaleAmount": Decimal128("150")}]
    out = run(SALES, [
        {"$match": {"date": {"$gte": datetime.datetime(2014, 1, 1, tzinfo=UTC),
                             "$lt": datetime.datetime(2015, 1, 1, tzinfo=UTC)}}},
        {"$group": {"_id": {"$dateToString": {"format": "%Y-%m-%d", "date": "$date"}},
                    "totalSaleAmount": {"$sum": {"$multiply": ["$price", "$quantity"]}},
                    "averageQuantity": {"$avg": "$quantity"}, "count": {"$sum": 1}}},
        {"$sort": {"totalSaleAmount": -1}}])
    assert out == [
        {"_id": "2014-04-04", "totalSaleAmount": Decimal128("200"), "averageQuantity": 15.0, "count": 2},
        {"_id": "2014-03-15", "totalSaleAmount": Decimal128("50"), "averageQuantity": 10.0, "count": 1},
        {"_id": "2014-03-01", "totalSaleAmount": Decimal128("40"), "averageQuantity": 1.5, "count": 2}]
    out = run(SALES, [{"$group": {"_id": None, "totalSaleAmount": {"$sum": {"$multiply": ["$price", "$quantity"]}},
                                  "averageQuantity": {"$avg": "$quantity"}, "count": {"$sum": 1}}}])
    assert out == [{"_id": None, "totalSaleAmount": Decimal128("452.5"), "averageQuantity": 7.875, "count": 8}]


def test_group_accumulators():
    docs = [{"k": "a", "v": 3, "s": "x"}, {"k": "a", "v": 1.5}, {"k": "b", "v": None, "s": "y"},
            {"k": "a", "v": "text", "s": "x"}, {"k": "b"}, {"v": 7}]
    out = run(docs, [{"$group": {"_id": "$k", "sum": {"$sum": "$v"}, "avg": {"$avg": "$v"}, "min": {"$min": "$v"},
                                 "max": {"$max": "$v"}, "first": {"$first": "$s"}, "last": {"$last": "$s"},
                                 "push": {"$push": "$s"}, "set": {"$addToSet": "$s"}, "n": {"$count": {}}}},
                     {"$sort": {"_id": 1}}])
    assert out == [
        {"_id": None, "sum": 7, "avg": 7.0, "min": 7, "max": 7, "first": None, "last": None, "push": [], "set": [],
         "n": 1},
        {"_id": "a", "sum": 4.5, "avg": 2.25, "min": 1.5, "max": "text", "first": "x", "last": "x",
         "push": ["x", "x"], "set": ["x"], "n": 3},
        {"_id": "b", "sum": 0, "avg": None, "min": None, "max": None, "first": "y", "last": None, "push": ["y"],
         "set": ["y"], "n": 2}]
    # numbers keep their type: int, long past int32, Int64, double, decimal
    assert run([{"v": 2**31 - 1}, {"v": 1}], [{"$group": {"_id": 0, "s": {"$sum": "$v"}}}])[0]["s"] == 2**31
    assert isinstance(run([{"v": Int64(1)}], [{"$group": {"_id": 0, "s": {"$sum": "$v"}}}])[0]["s"], Int64)
    # a compound key; 1 and 1.0 are one group
    out = run([{"a": 1, "b": "x"}, {"a": 1.0, "b": "x"}, {"a": 2, "b": "x"}],
              [{"$group": {"_id": {"a": "$a", "b": "$b"}, "n": {"$sum": 1}}}, {"$sort": {"n": -1}}])
    assert out == [{"_id": {"a": 1, "b": "x"}, "n": 2}, {"_id": {"a": 2, "b": "x"}, "n": 1}]


def test_stages_one_document_at_a_time():
    inventory = [{"_id": 1, "item": "ABC", "sizes": ["S", "M", "L"]}, {"_id": 2, "item": "EFG", "sizes": []},
                 {"_id": 3, "item": "IJK", "sizes": "M"}, {"_id": 4, "item": "LMN"}, {"_id": 5, "item": "XYZ", "sizes": None}]
    assert run(inventory, [{"$unwind": "$sizes"}]) == [
        {"_id": 1, "item": "ABC", "sizes": "S"}, {"_id": 1, "item": "ABC", "sizes": "M"},
        {"_id": 1, "item": "ABC", "sizes": "L"}, {"_id": 3, "item": "IJK", "sizes": "M"}]
    out = run(inventory, [{"$unwind": {"path": "$sizes", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": True}}])
    assert out == [
        {"_id": 1, "item": "ABC", "sizes": "S", "i": 0}, {"_id": 1, "item": "ABC", "sizes": "M", "i": 1},
        {"_id": 1, "item": "ABC", "sizes": "L", "i": 2}, {"_id": 2, "item": "EFG", "i": None},
        {"_id": 3, "item": "IJK", "sizes": "M", "i": None}, {"_id": 4, "item": "LMN", "i": None},
        {"_id": 5, "item": "XYZ", "sizes": None, "i": None}]
    assert run(inventory, [{"$match": {"item": {"$gt": "E"}}}, {"$skip": 1}, {"$limit": 2}, {"$count": "n"}]) == \
        [{"n": 2}]
    assert run(inventory, [{"$match": {"item": "none"}}, {"$count": "n"}]) == []
    assert run(inventory, [{"$unwind": "$sizes"}, {"$sortByCount": "$sizes"}]) == [
        {"_id": "M", "count": 2}, {"_id": "S", "count": 1}, {"_id": "L", "count": 1}]
    assert run(inventory[:1], [{"$set": {"n": {"$size": "$sizes"}, "meta.by": "x"}}, {"$unset": ["sizes", "_id"]}]) == \
        [{"item": "ABC", "n": 3, "meta": {"by": "x"}}]
    assert run([{"a": {"b": 1, "c": 2}}], [{"$addFields": {"a": {"d": 3}}}]) == [{"a": {"b": 1, "c": 2, "d": 3}}]
    assert run([{"a": [{"b": 1}, {"b": 2}]}], [{"$addFields": {"a.c": 0}}]) == [{"a": [{"b": 1, "c": 0}, {"b": 2, "c": 0}]}]
    assert run([{"a": 1, "b": 2}], [{"$project": {"_id_": 0, "a": 1, "twice": {"$multiply": ["$b", 2]}}}]) == \
        [{"a": 1, "twice": 4}]


def test_the_ten_newest_and_expenses_per_category():
    tickets = [{"_id_": i, "Date": datetime.datetime(2024, 1, 1 + i % 28, tzinfo=UTC), "n": i} for i in range(50)]
    newest = run(tickets, [{"$sort": {"Date": -1, "_id_": 1}}, {"$limit": 10}])
    assert newest == sorted(tickets, key=lambda t: (-t["Date"].timestamp(), t["_id_"]))[:10]
    expenses = [{"Category": c, "Amount": a, "Date": datetime.datetime(2024, m, 3, tzinfo=UTC)}
                for c, a, m in [("repairs", 100, 5), ("repairs", 50, 5), ("tax", 300, 5), ("tax", 1, 4)]]
    out = run(expenses, [{"$match": {"$expr": {"$eq": [{"$month": "$Date"}, 5]}}},
                         {"$group": {"_id": "$Category", "total": {"$sum": "$Amount"}}}, {"$sort": {"total": -1}}])
    assert out == [{"_id": "tax", "total": 300}, {"_id": "repairs", "total": 150}]


def test_sort_then_limit_keeps_only_the_first_in_memory():
    docs = ({"_id": i, "v": (i * 7919) % 1000, "pad": "x" * 100} for i in range(5000))
    small = Limits(max_bytes=10_000)
    out = run(docs, [{"$sort": {"v": 1, "_id": 1}}, {"$limit": 5}], limits=small)
    assert [d["v"] for d in out] == [0, 0, 0, 0, 0]
    with pytest.raises(LimitExceededError, match=r"\$sort holds more than its memory limit of 10000 bytes; it refuses "
                                                 r"rather than spill to disk"):
        run(({"v": i, "pad": "x" * 100} for i in range(1000)), [{"$sort": {"v": 1}}], limits=small)
    with pytest.raises(LimitExceededError, match=r"\$group holds more than its limit of 10 groups"):
        run(({"v": i} for i in range(100)), [{"$group": {"_id": "$v"}}], limits=Limits(max_documents=10))
    with pytest.raises(LimitExceededError, match=r"\$group holds more than its memory limit of 1000 bytes"):
        run(({"v": i, "s": "x" * 50} for i in range(100)), [{"$group": {"_id": None, "all": {"$push": "$s"}}}],
            limits=Limits(max_bytes=1000))


@pytest.mark.parametrize("pipeline, says", [
    ({"$match": {}}, "a list of stages"),
    ([{"$match": {}, "$limit": 1}], "exactly one field"),
    ([{"$out": "x"}], "unknown pipeline stage '\\$out'"),
    ([{"$group": {"total": {"$sum": 1}}}], "needs an _id"),
    ([{"$group": {"_id": None, "t": {"$median": 1}}}], "unknown accumulator"),
    ([{"$group": {"_id": None, "t": 1}}], "must be an accumulator"),
    ([{"$limit": 0}], "whole number >= 1"),
    ([{"$skip": -1}], "whole number >= 0"),
    ([{"$skip": 1.5}], "whole number >= 0"),
    ([{"$count": "$n"}], "name of the field"),
    ([{"$unwind": "sizes"}], "beginning with '\\$'"),
    ([{"$project": {"a": 1, "b": 0}}], "mixes inclusion and exclusion"),
    ([{"$sort": {"a": 0}}], "must be 1"),
    ([{"$lookup": {"from": "x", "localField": "a", "foreignField": "b", "as": "c"}}], "not available here"),
    ([{"$addFields": {"a": {"$nope": 1}}}], "unknown expression operator"),
])
def test_pipeline_refusals(pipeline, says):
    with pytest.raises(BadValueError, match=says):
        compile_pipeline(pipeline)


def test_lookup_joins_another_bucket():
    orders = [{"_id": 1, "item": "almonds", "price": 12}, {"_id": 2, "item": "pecans", "price": 20}, {"_id": 3}]
    inventory = [{"_id": 1, "sku": "almonds", "instock": 120}, {"_id": 2, "sku": "bread", "instock": 80},
                 {"_id": 5, "sku": None}, {"_id": 6}]
    out = run(orders, [{"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku",
                                    "as": "inventory_docs"}}], lookup=lambda name: iter(inventory))
    assert [[d["_id"] for d in o["inventory_docs"]] for o in out] == [[1], [], [5, 6]]


# -- expressions ---------------------------------------------------------------------------

D = {"a": 7, "b": 2, "f": 2.5, "s": "Hello", "l": [1, 2, 3], "d": datetime.datetime(2024, 3, 5, 14, 7, 9, 123000, tzinfo=UTC),
     "n": None, "o": {"x": [{"y": 1}, {"y": 2}]}}


@pytest.mark.parametrize("expr, value", [
    ({"$add": ["$a", "$b", 1]}, 10), ({"$add": ["$a", "$f"]}, 9.5), ({"$add": ["$a", "$n"]}, None),
    ({"$add": ["$d", 1000]}, datetime.datetime(2024, 3, 5, 14, 7, 10, 123000, tzinfo=UTC)),
    ({"$subtract": ["$a", "$b"]}, 5), ({"$subtract": ["$d", "$d"]}, Int64(0)), ({"$multiply": ["$a", "$b"]}, 14),
    ({"$divide": ["$a", "$b"]}, 3.5), ({"$mod": ["$a", "$b"]}, 1), ({"$mod": [-7, 2]}, -1), ({"$abs": -3}, 3),
    ({"$ceil": "$f"}, 3.0), ({"$floor": "$f"}, 2.0), ({"$round": [2.5]}, 2.0), ({"$round": [3.5]}, 4.0),
    ({"$round": [1234.5678, 2]}, 1234.57), ({"$round": [1234.5678, -2]}, 1200.0), ({"$trunc": [7.89, 1]}, 7.8),
    ({"$pow": [2, 10]}, 1024), ({"$sqrt": 16}, 4.0),
    ({"$concat": ["$s", " ", "world"]}, "Hello world"), ({"$concat": ["$s", "$n"]}, None),
    ({"$toUpper": "$s"}, "HELLO"), ({"$toLower": "$n"}, ""), ({"$substrCP": ["$s", 1, 3]}, "ell"),
    ({"$strLenCP": "héllo"}, 5), ({"$strLenBytes": "héllo"}, 6), ({"$split": ["a,b,,c", ","]}, ["a", "b", "", "c"]),
    ({"$trim": {"input": "  x  "}}, "x"), ({"$indexOfCP": ["$s", "l"]}, 2), ({"$strcasecmp": ["a", "A"]}, 0),
    ({"$eq": ["$a", 7.0]}, True), ({"$gt": ["$s", "$a"]}, True), ({"$lt": ["$missing", None]}, True),
    ({"$cmp": ["$a", "$b"]}, 1), ({"$and": ["$a", 0]}, False), ({"$or": ["$n", "$a"]}, True), ({"$not": ["$n"]}, True),
    ({"$cond": [{"$gte": ["$a", 5]}, "big", "small"]}, "big"),
    ({"$cond": {"if": "$n", "then": 1, "else": 2}}, 2), ({"$ifNull": ["$missing", "$n", "dflt"]}, "dflt"),
    ({"$switch": {"branches": [{"case": {"$eq": ["$a", 1]}, "then": "one"}], "default": "other"}}, "other"),
    ({"$size": "$l"}, 3), ({"$arrayElemAt": ["$l", -1]}, 3), ({"$in": [2, "$l"]}, True),
    ({"$concatArrays": ["$l", [4]]}, [1, 2, 3, 4]), ({"$isArray": "$l"}, True), ({"$first": "$l"}, 1),
    ({"$map": {"input": "$l", "as": "v", "in": {"$multiply": ["$$v", 10]}}}, [10, 20, 30]),
    ({"$filter": {"input": "$l", "cond": {"$gt": ["$$this", 1]}}}, [2, 3]),
    ({"$let": {"vars": {"t": {"$add": ["$a", 1]}}, "in": {"$multiply": ["$$t", 2]}}}, 16),
    ("$o.x.y", [1, 2]), ({"$literal": "$a"}, "$a"), ({"$type": "$a"}, "int"), ({"$type": "$missing"}, "missing"),
    ({"$toString": "$a"}, "7"), ({"$toInt": "42"}, 42), ({"$toDouble": "$a"}, 7.0), ({"$toBool": 0}, False),
    ({"$year": "$d"}, 2024), ({"$month": "$d"}, 3), ({"$dayOfMonth": "$d"}, 5), ({"$hour": "$d"}, 14),
    ({"$minute": "$d"}, 7), ({"$second": "$d"}, 9), ({"$millisecond": "$d"}, 123), ({"$dayOfWeek": "$d"}, 3),
    ({"$dayOfYear": "$d"}, 65), ({"$isoWeek": "$d"}, 10), ({"$isoDayOfWeek": "$d"}, 2),
    ({"$hour": {"date": "$d", "timezone": "Europe/Oslo"}}, 15), ({"$hour": {"date": "$d", "timezone": "-05:30"}}, 8),
    ({"$dateToString": {"date": "$d"}}, "2024-03-05T14:07:09.123Z"),
    ({"$dateToString": {"date": "$d", "format": "%d/%m/%Y %H:%M %j %%"}}, "05/03/2024 14:07 065 %"),
    ({"$dateToString": {"date": "$missing", "onNull": "none"}}, "none"),
    ({"$year": "$n"}, None),
])
def test_expressions(expr, value):
    got = compile_expression(expr)(D)
    assert values_equal(got, value) and type(got) is type(value) or (got == value and type(got) is type(value)), got


@pytest.mark.parametrize("expr, says", [
    ({"$add": ["$s", 1]}, "takes numbers or a date"), ({"$divide": [1, 0]}, "divide by zero"),
    ({"$mod": [1, 0]}, "division by zero"), ({"$concat": ["$s", 1]}, "takes strings"),
    ({"$size": "$a"}, "takes an array"), ({"$sqrt": -1}, "outside"), ({"$year": "$s"}, "takes a date"),
    ({"$switch": {"branches": [{"case": False, "then": 1}]}}, "no branch matched"),
    ({"$hour": {"date": "$d", "timezone": "Mars/Base"}}, "unrecognized time zone"),
    ({"$toInt": "x"}, "cannot convert"),
])
def test_expression_errors_at_evaluation(expr, says):
    evaluate = compile_expression(expr)
    with pytest.raises(BadValueError, match=says):
        evaluate(D)


@pytest.mark.parametrize("expr, says", [
    ({"$nope": 1}, "unknown expression operator"), ({"$add": 1, "$sub": 2}, "exactly one operator"),
    ({"$subtract": [1]}, "takes 2 argument"), ("$$undefinedVar", "undefined variable"), ("$a..b", "not a field path"),
    ({"$dateToString": {"date": "$d", "format": "%Q"}}, "invalid format character"),
    ({"$cond": {"if": 1, "then": 2}}, "needs 'else'"), ({"a.b": 1}, "may not be empty, begin with '\\$' or hold"),
])
def test_expression_refusals_up_front(expr, says):
    with pytest.raises(BadValueError, match=says):
        compile_expression(expr)


# -- mongomock as an oracle ----------------------------------------------------------------

_num = st.one_of(st.integers(-20, 20), st.floats(-20, 20, allow_nan=False).map(lambda f: round(f, 2)))
_val = st.one_of(_num, st.sampled_from(["a", "b", "c"]), st.none())
_agg_docs = st.lists(st.fixed_dictionaries({"k": st.sampled_from(["x", "y", "z"]), "n": _num},
                                           optional={"v": _val, "t": st.lists(st.sampled_from(["p", "q"]), max_size=3)}),
                     min_size=1, max_size=12)
_acc = st.sampled_from(["$sum", "$min", "$max", "$push", "$first", "$last", "$avg"])
_stage = st.one_of(
    st.builds(lambda op, f: {"$match": {f: {op: 0}}}, st.sampled_from(["$gt", "$lte", "$ne"]), st.sampled_from(["n", "v"])),
    st.builds(lambda n: {"$skip": n}, st.integers(0, 3)),
    st.builds(lambda n: {"$limit": n}, st.integers(1, 5)),
    st.builds(lambda d: {"$sort": {"n": d, "_id": 1}}, st.sampled_from([1, -1])),
    st.just({"$unwind": "$t"}),
    st.builds(lambda f: {"$project": {f: 1, "n": 1, "k": 1}}, st.sampled_from(["v", "t"])),
    st.builds(lambda e: {"$addFields": {"m": e}}, st.sampled_from([
        {"$add": ["$n", 1]}, {"$multiply": ["$n", 2]}, {"$cond": [{"$gt": ["$n", 0]}, "pos", "neg"]},
        {"$ifNull": ["$v", "none"]}, {"$concat": ["$k", "-"]}, {"$abs": "$n"}])),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_agg_docs, st.lists(_stage, max_size=4), st.one_of(st.none(), st.tuples(_acc, st.sampled_from(["$n", "$k"]))))
def test_pipelines_agree_with_mongomock(docs, stages, group):
    docs = [dict(d, _id=i) for i, d in enumerate(docs)]
    pipeline = list(stages)
    if group is not None:
        acc, field = group
        if acc == "$avg" and field == "$k":
            field = "$n"
        pipeline += [{"$group": {"_id": "$k", "out": {acc: field}, "c": {"$sum": 1}}}, {"$sort": {"_id": 1}}]
    coll = mongomock.MongoClient().db.c
    coll.insert_many([dict(d) for d in docs])
    expected = list(coll.aggregate(pipeline))
    got = run(docs, pipeline)
    key = (lambda d: encode_key(d.get("_id"))) if group is not None else None
    if key is not None:
        expected.sort(key=key)
        got.sort(key=key)
    assert len(got) == len(expected), (pipeline, got, expected)
    for g, e in zip(got, expected):
        assert values_equal(_sorted(g), _sorted(e)), (pipeline, g, e)


def _sorted(value):
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    if isinstance(value, float) and value == int(value) and abs(value) < 2**53:
        return value  # 2.0 == 2 as values anyway
    return value
