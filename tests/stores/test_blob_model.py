"""A blob bucket and a blob store field against a dict (hypothesis): put, get, info, stream, delete and pages in id order, with their SHA-256."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import hoarddb
from hoarddb import errors

SLOW = os.environ.get("HOARDDB_SLOW") == "1"

DATA = st.one_of(st.binary(max_size=300), st.just(b""), st.binary(min_size=2000, max_size=5000))
LABELS = st.one_of(st.none(), st.sampled_from(["a.txt", "b.pdf", "ä ✓.jpg"]))


@pytest.mark.parametrize("where", ["bucket", "field"])
def test_against_a_model(where):
    class BlobMachine(RuleBasedStateMachine):
        """The model: id -> (data, name, type) of the blobs put and not deleted; ``gone``: ids deleted."""

        def __init__(self):
            super().__init__()
            self.directory = tempfile.mkdtemp(prefix="hoarddb-blob-model-")
            self.open()
            db = self.client["app"]
            if where == "bucket":
                db.create_bucket("P", type="blob")
            else:
                db.create_bucket("Doc", type="hash", store_fields=[{"name": "P", "type": "blob"}])
                db.Doc.insert({"_id_": "d"})
            self.model: dict[str, tuple] = {}
            self.gone: list[str] = []
            self.last = ""

        def open(self):
            self.client = hoarddb.open(self.directory, sync=False, ttl_sweep_seconds=0)
            db = self.client["app"]
            self.b = db.P if where == "bucket" else db.Doc["d"].P

        def pick(self, i: int) -> str:
            ids = sorted(self.model)
            return ids[i % len(ids)]

        @rule(data=DATA, name=LABELS, type_=LABELS, as_file=st.booleans())
        def put(self, data, name, type_, as_file):
            blob_id = self.b.put(io.BytesIO(data) if as_file else data, name=name, type=type_)
            assert blob_id > self.last and blob_id not in self.model  # ids grow: id order is put order
            self.last = blob_id
            self.model[blob_id] = (data, name, type_)

        @precondition(lambda self: self.model)
        @rule(i=st.integers(0, 100), chunk=st.integers(1, 3000))
        def read(self, i, chunk):
            blob_id = self.pick(i)
            data, name, type_ = self.model[blob_id]
            meta = {"_id_": blob_id, "name": name, "type": type_, "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest()}
            got = self.b.get(blob_id)
            assert got["data"] == data and {k: got[k] for k in meta} == meta
            info = self.b.info({"_id_": blob_id})
            assert {k: info[k] for k in meta} == meta and "data" not in info
            chunks = list(self.b.stream(blob_id, chunk_size=chunk))
            assert b"".join(chunks) == data and all(len(c) == chunk for c in chunks[:-1])

        @precondition(lambda self: self.model)
        @rule(i=st.integers(0, 100))
        def delete(self, i):
            blob_id = self.pick(i)
            assert self.b.delete(blob_id) == {"deleted": 1}
            del self.model[blob_id]
            self.gone.append(blob_id)

        @precondition(lambda self: self.gone)
        @rule(i=st.integers(0, 100))
        def deleted_is_not_found(self, i):
            blob_id = self.gone[i % len(self.gone)]
            for call in (self.b.get, self.b.info, self.b.delete):
                with pytest.raises(errors.NotFoundError):
                    call(blob_id)

        @rule(i=st.one_of(st.none(), st.integers(0, 100)), from_gone=st.booleans(), limit=st.integers(1, 4))
        def page(self, i, from_gone, limit):
            pool = self.gone if from_gone else sorted(self.model)
            after = pool[i % len(pool)] if i is not None and pool else None
            want = [k for k in sorted(self.model) if after is None or k > after]
            assert [e["_id_"] for e in self.b.list(after=after, limit=limit)] == want[:limit]

        @rule()
        def reopen(self):
            self.client.close()
            self.open()

        @invariant()
        def agrees(self):
            assert self.b.length() == len(self.model)
            listed = self.b.list(limit=1000)
            assert [e["_id_"] for e in listed] == sorted(self.model)
            assert [(e["size"], e["name"], e["type"]) for e in listed] == \
                [(len(d), n, t) for d, n, t in (self.model[k] for k in sorted(self.model))]

        def teardown(self):
            try:
                self.client.close()
            finally:  # a close that raises must not leave the folder behind in /tmp
                shutil.rmtree(self.directory, ignore_errors=True)

    BlobMachine.TestCase.settings = settings(max_examples=300 if SLOW else 20,
                                             stateful_step_count=50 if SLOW else 25, deadline=None)
    BlobMachine.TestCase().runTest()
