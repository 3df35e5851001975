"""Hash and btree store fields against a dict (hypothesis): put(key, doc), get, delete and pages in key order, two documents apart, across reopens."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

import pytest
from bson.int64 import Int64
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import hoarddb
from hoarddb.values.order import compare, values_equal

SLOW = os.environ.get("HOARDDB_SLOW") == "1"

#: Element keys of several kinds: 2 and 2.0, 3 and Int64(3) are one key each.
KEYS = st.sampled_from([0, 2, 2.0, Int64(3), 3, -1.5, "a", "b", "ä", "", True, "2026-03-14/e1"])
DOCS = ("d1", "d2")


@pytest.mark.parametrize("field_type", ["hash", "btree"])
@pytest.mark.parametrize("owner_type", ["hash", "btree"])
def test_against_a_model(field_type, owner_type):
    class KeyedFieldMachine(RuleBasedStateMachine):
        """The model: per document, a list of [key, doc] with one entry per key (as values)."""

        def __init__(self):
            super().__init__()
            self.directory = tempfile.mkdtemp(prefix="hoarddb-field-model-")
            self.client = hoarddb.open(self.directory, sync=False, ttl_sweep_seconds=0)
            owner = self.client["app"].create_bucket("P", type=owner_type,
                                                     store_fields=[{"name": "S", "type": field_type}])
            for key in DOCS:
                owner.insert({"_id_": key})
            self.model: dict[str, list] = {key: [] for key in DOCS}
            self.n = 0

        def store(self, doc_key: str):
            return self.client["app"].P[doc_key].S

        def at(self, doc_key: str, key) -> int | None:
            return next((i for i, (k, _) in enumerate(self.model[doc_key]) if values_equal(k, key)), None)

        def ordered(self, doc_key: str) -> list:
            return sorted(self.model[doc_key], key=functools.cmp_to_key(lambda a, b: compare(a[0], b[0])))

        @rule(doc_key=st.sampled_from(DOCS), key=KEYS)
        def put(self, doc_key, key):
            self.n += 1
            assert values_equal(self.store(doc_key).put(key, {"n": self.n}), key)
            i = self.at(doc_key, key)
            if i is None:
                self.model[doc_key].append([key, {"n": self.n}])
            else:
                self.model[doc_key][i][1] = {"n": self.n}  # replaced, under the key first put

        @rule(doc_key=st.sampled_from(DOCS), key=KEYS)
        def get(self, doc_key, key):
            i = self.at(doc_key, key)
            assert self.store(doc_key).get(key) == (None if i is None else self.model[doc_key][i][1])

        @rule(doc_key=st.sampled_from(DOCS), key=KEYS)
        def delete(self, doc_key, key):
            i = self.at(doc_key, key)
            assert self.store(doc_key).delete(key) == {"deleted": int(i is not None)}
            if i is not None:
                del self.model[doc_key][i]

        @rule(doc_key=st.sampled_from(DOCS), after=st.one_of(st.none(), KEYS), limit=st.integers(1, 4))
        def page(self, doc_key, after, limit):
            want = [e for e in self.ordered(doc_key) if after is None or compare(e[0], after) > 0][:limit]
            got = self.store(doc_key).list(after=after, limit=limit)
            assert len(got) == len(want)
            assert all(values_equal(g["key"], k) and g["doc"] == d for g, (k, d) in zip(got, want))

        @rule()
        def reopen(self):
            self.client.close()
            self.client = hoarddb.open(self.directory, sync=False, ttl_sweep_seconds=0)

        @invariant()
        def agrees(self):
            for doc_key in DOCS:
                s = self.store(doc_key)
                assert s.length() == len(self.model[doc_key])
                listed = s.list(limit=1000)
                want = self.ordered(doc_key)
                assert [e["doc"] for e in listed] == [d for _, d in want]
                assert all(values_equal(e["key"], k) for e, (k, _) in zip(listed, want))

        def teardown(self):
            try:
                self.client.close()
            finally:  # a close that raises must not leave the folder behind in /tmp
                shutil.rmtree(self.directory, ignore_errors=True)

    KeyedFieldMachine.TestCase.settings = settings(max_examples=300 if SLOW else 10,
                                                   stateful_step_count=50 if SLOW else 20, deadline=None)
    KeyedFieldMachine.TestCase().runTest()
