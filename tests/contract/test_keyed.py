"""The contract of hash and btree stores, as buckets and as store fields: put/get/delete, key order, pages.

Keys compare as values (hoarddb/values/order.py): ``30``, ``30.0`` and ``Int64(30)`` are one
key, and a list reads in MongoDB's order of values (numbers, then strings, then ObjectIds,
booleans, dates...). Where a bucket and a field differ by design the test says which is which.
"""

from __future__ import annotations

import datetime
import functools

import pytest
from bson import Decimal128, Int64, ObjectId

from hoarddb.values.order import compare

from .places import refused

KEYED = ("hash", "btree")

#: Keys of every kind a keyed store takes, in no order.
MIXED_KEYS = [
    "b", 10, -3, 2.5, "a", ObjectId("65f0a1b2c3d4e5f601234567"), "ä", True, -0.5, Int64(7), "A", 1e20,
    datetime.datetime(2026, 3, 14, tzinfo=datetime.UTC), "", False, Decimal128("2.75"), "10",
    ObjectId("65f0a1b2c3d4e5f601234566"), datetime.datetime(1969, 12, 31, tzinfo=datetime.UTC), 0,
]


def in_value_order(keys: list) -> list:
    return sorted(keys, key=functools.cmp_to_key(compare))


def same_keys(got: list, want: list) -> bool:
    """Equal as values, in order (a number may come back as another type of the same value)."""
    return len(got) == len(want) and all(compare(a, b) == 0 for a, b in zip(got, want))


# -- put, get, delete ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KEYED)
def test_put_get_and_delete_by_key(place, kind):
    s = place.make(kind)
    assert s.put_key("jane", {"Name": "Jane", "Age": 41}) == "jane"
    s.put_key("bob", {"Name": "Bob"})
    assert s.get("jane") == s.stored("jane", {"Name": "Jane", "Age": 41})
    assert s.get("nobody") is None
    assert s.length() == 2
    assert s.remove("jane") == {"deleted": 1}
    assert s.get("jane") is None
    assert s.remove("jane") == {"deleted": 0}  # a key that is not there: nothing deleted, no error
    assert s.length() == 1 and [s.key_of(e) for e in s.list()] == ["bob"]


@pytest.mark.parametrize("kind", KEYED)
def test_a_document_comes_back_as_it_was_put(place, kind):
    doc = {"when": datetime.datetime(2026, 3, 14, 9, 30, tzinfo=datetime.UTC), "n": None,
           "oid": ObjectId("65f0a1b2c3d4e5f601234567"), "dec": Decimal128("1.10"), "big": Int64(2 ** 40),
           "bin": b"\x00\xff", "nested": {"list": [1, 2.5, "x", [True, False]]}, "text": "née ✓", "neg": -0.0}
    s = place.make(kind)
    s.put_key("k", doc)
    got = s.get("k")
    assert got == s.stored("k", doc) and list(got) == list(s.stored("k", doc))
    assert s.list() == [s.listed("k", doc)]


@pytest.mark.parametrize("kind", KEYED)
def test_numbers_equal_in_value_are_one_key(place, kind):
    s = place.make(kind)
    s.put_key(30, {"v": 1})
    for same in (30.0, Int64(30), Decimal128("30")):
        assert s.get(same) == s.stored(30, {"v": 1})
    assert s.get(30.5) is None and s.get("30") is None
    assert s.remove(30.0) == {"deleted": 1} and s.length() == 0


# -- what a second put under a key does: by design, not the same everywhere ----------------------

@pytest.mark.parametrize("kind", KEYED)
def test_a_second_write_under_a_key(place, kind):
    s = place.make(kind)
    s.put_key("k", {"v": 1, "old": True})
    s.put_key("k", {"v": 2})
    if kind == "btree" and not s.is_field:
        # a btree bucket's entries with equal keys coexist, in insertion order (a leaderboard's ties);
        # get answers the first, delete removes every one
        assert s.length() == 2
        assert s.get("k") == {"_id_": "k", "v": 1, "old": True}
        assert [e["v"] for e in s.list()] == [1, 2]
        assert s.remove("k") == {"deleted": 2}
        assert s.length() == 0
    else:
        # a hash bucket's put, and a hash or btree field's put(key, doc), replace the whole document
        assert s.length() == 1
        assert s.get("k") == s.stored("k", {"v": 2})
        assert s.list() == [s.listed("k", {"v": 2})]
        assert s.remove("k") == {"deleted": 1}


def test_a_hash_bucket_insert_never_overwrites(place):
    s = place.make("hash")
    if s.is_field:  # a field has put(key, doc) and no insert: refused with advice, nothing written
        s.put("k", {"v": 1})
        refused("VERB_NOT_SUPPORTED", lambda: s.insert({"_id_": "k", "v": 2}), "put(key, doc)")
        assert s.get("k") == {"v": 1}
        return
    assert s.insert({"_id_": "k", "v": 1}) == "k"
    refused("DUPLICATE_KEY", lambda: s.insert({"_id_": "k", "v": 2}), '"k"', "put")
    assert s.get("k") == {"_id_": "k", "v": 1} and s.length() == 1


@pytest.mark.parametrize("kind", KEYED)
def test_a_key_that_is_no_scalar(place, kind):
    s = place.make(kind)
    s.put_key("x", {"v": 0})
    if kind == "btree" and not s.is_field:
        # a btree bucket sorts by any value, null, documents and arrays included, in their order of kinds
        for key in (None, {"a": 1}, [1, 2]):
            s.put_key(key, {"v": 1})
        assert [s.key_of(e) for e in s.list()] == [None, "x", {"a": 1}, [1, 2]]
        assert s.length() == 4
        return
    for key in (None, {"a": 1}, [1, 2]):
        refused("BAD_VALUE", functools.partial(s.put_key, key, {"v": 1}), "key")
    assert s.length() == 1 and [s.key_of(e) for e in s.list()] == ["x"]


def test_a_hash_key_given_as_a_document(place):
    s = place.make("hash")
    s.put_key("k", {"v": 1})
    if s.is_field:  # a field's key is the key itself
        refused("BAD_VALUE", lambda: s.get({"_id_": "k"}), "key")
    else:  # a bucket's get takes {_id_: key} too, as its delete takes a filter
        assert s.get({"_id_": "k"}) == {"_id_": "k", "v": 1}
        assert s.delete({"_id_": "k"}) == {"deleted": 1}


# -- list: key order, pages ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", KEYED)
def test_list_reads_in_the_order_of_values(place, kind):
    s = place.make(kind)
    for n, key in enumerate(MIXED_KEYS):
        s.put_key(key, {"n": n})
    want = in_value_order(MIXED_KEYS)
    listed = s.list()
    assert same_keys([s.key_of(e) for e in listed], want)
    by_key = {n: key for n, key in enumerate(MIXED_KEYS)}
    for entry in listed:  # each key with its own document
        doc = entry["doc"] if s.is_field else entry
        assert compare(by_key[doc["n"]], s.key_of(entry)) == 0
    assert s.length() == len(MIXED_KEYS)


@pytest.mark.parametrize("kind", KEYED)
def test_list_pages_after_a_key(place, kind):
    s = place.make(kind)
    for k in range(0, 40, 2):  # 0, 2, ... 38
        s.put_key(k, {"k": k})
    def keys(entries):
        return [s.key_of(e) for e in entries]

    assert keys(s.list(limit=3)) == [0, 2, 4]
    assert keys(s.list(after=4, limit=3)) == [6, 8, 10] == keys(s.list({"after": 4, "limit": 3}))
    assert keys(s.list(after=5, limit=2)) == [6, 8]  # a key that is not there: the ones after it
    assert keys(s.list(after=-1, limit=1)) == [0]
    assert keys(s.list(after=38)) == [] and keys(s.list(after="a")) == []  # strings sort after numbers
    pages, after = [], None
    while True:
        page = s.list(after=after, limit=7)
        if not page:
            break
        pages.append(keys(page))
        after = keys(page)[-1]
    assert [len(p) for p in pages] == [7, 7, 6] and [k for p in pages for k in p] == list(range(0, 40, 2))


@pytest.mark.parametrize("kind", KEYED)
def test_list_gives_100_unless_asked_and_1000_at_most(place, kind):
    s = place.make(kind)
    for k in range(120):
        s.put_key(k, {})
    assert len(s.list()) == 100 and len(s.list(limit=1000)) == 120
    refused("LIMIT_EXCEEDED", lambda: s.list(limit=1001), "1000")
    refused("BAD_VALUE", lambda: s.list(limit=0))
    refused("INVALID_ARGUMENT", lambda: s.list(limit="ten"))
    assert s.length() == 120


# -- btree buckets: range, first, last (a btree field has list only) -----------------------------

def test_btree_first_last_and_range_in_key_order(place):
    s = place.make("btree")
    for key in MIXED_KEYS:
        s.put_key(key, {})
    want = in_value_order(MIXED_KEYS)
    if s.is_field:
        refused("VERB_NOT_SUPPORTED", lambda: s.range({"$gte": 0}), "list({after")
        refused("VERB_NOT_SUPPORTED", lambda: s.first(), "its verbs")
        refused("VERB_NOT_SUPPORTED", lambda: s.last(), "its verbs")
        assert same_keys([e["key"] for e in s.list()], want)
        return
    assert compare(s.first()["_id_"], want[0]) == 0 and compare(s.last()["_id_"], want[-1]) == 0
    numbers = [k for k in want if isinstance(k, (int, float, Int64, Decimal128)) and not isinstance(k, bool)]
    assert same_keys([d["_id_"] for d in s.range({"$gte": -1, "$lt": 10})],
                     [k for k in numbers if -1 <= float(str(k)) < 10])
    assert same_keys([d["_id_"] for d in s.range({"$gt": "a"})], ["b", "ä"])  # strings only: bounds bracket kinds
    assert same_keys([d["_id_"] for d in s.range({"$gte": 0}, limit=3, reverse=True)], numbers[::-1][:3])
    assert [d["_id_"] for d in s.range({"$prefix": "1"})] == ["10"]
    assert same_keys([d["_id_"] for d in s.range()], want)


def test_btree_on_an_empty_store(place):
    s = place.make("btree")
    assert s.list() == [] and s.get(1) is None and s.length() == 0
    if not s.is_field:
        assert s.first() is None and s.last() is None and s.range({"$gte": 0}) == []


@pytest.mark.parametrize("kind", KEYED)
def test_a_key_too_long_to_index_is_refused(place, kind):
    s = place.make(kind)
    refused("BAD_VALUE", lambda: s.put_key("k" * 2000, {}), "bytes once encoded")
    assert s.length() == 0 and s.list() == []
    s.put_key("k" * 100, {})  # a long key that fits
    assert s.length() == 1
