"""Write the partitions hoarddb/routing.py gives keys and requests, as JSON, for the Go client's router_test.go
(python testdata/partitions.py > testdata/partitions.json; router_test.go also runs it and compares).

Every key and request goes through BSON first, as it reaches a node (hoarddb/values/codec.py), so the
vectors are of what a node hashes: each entry holds the BSON (hex) of ``{k: key}`` or of the request,
the key's encoding (hoarddb/values/keys.py) and its partition for several partition counts."""

import datetime
import json
import uuid

from bson import SON
from bson.binary import Binary
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

from hoarddb.routing import partition_of, request_partition
from hoarddb.values.codec import decode, encode
from hoarddb.values.keys import encode_key

COUNTS = (2, 7, 16, 64, 1000)

KEYS = [
    ("string", "jane"), ("empty string", ""), ("string with NUL", "a\x00b"), ("unicode", "Zoë 🐘 東京"),
    ("uuid7 text", "0192a3b4-c5d6-7890-abcd-ef12345678a1"),
    ("int32 30", 30), ("int64 30", Int64(30)), ("double 30", 30.0), ("decimal 30", Decimal128("30")),
    ("int32 -7", -7), ("int32 0", 0), ("double -0", -0.0), ("int32 max", 2**31 - 1), ("int32 min", -(2**31)),
    ("int64 2^53", Int64(2**53)), ("int64 2^53+1", Int64(2**53 + 1)), ("int64 -(2^53+1)", Int64(-(2**53 + 1))),
    ("int64 max", Int64(2**63 - 1)), ("int64 min", Int64(-(2**63))), ("int64 123456789012345678", Int64(123456789012345678)),
    ("int64 -98765432109876543", Int64(-98765432109876543)),
    ("double 1.5", 1.5), ("double 0.1", 0.1), ("double -2.25e-300", -2.25e-300), ("double 1e308", 1e308),
    ("double inf", float("inf")), ("double -inf", float("-inf")), ("double nan", float("nan")),
    ("decimal 19.99", Decimal128("19.99")), ("decimal -19.99", Decimal128("-19.99")), ("decimal 0.1", Decimal128("0.1")),
    ("decimal 1.5", Decimal128("1.5")), ("decimal 1E+6000", Decimal128("1E+6000")), ("decimal -1E-6000", Decimal128("-1E-6000")),
    ("decimal 30.000", Decimal128("30.000")), ("decimal 3E+1", Decimal128("3E+1")), ("decimal -0", Decimal128("-0")),
    ("decimal NaN", Decimal128("NaN")), ("decimal Infinity", Decimal128("Infinity")), ("decimal -Infinity", Decimal128("-Infinity")),
    ("decimal 9999999999999999999999999999999999", Decimal128("9999999999999999999999999999999999")),
    ("decimal 0.000000000000000000001234567", Decimal128("0.000000000000000000001234567")),
    ("objectid", ObjectId("65a1b2c3d4e5f60718293a4b")),
    ("binary", b"\x00\x01\xfe\xff"), ("binary empty", b""), ("binary subtype 5", Binary(b"md5-ish", 5)),
    ("binary subtype 0x80", Binary(b"\x10\x20", 0x80)), ("uuid", uuid.UUID("0192a3b4-c5d6-7890-abcd-ef12345678a1")),
    ("bool true", True), ("bool false", False), ("null", None),
    ("date", datetime.datetime(2024, 5, 17, 12, 30, 45, 123000, tzinfo=datetime.timezone.utc)),
    ("date before 1970", datetime.datetime(1901, 1, 1, tzinfo=datetime.timezone.utc)),
    ("timestamp", Timestamp(1700000000, 7)), ("regex", Regex("^ab.c$", "xmi")), ("code", Code("return 1")),
    ("code with scope", Code("return x", {"x": 1})), ("minkey", MinKey()), ("maxkey", MaxKey()),
    ("doc", SON([("a", 1), ("b", "two")])), ("doc one field", SON([("a", 1)])), ("doc nested", SON([("x", SON([("y", [1, 2.5, "z"])])), ("n", None)])),
    ("doc empty", {}), ("dbref", DBRef("Users", ObjectId("65a1b2c3d4e5f60718293a4b"))),
    ("array", [1, "a", [True, None]]), ("array empty", []),
]

PLACES = {
    "hash": {"type": "hash", "partitions": 16},
    "btree": {"type": "btree", "partitions": 16, "key": "Score"},
    "btree_by_id": {"type": "btree", "partitions": 16},
    "blob": {"type": "blob", "partitions": 16},
    "queue": {"type": "fifo", "partitions": 16, "group": "g"},
    "whole": {"type": "hash", "partitions": 1},
}


def req(op, args=None, **head):
    doc = SON([("op", op), ("db", "app"), ("bucket", "B")])
    doc.update(head)
    if args is not None:
        doc["args"] = args
    return doc


REQUESTS = {
    "hash": [req("get", {"key": "a"}), req("get", {"key": 30}), req("get", {"key": Int64(30)}),
             req("exists", {"key": 30.0}), req("get", {"key": ObjectId("65a1b2c3d4e5f60718293a4b")}),
             req("get", {"key": None}), req("get", {"key": [1]}), req("get", {"key": {"_id_": "a"}}),
             req("get", {"key": {"x": 1}}), req("insert", {"doc": {"_id_": "b", "x": 1}}),
             req("insert", {"doc": {"_id_": {"a": 1}}}), req("put", {"doc": {"_id_": 7.0}}),
             req("put", {"doc": {"x": 7}}), req("update", {"filter": {"_id_": "c"}, "update": {"$set": {"x": 1}}}),
             req("update", {"filter": {"_id_": "c", "x": 2}, "update": {"$set": {"x": 1}}}),
             req("update", {"filter": "c", "update": {"$set": {"x": 1}}}),
             req("delete", {"target": {"_id_": "d"}}), req("delete", {"target": "d"}),
             req("find_and_modify", {"filter": {"_id_": "e"}}), req("count", {"filter": {"_id_": "f"}}),
             req("update", {"filter": {"x": 1}, "update": {"$set": {"x": 2}}}),
             req("delete", {"target": {"_id_": {"$in": ["a", "b"]}}}), req("find", {"filter": {"_id_": "a"}}),
             req("list", {}), req("batch_insert", {"docs": [{"_id_": 1}]}), req("get"), req("get", {}),
             req("push", {"doc": {"a": 1}}, key="doc-1", field="Notes"), req("get", {"key": "x"}, key=42, field="F"),
             req("length", None, key="doc-2", field="Notes"), req("nosuchop", {"key": "a"})],
    "btree": [req("get", {"key": 92}), req("get", {"key": {"Score": 93}}), req("get", {"key": {"Score": 93, "x": 1}}),
              req("get", {"key": {"Score": {"$gt": 1}}}), req("get", {"key": {"Score": {"a": 1}}}),
              req("insert", {"doc": {"Score": 5, "N": 1}}), req("insert", {"doc": {"N": 1}}),
              req("insert", {"doc": {"Score": [1, 2]}}), req("delete", {"target": 94}),
              req("exists", {"key": {"Score": 95}}), req("get", {"key": [1]}), req("range", {"bounds": {}}),
              req("get", {"key": "x"}, key={"Score": 3}, field="F")],
    "btree_by_id": [req("insert", {"doc": {"_id_": "x", "S": 1}}), req("insert", {"doc": {"S": 2, "T": 3}}),
                    req("insert", {"doc": {}}), req("get", {"key": "x"})],
    "blob": [req("get", {"key": "0192A3B4-C5D6-7890-ABCD-EF12345678A1"}),
             req("info", {"key": {"_id_": "0192a3b4-c5d6-7890-abcd-ef12345678a2"}}),
             req("delete", {"target": "0192a3b4-c5d6-7890-abcd-ef12345678a3"}),
             req("get", {"key": uuid.UUID("0192a3b4-c5d6-7890-abcd-ef12345678a4")}), req("get", {"key": 5}),
             req("info", {"key": {"x": 1}}), req("put", {"doc": b"bytes"}), req("stream", {"key": "ABC"})],
    "queue": [req("push", {"doc": {"g": "tenant-1", "n": 1}}), req("push", {"doc": {"n": 2}}),
              req("push", {"doc": {"g": 30}}), req("push", {"doc": {"g": None}}), req("push", {"doc": "x"}),
              req("pop", {}), req("peek", {}), req("batch_push", {"docs": [{"g": "a"}]})],
    "whole": [req("get", {"key": "a"}), req("list", {})],
}


def vectors() -> dict:
    keys = []
    for name, key in KEYS:
        data = encode({"k": key})
        seen = decode(data)["k"]  # the key as a node decodes it
        keys.append({"name": name, "bson": data.hex(), "key": encode_key(seen).hex(),
                     "partitions": {str(n): partition_of(seen, n) for n in COUNTS}})
    requests = []
    for kind, reqs in REQUESTS.items():
        for doc in reqs:
            data = encode(doc)
            requests.append({"place": kind, "bson": data.hex(),
                             "partition": request_partition(PLACES[kind], decode(data))})
    return {"places": PLACES, "keys": keys, "requests": requests}


if __name__ == "__main__":
    print(json.dumps(vectors(), indent=1, sort_keys=True))
