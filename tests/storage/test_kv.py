"""The KV engine: reopening with a smaller map, copies, groups and a full map. (Crashes:
test_wal.py.)"""

from __future__ import annotations

import threading
from pathlib import Path

import lmdb
import pytest

from hoarddb.errors import StorageError
from hoarddb.storage.kv import KV, commits_deferred

from ..killing import SAY_READY, run_script


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


# -- commits held past the answer (commits_deferred) ----------------------------------------


def read_elsewhere(kv: KV, key: bytes):
    """``key``'s value as another thread's read sees it."""
    seen = []

    def read():
        with kv.env.begin() as txn:
            seen.append(txn.get(key))

    reader = threading.Thread(target=read)
    reader.start()
    reader.join()
    return seen[0]


def test_a_deferred_write_is_logged_at_once_and_committed_when_its_block_ends(tmp_path):
    kv = KV(tmp_path / "kv", map_size=1 << 20, sync=False)
    kv.write(lambda txn: txn.put(b"before", b"0"))
    other = threading.Thread(target=lambda: kv.write(lambda txn: txn.put(b"other", b"2")))
    with commits_deferred():
        kv.write(lambda txn: txn.put(b"a", b"1"))
        end = kv.wal.end
        assert end > kv.wal.records_at and kv.wal.unflushed()  # its record is in the log ...
        kv.sync()  # ... and flushed: an answer may leave now
        assert read_elsewhere(kv, b"a") is None  # not committed yet
        other.start()  # another thread's write waits for the commit
        other.join(0.2)
        assert other.is_alive()
    other.join(10)
    assert not other.is_alive()
    assert read_elsewhere(kv, b"a") == b"1" and read_elsewhere(kv, b"other") == b"2"
    kv.close()
    assert records(tmp_path / "kv") == {b"before": b"0", b"a": b"1", b"other": b"2"}


def test_the_same_thread_reads_and_writes_after_a_held_commit_without_waiting_for_itself(tmp_path):
    kv = KV(tmp_path / "kv", map_size=1 << 20, sync=False)
    with commits_deferred():
        kv.write(lambda txn: txn.put(b"a", b"1"))
        with kv.read() as txn:  # commits the held write first, so it sees it
            assert txn.get(b"a") == b"1"
        kv.write(lambda txn: txn.put(b"b", b"2"))
        kv.write(lambda txn: txn.put(b"c", txn.get(b"b") + b"3"))  # held, then committed by the next
        kv.begin_group()
        kv.write(lambda txn: txn.put(b"d", b"4"))
        kv.end_group()
    kv.close()
    assert records(tmp_path / "kv") == {b"a": b"1", b"b": b"2", b"c": b"23", b"d": b"4"}


def test_a_refused_write_in_a_deferring_block_holds_nothing(tmp_path):
    kv = KV(tmp_path / "kv", map_size=1 << 20, sync=False)
    with commits_deferred():
        with pytest.raises(ValueError):
            kv.write(lambda txn: (txn.put(b"a", b"1"), int("refused")))
        assert kv._held is None
        assert read_elsewhere(kv, b"a") is None
    kv.write(lambda txn: txn.put(b"b", b"2"))  # the lock was released
    kv.close()
    assert records(tmp_path / "kv") == {b"b": b"2"}


def test_a_held_commit_that_fails_is_applied_from_its_record_before_the_next_write(tmp_path, caplog):
    kv = KV(tmp_path / "kv", map_size=1 << 20, sync=False)
    kv.write(lambda txn: txn.put(b"a", b"1"))

    class Refusing:  # the held transaction's commit fails, as on a full disk
        def __init__(self, txn):
            self.txn = txn

        def commit(self):
            self.txn.abort()
            raise lmdb.DiskError("No space left on device")

    with caplog.at_level("CRITICAL", logger="hoarddb.kv"):
        with commits_deferred():
            kv.write(lambda txn: txn.put(b"b", b"2"))
            kv.sync()  # acknowledged from here on
            kv._held = Refusing(kv._held)
    assert "an acknowledged write could not be committed" in caplog.text
    assert read_elsewhere(kv, b"b") is None  # LMDB has not got it
    kv.write(lambda txn: txn.put(b"c", txn.get(b"b") + b"3"))  # the disk has room again: b first, then c
    assert read_elsewhere(kv, b"b") == b"2"
    kv.close()
    assert records(tmp_path / "kv") == {b"a": b"1", b"b": b"2", b"c": b"23"}


def test_a_held_commit_that_cannot_be_applied_refuses_writes_and_the_next_open_applies_it(tmp_path, monkeypatch):
    kv = KV(tmp_path / "kv", map_size=1 << 20, sync=False)
    kv.write(lambda txn: txn.put(b"a", b"1"))

    class Refusing:
        def __init__(self, txn):
            self.txn = txn

        def commit(self):
            self.txn.abort()
            raise lmdb.DiskError("No space left on device")

        def __getattr__(self, name):
            return getattr(self.txn, name)

    with commits_deferred():
        kv.write(lambda txn: txn.put(b"b", b"2"))
        kv.sync()
        kv._held = Refusing(kv._held)
    env = kv.env

    class Full:  # every write transaction of the catch-up fails to commit, as on a disk still full
        def begin(self, write=False, **kw):
            txn = env.begin(write=write, **kw)
            return Refusing(txn) if write else txn

        def __getattr__(self, name):
            return getattr(env, name)

    monkeypatch.setattr(kv, "env", Full())
    with pytest.raises(StorageError, match="acknowledged write that LMDB refused"):
        kv.write(lambda txn: txn.put(b"c", b"3"))
    monkeypatch.setattr(kv, "env", env)
    kv._catch_up = lambda: (_ for _ in ()).throw(StorageError("still full"))  # close cannot apply it either
    kv.close()  # no checkpoint: the record stays in the log
    assert records(tmp_path / "kv") == {b"a": b"1", b"b": b"2"}


HELD_THEN_KILLED = SAY_READY + r"""
import os, signal
from pathlib import Path
from hoarddb.storage.kv import KV, commits_deferred

kv = KV(Path(sys.argv[1]), map_size=1 << 20, sync=False)
for i in range(20):
    with commits_deferred():
        kv.write(lambda txn: txn.put(b"k%02d" % i, b"v%d" % i))
        kv.sync()
        say("A %d" % i)
        if i == 19:
            os.kill(os.getpid(), signal.SIGKILL)  # acknowledged, not committed by LMDB
"""


def test_a_process_killed_after_a_held_writes_flush_and_before_its_commit_keeps_it(tmp_path):
    done = run_script("import sys\n" + HELD_THEN_KILLED, tmp_path / "kv")
    assert done.returncode == -9, done.stderr
    assert done.stdout.split("\n")[-2] == "A 19"
    assert records(tmp_path / "kv") == {b"k%02d" % i: b"v%d" % i for i in range(20)}


def test_a_log_flush_that_fails_refuses_later_writes_until_reopened(tmp_path, monkeypatch):
    """After a failed fdatasync the kernel may have dropped records without saying so again
    (a later flush would succeed): the environment refuses writes; the reopen recovers."""
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    kv.write(lambda txn: txn.put(b"a", b"1"))

    def failing(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("hoarddb.storage.wal._datasync", failing)
    with pytest.raises(StorageError, match="flushing its write-ahead log failed"):
        kv.write(lambda txn: txn.put(b"b", b"2"))
    monkeypatch.undo()
    with pytest.raises(StorageError, match="refused until the database is opened again"):
        kv.write(lambda txn: txn.put(b"c", b"3"))
    kv.close()  # no checkpoint: the next open replays what the log has
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    with kv.read() as txn:
        assert txn.get(b"a") == b"1" and txn.get(b"c") is None
    kv.close()


# -- LMDB's used size, read from its meta pages ------------------------------------------------


def test_the_used_size_read_from_the_meta_pages_is_lmdbs_after_every_kind_of_write(tmp_path):
    """KV._used reads LMDB's last page from the meta pages through a map of its own instead
    of asking env.info() (~7,000 instructions) before every write: it must be env.info()'s
    number after single writes, big values (overflow pages), deletes, groups, held commits,
    map growths, checkpoints and a reopen."""
    import random

    rng = random.Random(5)
    kv = KV(tmp_path / "kv", map_size=1 << 20)  # small: it grows several times
    assert kv._metas is not None
    psize = kv._psize

    def check():
        assert kv._used() == used_bytes(kv)
        assert kv._map_size == kv.env.info()["map_size"]

    check()
    for i in range(1500):
        choice = rng.random()
        if choice < 0.6:
            put(kv, rng.randrange(400), rng.choice([10, 500, 3 * psize]))
        elif choice < 0.8:
            kv.write(lambda txn: [txn.delete(b"k%08d" % rng.randrange(400)) for _ in range(3)])
        elif choice < 0.9:
            kv.begin_group()
            for _ in range(rng.randrange(1, 20)):
                put(kv, rng.randrange(400), rng.choice([10, 2 * psize]))
            kv.end_group()
        elif choice < 0.97:
            with commits_deferred():
                put(kv, rng.randrange(400), 700)
                kv.sync()
        else:
            kv.checkpoint()
        check()
    assert kv._map_size > 1 << 20
    kv.close()
    assert kv._metas is None
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    check()
    kv.close()


def test_without_its_meta_map_the_environment_asks_lmdb_and_still_grows(tmp_path, monkeypatch, caplog):
    """Where the used size read from the meta pages is not LMDB's at open (another layout),
    it is asked of env.info() before every write, as before."""
    from hoarddb.storage import kv_checkpoint

    monkeypatch.setattr(kv_checkpoint, "_META_USED", "<24xQQ{}xQQ")  # the wrong fields
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    assert kv._metas is None and "asked of env.info()" in caplog.text
    for i in range(2000):
        put(kv, i)
    assert kv._used() == used_bytes(kv) and kv.env.info()["map_size"] > 1 << 20
    kv.close()
    assert len(records(tmp_path / "kv")) == 2000


def test_a_checkpoint_that_finds_the_meta_map_wrong_drops_it(tmp_path, caplog):
    """Each checkpoint asks env.info() and compares: a map that disagreed would be dropped."""
    import struct

    kv = KV(tmp_path / "kv", map_size=1 << 20)
    put(kv, 1)
    assert kv._metas is not None
    kv._meta_used = struct.Struct("<24xQQ{}xQQ".format(kv._psize - 16))  # the wrong fields
    kv.checkpoint()
    assert kv._metas is None and "is not LMDB's" in caplog.text
    for i in range(2000):
        put(kv, i)
    assert kv._used() == used_bytes(kv) and kv.env.info()["map_size"] > 1 << 20
    kv.close()
