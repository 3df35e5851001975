"""Store fields' bytes on disk: every type's elements, count records and blob owners under the keys and values
drawn in hoarddb/stores/fields.py, so a data directory written before stays readable as it is.

Regression test for the move of store fields onto their types' own verbs over a keyspace: the
keys and values are built here by hand from the drawing, not by the code under test.
"""

from __future__ import annotations

import datetime
import hashlib
import struct

import bson
import pytest
from bson.codec_options import CodecOptions

import hoarddb
from hoarddb.storage.kv import read_only
from hoarddb.values.keys import encode_key

FIELDS = [{"name": n, "type": t} for n, t in [
    ("Expenses", "lifo"), ("ExpenseByID", "hash"), ("ExpenseDates", "btree"), ("Tickets", "heap"),
    ("Comments", "fifo"), ("Documents", "blob")]]
LIFO, HASH, BTREE, HEAP, FIFO, BLOB = range(6)
RAW = CodecOptions(tz_aware=True)


def _bson(doc: dict) -> bytes:
    return bson.encode(doc)


def _count(n: int, seq: int) -> bytes:
    return struct.pack(">QQ", n, seq)


def _heap_key(priority) -> bytes:
    return bytes(255 - b for b in encode_key(priority))


def _seq(n: int) -> bytes:
    return n.to_bytes(8, "big")


@pytest.fixture
def written(tmp_path):
    """A data directory whose document "p1" holds elements of every store-field type, and what was written."""
    path = tmp_path / "data"
    with hoarddb.open(path) as client:
        prop = client["app"].create_bucket("Property", type="hash", store_fields=FIELDS)
        prop.insert({"_id_": "p1", "Name": "One"})
        p1 = prop["p1"]
        p1.Expenses.batch_push([{"n": 1}, {"n": 2}, {"n": 3}])
        p1.Expenses.pop()  # the newest goes; the sequence stays at 3
        p1.Comments.push({"c": "a"})
        p1.Comments.push({"c": "b"})
        p1.Comments.pop()  # the oldest goes
        p1.Tickets.batch_push([{"priority": 1, "t": "low"}, {"priority": 9, "t": "high"}, {"priority": 9, "t": "tie"}])
        p1.ExpenseByID.put("e2", {"Amount": 2})
        p1.ExpenseByID.put("e1", {"Amount": 1})
        p1.ExpenseByID.put("e1", {"Amount": 11})  # replaced: counted once
        p1.ExpenseDates.put(datetime.datetime(2026, 3, 14, tzinfo=datetime.timezone.utc), {"Amount": 5})
        kept = p1.Documents.put(b"lease bytes", {"name": "lease.pdf", "type": "application/pdf"})
        gone = p1.Documents.put(b"old bytes")
        p1.Documents.delete(gone)
        meta = p1.Documents.info(kept)
    with read_only(path / "app" / "Property" / "kv") as txn:
        raw = {bytes(k): bytes(v) for k, v in txn.cursor() if bytes(k)[:1] in b"FCB"}
    return path, raw, kept, gone, meta


def test_every_field_types_keys_and_values_are_as_drawn(written):
    path, raw, kept, gone, meta = written
    dk = encode_key("p1")

    def f(fno: int, ek: bytes) -> bytes:
        return b"F" + dk + bytes([fno]) + ek

    blob_meta = {"_id_": kept, "name": "lease.pdf", "type": "application/pdf", "size": 11,
                 "sha256": hashlib.sha256(b"lease bytes").hexdigest(), "created": meta["created"]}
    expected = {
        f(LIFO, _seq(1)): _bson({"n": 1}), f(LIFO, _seq(2)): _bson({"n": 2}),
        f(FIFO, _seq(2)): _bson({"c": "b"}),
        f(HEAP, _heap_key(1) + _seq(1)): _bson({"priority": 1, "t": "low"}),
        f(HEAP, _heap_key(9) + _seq(2)): _bson({"priority": 9, "t": "high"}),
        f(HEAP, _heap_key(9) + _seq(3)): _bson({"priority": 9, "t": "tie"}),
        f(HASH, encode_key("e1")): _bson({"Amount": 11}), f(HASH, encode_key("e2")): _bson({"Amount": 2}),
        f(BTREE, encode_key(datetime.datetime(2026, 3, 14, tzinfo=datetime.timezone.utc))): _bson({"Amount": 5}),
        f(BLOB, encode_key(kept)): _bson(blob_meta),
        b"C" + dk + bytes([LIFO]): _count(2, 3),
        b"C" + dk + bytes([FIFO]): _count(1, 2),
        b"C" + dk + bytes([HEAP]): _count(3, 3),
        b"C" + dk + bytes([HASH]): _count(2, 0),
        b"C" + dk + bytes([BTREE]): _count(1, 0),
        b"C" + dk + bytes([BLOB]): _count(1, 0),
        b"B" + kept.encode(): dk + bytes([BLOB]),
    }
    assert raw == expected
    # A blob field's created is a UTC date to the second (a blob bucket's: to the millisecond).
    assert meta["created"].microsecond == 0
    files = path / "app" / "Property" / "fields"
    assert sorted(p.name for p in files.iterdir()) == [kept]
    assert (files / kept).read_bytes() == b"lease bytes"


def test_a_directory_written_as_drawn_reads_back(written):
    path, _raw, kept, _gone, _meta = written
    with hoarddb.open(path) as client:
        p1 = client["app"]["Property"]["p1"]
        assert p1.Expenses.pop({"limit": 5}) == [{"n": 2}, {"n": 1}]
        assert p1.Comments.list() == [{"c": "b"}]
        assert [d["t"] for d in p1.Tickets.peek({"limit": 3})] == ["high", "tie", "low"]
        assert p1.ExpenseByID.list() == [{"key": "e1", "doc": {"Amount": 11}}, {"key": "e2", "doc": {"Amount": 2}}]
        assert p1.Documents.get(kept)["data"] == b"lease bytes"
        assert [p1.Expenses.length(), p1.Tickets.length(), p1.Documents.length()] == [0, 3, 1]
