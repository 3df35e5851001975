"""Unique holds under random sequences of insert, put, update, delete and batchInsert (hypothesis, against a model)."""

from __future__ import annotations

import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import hoarddb
from hoarddb import errors

IDS = st.integers(0, 6)
EMAILS = st.one_of(st.none(), st.sampled_from(["a", "b", "c", 1, 1.0, 2]))


def norm(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


class UniqueMachine(RuleBasedStateMachine):
    @initialize()
    def open(self):
        self.dir = tempfile.mkdtemp(prefix="hoarddb-unique-")
        self.client = hoarddb.open(self.dir, ttl_sweep_seconds=0)
        self.b = self.client["app"].create_bucket("U", type="hash", indices=[{"field": "E", "unique": True}])
        self.model: dict[int, object] = {}  # _id_ -> E (None when missing)

    def holders(self, value, exclude=None):
        return [k for k, v in self.model.items() if norm(v) == norm(value) and k != exclude]

    @rule(ident=IDS, email=EMAILS, missing=st.booleans())
    def insert(self, ident, email, missing):
        doc = {"_id_": ident} if missing else {"_id_": ident, "E": email}
        value = None if missing else email
        ok = ident not in self.model and not self.holders(value)
        try:
            self.b.insert(doc)
            assert ok
            self.model[ident] = value
        except errors.DuplicateKeyError:
            assert not ok

    @rule(ident=IDS, email=EMAILS)
    def put(self, ident, email):
        ok = not self.holders(email, exclude=ident)
        try:
            self.b.put({"_id_": ident, "E": email})
            assert ok
            self.model[ident] = email
        except errors.DuplicateKeyError:
            assert not ok

    @rule(ident=IDS, email=EMAILS)
    def update_one(self, ident, email):
        ok = ident not in self.model or not self.holders(email, exclude=ident)
        try:
            self.b.update({"_id_": ident}, {"$set": {"E": email}})
            assert ok
            if ident in self.model:
                self.model[ident] = email
        except errors.DuplicateKeyError:
            assert not ok

    @rule(ident=IDS)
    def delete(self, ident):
        self.b.delete({"_id_": ident})
        self.model.pop(ident, None)

    @rule(batch=st.lists(st.tuples(IDS, EMAILS), max_size=4))
    def batch(self, batch):
        trial = dict(self.model)
        ok = True
        for ident, email in batch:
            if ident in trial or any(norm(v) == norm(email) for v in trial.values()):
                ok = False
                break
            trial[ident] = email
        try:
            self.b.batch_insert([{"_id_": i, "E": e} for i, e in batch])
            assert ok
            self.model = trial
        except errors.DuplicateKeyError:
            assert not ok

    @invariant()
    def agrees(self):
        if not hasattr(self, "b"):
            return
        docs = {d["_id_"]: d.get("E") for d in self.b.find()}
        assert docs == self.model
        for value in {norm(v) for v in self.model.values()}:
            assert len(self.b.search({"E": value})) == 1

    def teardown(self):
        if hasattr(self, "dir"):
            try:
                self.client.close()
            finally:  # a close that raises must not leave the folder behind in /tmp
                shutil.rmtree(self.dir, ignore_errors=True)


TestUnique = UniqueMachine.TestCase
