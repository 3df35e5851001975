"""BatchWriter: one write per batch, cut by count and by bytes, and a refused batch halved down to its bad documents."""

from __future__ import annotations

import pytest

from hoarddb.errors import BadValueError, StorageError
from hoarddb.tools.batches import BatchWriter, Stop
from hoarddb.tools.readers import Record
from hoarddb.tools.report import BucketReport


def records(n, size=10):
    return [Record(number=i + 1, offset=i * size, size=size, doc={"n": i}) for i in range(n)]


def writer(bad=(), **kwargs):
    writes = []

    def write(docs):
        if any(d["n"] in bad for d in docs):
            raise BadValueError(f"bad among {[d['n'] for d in docs]}")
        writes.append([d["n"] for d in docs])

    rep = BucketReport(db="app", bucket="b", type="hash", file="f.bson")
    return BatchWriter(write, rep, **kwargs), rep, writes


def test_batches_are_cut_by_count_and_by_bytes():
    w, rep, writes = writer(batch_size=4, batch_bytes=25)
    for r in records(10):
        w.add(r)
    w.flush()
    assert [len(x) for x in writes] == [2, 2, 2, 2, 2] and rep.documents == 10
    w, rep, writes = writer(batch_size=4, batch_bytes=10**6)
    for r in records(10):
        w.add(r)
    w.flush()
    assert [len(x) for x in writes] == [4, 4, 2]


def test_skip_halves_a_refused_batch_down_to_exactly_its_bad_documents():
    w, rep, writes = writer(bad={3, 4, 9}, on_error="skip", batch_size=16)
    for r in records(16):
        w.add(r)
    w.flush()
    assert sorted(n for x in writes for n in x) == [n for n in range(16) if n not in {3, 4, 9}]
    assert [r.number for r in rep.refused] == [4, 5, 10] and rep.documents == 13


def test_stop_writes_what_came_before_the_bad_document_and_nothing_after():
    w, rep, writes = writer(bad={5}, batch_size=16)
    with pytest.raises(Stop):
        for r in records(16):
            w.add(r)
        w.flush()
    assert sorted(n for x in writes for n in x) == [0, 1, 2, 3, 4]
    assert [r.number for r in rep.refused] == [6] and rep.stopped


def test_an_error_that_is_not_a_document_s_ends_the_run_without_halving():
    calls = []

    def write(docs):
        calls.append(len(docs))
        raise StorageError("disk full")

    rep = BucketReport(db="app", bucket="b", type="hash", file="f.bson")
    w = BatchWriter(write, rep, on_error="skip", batch_size=8)
    with pytest.raises(Stop):
        for r in records(8):
            w.add(r)
    assert calls == [8] and "disk full" in rep.error and rep.documents == 0
