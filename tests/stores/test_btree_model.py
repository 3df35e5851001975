"""A btree bucket against a sorted list (hypothesis): inserts with ties, deletes, gets, first, last, range and pages in MongoDB's value order."""

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
from hoarddb.values.order import compare, type_rank, values_equal

SLOW = os.environ.get("HOARDDB_SLOW") == "1"

#: Sort keys of several kinds: 1 and 1.0, 2 and Int64(2) are one key each (ties).
KEYS = st.sampled_from([0, 1, 1.0, Int64(2), 2, 2.5, -1, -0.5, "a", "ab", "b", "ä", ""])
OPS = {"$gt": lambda c: c > 0, "$gte": lambda c: c >= 0, "$lt": lambda c: c < 0, "$lte": lambda c: c <= 0,
       "$eq": lambda c: c == 0}
BOUNDS = st.dictionaries(st.sampled_from(sorted(OPS)), KEYS, max_size=2)


def within(key, bounds: dict) -> bool:
    """Whether ``key`` is within ``bounds`` as a filter would say: each bound matches keys of its own kind only."""
    return all(type_rank(key) == type_rank(b) and OPS[op](compare(key, b)) for op, b in bounds.items())


class BtreeMachine(RuleBasedStateMachine):
    """The model: (key, n) entries in insertion order; the bucket holds them sorted by key, ties by insertion."""

    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="hoarddb-btree-model-")
        self.client = hoarddb.open(self.directory, sync=False, ttl_sweep_seconds=0)
        self.b = self.client["app"].create_bucket("B", type="btree", key="k")
        self.entries: list[tuple] = []  # (key, n)
        self.n = 0

    def ordered(self) -> list[tuple]:
        """The entries in the bucket's order: by key, ties by insertion (Python's sort is stable)."""
        return sorted(self.entries, key=functools.cmp_to_key(lambda a, b: compare(a[0], b[0])))

    def doc(self, key) -> dict:
        self.n += 1
        self.entries.append((key, self.n))
        return {"k": key, "n": self.n}

    @staticmethod
    def ns(docs) -> list[int]:
        return [d["n"] for d in docs]

    @rule(key=KEYS)
    def insert(self, key):
        assert values_equal(self.b.insert(self.doc(key)), key)

    @rule(keys=st.lists(KEYS, max_size=5))
    def batch_insert(self, keys):
        assert len(self.b.batch_insert([self.doc(k) for k in keys])) == len(keys)

    @rule(key=KEYS)
    def delete(self, key):
        gone = [e for e in self.entries if values_equal(e[0], key)]
        assert self.b.delete(key) == {"deleted": len(gone)}
        self.entries = [e for e in self.entries if not values_equal(e[0], key)]

    @rule(key=KEYS)
    def get(self, key):
        ties = [n for k, n in self.entries if values_equal(k, key)]
        got = self.b.get(key)
        assert (got["n"] if got else None) == (ties[0] if ties else None)  # the first inserted of equal keys
        assert (self.b.get({"k": key}) or {}).get("n") == (ties[0] if ties else None)

    @rule()
    def ends(self):
        ordered = self.ordered()
        first, last = self.b.first(), self.b.last()
        assert (first["n"] if first else None) == (ordered[0][1] if ordered else None)
        assert (last["n"] if last else None) == (ordered[-1][1] if ordered else None)

    @rule(bounds=BOUNDS, limit=st.one_of(st.none(), st.integers(1, 4)), reverse=st.booleans(), named=st.booleans())
    def range(self, bounds, limit, reverse, named):
        want = [n for k, n in self.ordered() if within(k, bounds)]
        if reverse:
            want.reverse()  # (ties too: a reverse range reads the B+tree backwards)
        # ({k: {}} would be the exact key {}, as in a filter: empty bounds go bare)
        got = self.b.range({"k": bounds} if named and bounds else bounds, limit=limit, reverse=reverse)
        assert self.ns(got) == want[:limit]

    @rule(prefix=st.sampled_from(["", "a", "ä", "z"]))
    def range_prefix(self, prefix):
        want = [n for k, n in self.ordered() if isinstance(k, str) and k.startswith(prefix)]
        assert self.ns(self.b.range({"$prefix": prefix})) == want

    @rule(after=st.one_of(st.none(), KEYS), limit=st.integers(1, 5))
    def page(self, after, limit):
        want = [n for k, n in self.ordered() if after is None or compare(k, after) > 0]
        assert self.ns(self.b.list(after=after, limit=limit)) == want[:limit]

    @rule()
    def reopen(self):
        self.client.close()
        self.client = hoarddb.open(self.directory, sync=False, ttl_sweep_seconds=0)
        self.b = self.client["app"].B

    @invariant()
    def agrees(self):
        assert self.b.length() == len(self.entries)
        listed = self.b.list(limit=1000)
        assert self.ns(listed) == [n for _, n in self.ordered()]
        assert all(values_equal(d["k"], k) for d, (k, _) in zip(listed, self.ordered()))

    def teardown(self):
        try:
            self.client.close()
        finally:  # a close that raises must not leave the folder behind in /tmp
            shutil.rmtree(self.directory, ignore_errors=True)


BtreeMachine.TestCase.settings = settings(max_examples=300 if SLOW else 25, stateful_step_count=50 if SLOW else 30,
                                          deadline=None)
TestBtreeModel = BtreeMachine.TestCase
