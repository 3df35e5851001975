"""Store.check_open on fifo, lifo and blob buckets: the offline check's findings, over one moment of an open bucket.

Writers run in threads beside the checks (pushes and pops that roll and unlink segments,
lifo pops that cut the tail, blob puts and deletes): no check may report what they do.
Damage made on disk while the store is open is reported as ``Store.check`` (offline)
reports it, word for word.
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pytest

from hoarddb.options import Options
from hoarddb.stores.blob import BlobStore
from hoarddb.stores.fifo import FifoStore
from hoarddb.stores.lifo import LifoStore

from ..test_corruption import flip

PAD = "x" * 700  # about five entries per 4 KiB segment: segments roll and go often


def open_queue(cls, directory: Path, segment_size: int = 4096):
    directory.mkdir(parents=True, exist_ok=True)
    return cls(directory, {"type": cls.type_name, "name": directory.name, "options": {"segment_size": segment_size}},
               Options(sync=False))


def open_blobs(directory: Path) -> BlobStore:
    directory.mkdir(parents=True, exist_ok=True)
    return BlobStore(directory, {"type": "blob", "name": directory.name}, Options(sync=False))


def checks_while(store, work, rounds: int = 40) -> list:
    """Run ``work(stop)`` in two threads and ``store.check_open`` ``rounds`` times meanwhile; every report."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run():
        try:
            work(stop)
        except BaseException as exc:  # the test fails with it below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        reports = [list(store.check_open(store.declaration)) for _ in range(rounds)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    return reports


@pytest.mark.parametrize("cls", [FifoStore, LifoStore])
def test_a_queue_checks_clean_while_pushes_and_pops_roll_and_remove_its_segments(tmp_path, cls):
    q = open_queue(cls, tmp_path / "Q")
    q.batch_push([{"n": i, "pad": PAD} for i in range(200)])
    counts = {"pushed": 0, "popped": 0}

    def work(stop):
        n = 0
        while not stop.is_set():
            q.batch_push([{"n": n, "pad": PAD} for _ in range(7)])
            counts["pushed"] += 7
            counts["popped"] += len(q.pop(5))
            n += 1

    reports = checks_while(q, work)
    try:
        assert all(r == [] for r in reports), [r for r in reports if r][:3]
        assert counts["pushed"] > 0 and counts["popped"] > 0
        assert q.log.segments > 1
    finally:
        q.close()
    assert type(q).check(tmp_path / "Q", q.declaration) == []


def test_a_fifo_checks_clean_while_it_is_emptied_and_filled_again(tmp_path):
    """Each emptying pop of a big last segment moves the head past every segment file."""
    q = open_queue(FifoStore, tmp_path / "Q", segment_size=64 * 1024)

    def work(stop):
        while not stop.is_set():
            q.batch_push([{"pad": PAD} for _ in range(100)])
            while q.pop(100):
                pass

    reports = checks_while(q, work)
    q.close()
    assert all(r == [] for r in reports), [r for r in reports if r][:3]


def test_a_fifo_with_claims_checks_its_claim_table_too(tmp_path):
    q = open_queue(FifoStore, tmp_path / "Q")
    q.batch_push([{"n": i, "pad": PAD} for i in range(30)])

    def work(stop):
        while not stop.is_set():
            got = q.claim(limit=3, lease=60)
            q.batch_push([{"pad": PAD}] * 3)
            if got:
                q.ack([c["claimId"] for c in got])

    reports = checks_while(q, work, rounds=20)
    q.close()
    assert all(r == [] for r in reports), [r for r in reports if r][:3]


@pytest.mark.parametrize("cls", [FifoStore, LifoStore])
def test_a_damaged_sealed_segment_is_reported_while_the_queue_serves_as_offline(tmp_path, cls):
    q = open_queue(cls, tmp_path / "Q")
    q.batch_push([{"n": i, "pad": PAD} for i in range(40)])
    sealed = tmp_path / "Q" / f"seg_00002.{cls.type_name}"
    flip(sealed, sealed.stat().st_size // 2)
    online = list(q.check_open(q.declaration))

    def work(stop):  # the tail changes meanwhile, far from the damage (a lifo pops there too)
        while not stop.is_set():
            q.batch_push([{"pad": PAD}])
            if cls is LifoStore:
                q.pop(1)

    during = checks_while(q, work, rounds=10)
    q.close()
    offline = type(q).check(tmp_path / "Q", q.declaration)
    damage = [p for p in offline if p.file == sealed.name]
    assert damage and "fails its checksum" in damage[0].what
    assert online == damage
    assert all(r == damage for r in during), during


def test_a_queue_segment_removed_behind_its_back_is_reported_missing(tmp_path):
    q = open_queue(FifoStore, tmp_path / "Q")
    q.batch_push([{"n": i, "pad": PAD} for i in range(40)])
    last = max(p.name for p in (tmp_path / "Q").glob("seg_*.fifo"))
    os.unlink(tmp_path / "Q" / "seg_00003.fifo")
    problems = q.check_open(q.declaration)
    q.close()
    assert [(p.file, p.what) for p in problems] == [
        ("seg_00003.fifo", f"is missing between seg_00001.fifo and {last}")], problems


def test_a_lifo_segment_damaged_while_pops_cut_its_tail_is_reported(tmp_path):
    q = open_queue(LifoStore, tmp_path / "Q")
    q.batch_push([{"n": i, "pad": PAD} for i in range(60)])
    flip(tmp_path / "Q" / "seg_00001.lifo", 100)

    def work(stop):  # pops and pushes across segment boundaries: cuts, unlinks, MORE rewritten
        while not stop.is_set():
            q.batch_push([{"pad": PAD} for _ in range(9)])
            q.pop(9)

    reports = checks_while(q, work, rounds=20)
    q.close()
    assert all(len(r) == 1 and r[0].file == "seg_00001.lifo" and "fails its checksum" in r[0].what
               for r in reports), reports


# -- blobs ---------------------------------------------------------------------------------------


def test_a_blob_bucket_checks_clean_while_blobs_are_put_and_deleted(tmp_path):
    b = open_blobs(tmp_path / "B")
    kept = [b.put(os.urandom(3000)) for _ in range(20)]

    def work(stop):
        while not stop.is_set():
            ids = [b.put(os.urandom(5000)) for _ in range(5)]
            for i in ids[:4]:
                b.delete(i)

    reports = checks_while(b, work)
    assert all(r == [] for r in reports), [r for r in reports if r][:3]
    assert all(b.get(i) for i in kept)
    b.close()
    assert BlobStore.check(tmp_path / "B", b.declaration) == []


def test_a_blob_changed_on_disk_is_reported_while_the_bucket_serves_as_offline(tmp_path):
    b = open_blobs(tmp_path / "B")
    ids = [b.put(os.urandom(3000)) for _ in range(5)]
    flip(tmp_path / "B" / ids[2], 10, 1)
    stray = tmp_path / "B" / str(uuid.UUID(int=7))
    stray.write_bytes(b"not put")
    online = b.check_open(b.declaration)
    b.close()
    offline = BlobStore.check(tmp_path / "B", b.declaration)
    assert [(p.file, p.what) for p in online] == [(p.file, p.what) for p in offline]
    assert sorted(p.file for p in online) == sorted([ids[2], stray.name])
    assert any("is corrupt" in p.what and "sha256" in p.what for p in online)
