"""A hash bucket against a dict (hypothesis): insert, put, batches, updates, deletes, gets, finds and pages in key order."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

from bson.int64 import Int64
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import hoarddb
from hoarddb import errors
from hoarddb.values.order import compare, values_equal

SLOW = os.environ.get("HOARDDB_SLOW") == "1"

#: Keys of several kinds; 2 and 2.0, 3 and Int64(3) are one key each.
KEYS = st.sampled_from([0, 1, 2, 2.0, Int64(3), 3, -1.5, "a", "b", "ä", "", True])
VALUES = st.integers(-3, 3)


def in_key_order(keys) -> list:
    return sorted(keys, key=functools.cmp_to_key(compare))


def same(got: list, want: list) -> bool:
    """The same keys in the same order, as values (True is not 1, 2.0 is 2)."""
    return len(got) == len(want) and all(values_equal(a, b) for a, b in zip(got, want))


class HashMachine(RuleBasedStateMachine):
    """The model: key -> the whole document, where equal keys (as values) are one entry."""

    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="hoarddb-hash-model-")
        self.client = hoarddb.open(self.directory, sync=False, ttl_sweep_seconds=0)
        self.b = self.client["app"].create_bucket("H", type="hash")
        self.model: list[dict] = []  # the documents; at most one per key

    def at(self, key) -> int | None:
        return next((i for i, d in enumerate(self.model) if values_equal(d["_id_"], key)), None)

    def store(self, doc: dict) -> None:
        i = self.at(doc["_id_"])
        if i is None:
            self.model.append(doc)
        else:
            self.model[i] = doc

    @rule(key=KEYS, v=VALUES)
    def insert(self, key, v):
        doc = {"_id_": key, "v": v}
        if self.at(key) is not None:
            try:
                self.b.insert(doc)
            except errors.DuplicateKeyError:
                return
            raise AssertionError(f"insert of a key in use ({key!r}) was not refused")
        assert self.b.insert(doc) == key
        self.store(doc)

    @rule(v=VALUES)
    def insert_without_a_key(self, v):
        key = self.b.insert({"v": v})
        assert isinstance(key, str) and self.at(key) is None
        self.store({"_id_": key, "v": v})

    @rule(key=KEYS, v=VALUES)
    def put(self, key, v):
        assert self.b.put({"_id_": key, "v": v, "put": True}) == key
        self.store({"_id_": key, "v": v, "put": True})

    @rule(pairs=st.lists(st.tuples(KEYS, VALUES), max_size=4), replace=st.booleans())
    def batch(self, pairs, replace):
        docs = [{"_id_": k, "v": v} for k, v in pairs]
        clash = False
        if not replace:
            seen = []
            for k, _ in pairs:
                clash |= self.at(k) is not None or any(values_equal(k, s) for s in seen)
                seen.append(k)
        try:
            got = self.b.batch_put(docs) if replace else self.b.batch_insert(docs)
        except errors.DuplicateKeyError:
            assert clash
            return
        assert not clash and got == [k for k, _ in pairs]
        for doc in docs:
            self.store(doc)

    @rule(key=KEYS, v=VALUES)
    def update_one(self, key, v):
        i = self.at(key)
        got = self.b.update({"_id_": key}, {"$set": {"v": v}})
        if i is None:
            assert got == {"matched": 0, "modified": 0}
            return
        assert got == {"matched": 1, "modified": int(self.model[i]["v"] != v)}
        self.model[i] = {**self.model[i], "v": v}

    @rule(low=VALUES)
    def update_many(self, low):
        hit = [i for i, d in enumerate(self.model) if d["v"] >= low]
        assert self.b.update({"v": {"$gte": low}}, {"$inc": {"v": 1}}) == {"matched": len(hit), "modified": len(hit)}
        for i in hit:
            self.model[i] = {**self.model[i], "v": self.model[i]["v"] + 1}

    @rule(key=KEYS)
    def delete_key(self, key):
        i = self.at(key)
        assert self.b.delete(key) == {"deleted": int(i is not None)}
        if i is not None:
            del self.model[i]

    @rule(high=VALUES)
    def delete_matching(self, high):
        gone = [d for d in self.model if d["v"] <= high]
        assert self.b.delete({"v": {"$lte": high}}) == {"deleted": len(gone)}
        self.model = [d for d in self.model if d["v"] > high]

    @rule(key=KEYS)
    def get(self, key):
        i = self.at(key)
        assert self.b.get(key) == (None if i is None else self.model[i])

    @rule(v=VALUES)
    def find_and_count(self, v):
        want = in_key_order([d["_id_"] for d in self.model if d["v"] == v])
        found = self.b.find({"v": v})
        assert same([d["_id_"] for d in found], want)  # in key order
        assert self.b.count({"v": v}) == len(want)

    @rule(after=st.one_of(st.none(), KEYS), limit=st.integers(1, 5))
    def page(self, after, limit):
        keys = in_key_order([d["_id_"] for d in self.model])
        if after is not None:
            keys = [k for k in keys if compare(k, after) > 0]
        got = self.b.list(after=after, limit=limit)
        assert same([d["_id_"] for d in got], keys[:limit])

    @rule()
    def reopen(self):
        self.client.close()
        self.client = hoarddb.open(self.directory, sync=False, ttl_sweep_seconds=0)
        self.b = self.client["app"].H

    @invariant()
    def agrees(self):
        assert self.b.length() == self.b.count() == len(self.model)
        listed = self.b.list(limit=1000)
        assert same([d["_id_"] for d in listed], in_key_order([d["_id_"] for d in self.model]))
        assert all(d == self.model[self.at(d["_id_"])] for d in listed)

    def teardown(self):
        try:
            self.client.close()
        finally:  # a close that raises must not leave the folder behind in /tmp
            shutil.rmtree(self.directory, ignore_errors=True)


HashMachine.TestCase.settings = settings(max_examples=300 if SLOW else 25, stateful_step_count=50 if SLOW else 30,
                                         deadline=None)
TestHashModel = HashMachine.TestCase
