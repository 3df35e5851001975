"""The KV engine: reopening with a smaller map, copies, groups and a full map. (Crashes:
test_wal.py.)"""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from hoarddb.errors import StorageError
from hoarddb.storage.kv import KV


def used_bytes(kv: KV) -> int:
    return (kv.env.info()["last_pgno"] + 1) * kv.env.stat()["psize"]


def put(kv: KV, i: int, size: int = 1000) -> None:
    kv.write(lambda txn: txn.put(b"k%08d" % i, bytes([i % 251]) * size))


def records(path: Path) -> dict[bytes, bytes]:
    kv = KV(path, map_size=1 << 20)
    try:
        with kv.read() as txn:
            return dict(txn.cursor())
    finally:
        kv.close()


def test_an_environment_grown_reopens_with_every_record_even_with_a_smaller_map(tmp_path):
    kv = KV(tmp_path / "kv", map_size=2 << 20)  # the map doubles as it fills
    for i in range(5000):
        put(kv, i)
    assert kv.env.info()["map_size"] > 2 << 20
    kv.close()
    kv = KV(tmp_path / "kv", map_size=1 << 20)  # smaller than the file: LMDB takes the used size
    with kv.read() as txn:
        assert sum(1 for _ in txn.cursor()) == 5000
    put(kv, 5000)
    kv.close()
    assert len(records(tmp_path / "kv")) == 5001


def test_a_group_is_one_commit_and_one_record(tmp_path):
    kv = KV(tmp_path / "kv", map_size=64 << 20)
    kv.begin_group()
    for i in range(50):
        put(kv, i)
    with pytest.raises(ZeroDivisionError):  # a write of the group that fails is undone alone
        kv.write(lambda txn: (txn.put(b"gone", b"x"), 1 / 0))
    kv.end_group()
    assert [len(ops) for ops in kv.wal.records()] == [50]
    kv.close()
    got = records(tmp_path / "kv")
    assert len(got) == 50 and b"gone" not in got


def test_a_copy_holds_the_used_pages_only(tmp_path):
    kv = KV(tmp_path / "kv", map_size=64 << 20)
    for i in range(100):
        put(kv, i)
    (tmp_path / "copy").mkdir()
    kv.env.copy(str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "data.mdb").stat().st_size <= used_bytes(kv)
    kv.close()
    assert len(records(tmp_path / "copy")) == 100


def test_a_group_that_fills_the_map_midway_commits_grows_and_goes_on(tmp_path):
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    kv.begin_group()
    for i in range(600):  # ~1.8 MB in one group: the map fills midway, more than once
        kv.write(lambda txn: txn.put(b"k%05d" % i, bytes([i % 251]) * 3000))
    kv.end_group()
    assert kv.env.info()["map_size"] > 1 << 20
    kv.write(lambda txn: txn.put(b"after", b"x"))  # the commit lock was released
    kv.close()
    got = records(tmp_path / "kv")
    assert len(got) == 601 and got[b"k00599"] == bytes([599 % 251]) * 3000


def test_a_group_whose_writes_could_not_be_kept_fails_whole_and_frees_the_lock(tmp_path, monkeypatch):
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    kv.write(lambda txn: txn.put(b"before", b"x"))
    real_commit = KV._commit

    def failing_commit(self, txn, ops, durable):
        txn.abort()
        raise lmdb.MapFullError("mdb_txn_commit: MDB_MAP_FULL")

    kv.begin_group()
    kv.write(lambda txn: txn.put(b"early", b"x"))
    monkeypatch.setattr(KV, "_commit", failing_commit)
    with pytest.raises(StorageError, match="writes of its group were not kept"):
        for i in range(600):  # fills the map: the group's commit fails
            kv.write(lambda txn: txn.put(b"k%05d" % i, bytes(3000)))
    with pytest.raises(StorageError):  # later writes of the group are refused too
        kv.write(lambda txn: txn.put(b"late", b"x"))
    monkeypatch.setattr(KV, "_commit", real_commit)
    with pytest.raises(StorageError):
        kv.end_group()
    kv.write(lambda txn: txn.put(b"after", b"x"))  # the lock is free again
    kv.close()
    assert set(records(tmp_path / "kv")) == {b"before", b"after"}
