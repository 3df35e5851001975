"""TTL indexes and the sweeper (indexes.md, "TTL indexes")."""

from __future__ import annotations

import datetime
import time

import pytest
from bson.decimal128 import Decimal128

import hoarddb
from hoarddb.options import Options

UTC = datetime.timezone.utc


def now():
    return datetime.datetime.now(UTC)


@pytest.fixture
def sessions(tmp_path):
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:  # sweeps only when the test asks
        b = c["app"].create_bucket("Sessions", type="hash",
                                   indices=[{"field": "CreatedAt", "expire_after_seconds": 3600}])
        yield c, b


def test_a_document_expires_ttl_seconds_after_its_date(sessions):
    c, b = sessions
    b.insert({"_id_": "old", "CreatedAt": now() - datetime.timedelta(seconds=3601)})
    b.insert({"_id_": "new", "CreatedAt": now() - datetime.timedelta(seconds=3500)})
    assert b.get("old") is not None  # readable until a sweep removes it
    assert c.sweep_ttl()["expired"] == 1
    assert b.get("old") is None and b.get("new") is not None and b.count() == 1


def test_a_number_of_seconds_since_1970_expires_too(sessions):
    c, b = sessions
    b.batch_insert([{"_id_": "int", "CreatedAt": int(time.time()) - 4000},
                    {"_id_": "float", "CreatedAt": time.time() - 3700.5},
                    {"_id_": "dec", "CreatedAt": Decimal128(str(int(time.time()) - 5000))},
                    {"_id_": "future", "CreatedAt": time.time() + 10}])
    assert c.sweep_ttl()["expired"] == 3
    assert [d["_id_"] for d in b.find()] == ["future"]


@pytest.mark.parametrize("value", [None, "2020-01-01", True, False, [1, 2], {"t": 1}, float("nan")])
def test_anything_else_never_expires(sessions, value):
    c, b = sessions
    b.insert({"_id_": "x", "CreatedAt": value})
    b.insert({"_id_": "missing"})
    assert c.sweep_ttl()["expired"] == 0
    assert b.count() == 2


def test_refreshing_a_document_keeps_it(sessions):
    c, b = sessions
    b.insert({"_id_": "s1", "CreatedAt": now() - datetime.timedelta(hours=2)})
    b.update({"_id_": "s1"}, {"$set": {"CreatedAt": now()}})
    assert c.sweep_ttl()["expired"] == 0 and b.get("s1") is not None


def test_expiry_removes_the_index_entries_too(tmp_path):
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("S", type="hash", indices=[
            {"field": "CreatedAt", "expire_after_seconds": 0}, {"field": "Email", "unique": True}])
        b.insert({"_id_": "s1", "CreatedAt": now() - datetime.timedelta(seconds=5), "Email": "a@x"})
        c.sweep_ttl()
        b.insert({"_id_": "s2", "CreatedAt": now() + datetime.timedelta(days=1), "Email": "a@x"})  # value is free
        assert b.search({"Email": "a@x"}).index_used == "Email_1"


def test_the_background_sweeper_runs_every_interval(tmp_path):
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0.1) as c:
        b = c["app"].create_bucket("S", type="hash", indices=[{"field": "At", "expire_after_seconds": 1}])
        b.batch_insert([{"_id_": i, "At": now() - datetime.timedelta(seconds=5)} for i in range(50)])
        deadline = time.monotonic() + 30
        while b.count() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.count() == 0
        assert c.metrics()['hoarddb_ttl_sweep_documents_total{outcome="expired"}'] == 50


def test_interval_and_budget_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("HOARDDB_TTL_SWEEP_SECONDS", "0")
    monkeypatch.setenv("HOARDDB_TTL_SWEEP_BUDGET_SECONDS", "2.5")
    o = Options()
    assert (o.ttl_sweep_seconds, o.ttl_sweep_budget_seconds) == (0, 2.5)
    monkeypatch.delenv("HOARDDB_TTL_SWEEP_SECONDS")
    monkeypatch.delenv("HOARDDB_TTL_SWEEP_BUDGET_SECONDS")
    assert (Options().ttl_sweep_seconds, Options().ttl_sweep_budget_seconds) == (60, 5)


def test_zero_turns_the_sweeper_off(tmp_path):
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("S", type="hash", indices=[{"field": "At", "expire_after_seconds": 0}])
        b.insert({"_id_": 1, "At": now() - datetime.timedelta(days=1)})
        time.sleep(0.3)
        assert b.count() == 1


def test_a_budget_that_runs_out_leaves_a_backlog_for_the_next_sweep(tmp_path):
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0, ttl_sweep_budget_seconds=0) as c:
        b = c["app"].create_bucket("S", type="hash", indices=[{"field": "At", "expire_after_seconds": 0}])
        b.batch_insert([{"_id_": i, "At": 1} for i in range(10)])
        got = c.sweep_ttl()
        assert got["exhausted"] and got["backlog"] == 10 and b.count() == 10
        m = c.metrics()
        assert m["hoarddb_ttl_sweep_budget_exhausted_total"] == 1
        assert m["hoarddb_ttl_backlog_estimate"] == 10


def test_metrics_have_the_spec_names(sessions):
    c, _ = sessions
    m = c.metrics()
    for name in ('hoarddb_ttl_sweep_documents_total{outcome="expired"}',
                 'hoarddb_ttl_sweep_documents_total{outcome="skipped"}',
                 "hoarddb_ttl_sweep_budget_exhausted_total", "hoarddb_ttl_backlog_estimate",
                 'hoarddb_indexes{state="ready"}', 'hoarddb_indexes{state="building"}',
                 'hoarddb_indexes{state="conflicted"}', 'hoarddb_indexes{state="unreadable"}'):
        assert name in m, name
    assert m['hoarddb_indexes{state="ready"}'] == 1


def test_a_bucket_that_cannot_be_swept_does_not_stop_the_others(tmp_path, caplog):
    # An older version accepted expire_after_seconds: NaN; its bucket's sweep raises. The
    # buckets after it must still expire their documents, pass after pass.
    from hoarddb.catalog import Catalog

    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        c["app"].create_bucket("Broken", type="hash", indices=[{"field": "At", "expire_after_seconds": 60}])
        c["app"].create_bucket("Fine", type="hash", indices=[{"field": "At", "expire_after_seconds": 0}])
    cat = Catalog(tmp_path)
    decl = cat.bucket("app", "Broken")
    cat.replace_bucket("app", dict(decl, indexes=[dict(decl["indexes"][0], expire_after_seconds=float("nan"))]))
    cat.close()
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        broken, fine = c["app"].Broken, c["app"].Fine
        broken.insert({"_id_": 1, "At": 1})
        fine.insert({"_id_": 1, "At": 1})
        got = c.sweep_ttl()
        assert got["expired"] == 1 and got["failed"] == 1
        assert fine.count() == 0 and broken.count() == 1
        fine.insert({"_id_": 2, "At": 1})
        assert c.sweep_ttl()["expired"] == 1 and fine.count() == 0
    assert "TTL sweep of bucket Broken failed" in caplog.text


@pytest.mark.parametrize("stays", [float("nan"), "array"])
def test_entries_that_never_expire_do_not_hide_an_expired_document(tmp_path, stays):
    # More entries than one sweep batch holds that never expire (NaN sorts among the
    # numbers; an array's old date is indexed but an array never expires) sit before an
    # expired document: each batch must go on past them, not read them again.
    from hoarddb.stores import hash as hash_store

    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("S", type="hash", indices=[{"field": "At", "expire_after_seconds": 60}])
        old = now() - datetime.timedelta(days=365)
        value = stays if stays != "array" else [old - datetime.timedelta(days=1)]
        b.batch_insert([{"_id_": i, "At": value} for i in range(hash_store.SWEEP_BATCH + 100)])
        b.insert({"_id_": "gone", "At": old if stays == "array" else 1.0})
        got = c.sweep_ttl()
        assert got["expired"] == 1 and not got["exhausted"]
        assert b.get("gone") is None and b.count() == hash_store.SWEEP_BATCH + 100
        assert c.sweep_ttl()["expired"] == 0


def test_a_sweep_goes_on_where_its_last_batch_stopped(tmp_path, monkeypatch):
    # Documents refreshed mid-range are read once a pass; everything expired is removed in
    # one pass of several batches.
    from hoarddb.stores import hash as hash_store

    monkeypatch.setattr(hash_store, "SWEEP_BATCH", 7)
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("S", type="hash", indices=[{"field": "At", "expire_after_seconds": 0}])
        b.batch_insert([{"_id_": i, "At": i if i % 3 else [i]} for i in range(1, 61)])  # every third: an array
        got = c.sweep_ttl()
        assert got["expired"] == 40 and not got["exhausted"]
        assert sorted(d["_id_"] for d in b.find()) == list(range(3, 61, 3))
