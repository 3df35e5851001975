"""The write-ahead log in front of LMDB: its records, its headers, checkpoints, and what
an environment holds after a killed process or a (simulated) power cut."""

from __future__ import annotations

import os
import random
from pathlib import Path

import hypothesis.strategies as st
import lmdb
import pytest
from hypothesis import given, settings

from hoarddb.errors import StorageError
from hoarddb.storage import kv as kv_module
from hoarddb.storage.kv import KV, commits_deferred
from hoarddb.storage.wal import DELETE, PUT, WriteAheadLog, decode_ops, encode_ops, record_exceeds

from ..killing import kill_midway

SLOW = os.environ.get("HOARDDB_SLOW") == "1"
PSIZE = 4096


def contents(path: Path, map_size: int = 1 << 20) -> dict[bytes, bytes]:
    kv = KV(path, map_size=map_size)
    try:
        with kv.read() as txn:
            return dict(txn.cursor())
    finally:
        kv.close()


def crash(kv: KV) -> None:
    """Leave ``kv`` as a killed process would: no checkpoint, no clean-close header.
    (A checkpoint flushing in the background is let finish first: the environment is
    closed under it. Child processes killed with SIGKILL cover that moment.)"""
    if kv._inflight is not None:
        kv._inflight.result()
    kv._pin.abort()
    kv.env.close()
    kv.wal.close()
    os.close(kv._data_fd)
    kv._data_fd = None


# -- the format ---------------------------------------------------------------------------


def test_ops_encode_and_decode_back():
    ops = [(PUT, b"k1", b"v" * 300), (DELETE, b"k2"), (PUT, b"", b""), (PUT, b"\x00" * 511, b"x")]
    got = [(op[0], op[1], bytes(op[2])) if op[0] == PUT else op for op in decode_ops(memoryview(encode_ops(ops)))]
    assert got == ops


def new_log(directory: Path, metas: bytes = bytes(2 * PSIZE)) -> WriteAheadLog:
    """A log whose first generation has begun from ``metas``."""
    wal = WriteAheadLog(directory, PSIZE)
    wal.switch()
    wal.commit_generation(metas)
    return wal


def test_records_replay_in_order_and_stop_at_a_torn_one(tmp_path):
    wal = new_log(tmp_path)
    wal.append(encode_ops([(PUT, b"a", b"1")]))
    second = wal.append(encode_ops([(PUT, b"b", b"2"), (DELETE, b"a")]))
    wal.append(encode_ops([(PUT, b"c", b"3")]))
    wal.flush()
    with open(tmp_path / "wal.1", "r+b") as f:  # a crash tore the last record
        f.seek(wal.end - 2)
        f.write(b"\xff\xff")
    wal.close()
    again = WriteAheadLog.open_existing(tmp_path, PSIZE)
    assert [[op[:2] for op in ops] for ops in again.records()] == [[(PUT, b"a")], [(PUT, b"b"), (DELETE, b"a")]]
    assert again.end > second  # the next record goes where the torn one was
    again.close()


def test_a_new_generation_ignores_the_older_records_it_has_not_overwritten(tmp_path):
    wal = new_log(tmp_path)                      # generation 1, in wal.1
    for i in range(5):
        wal.append(encode_ops([(PUT, b"old%d" % i, b"x" * 10)]))
    wal.switch()
    wal.commit_generation(b"\x02" * 2 * PSIZE)  # generation 2, in wal.0
    wal.switch()
    wal.commit_generation(b"\x03" * 2 * PSIZE)  # generation 3, in wal.1 again
    wal.append(encode_ops([(PUT, b"new", b"y")]))  # shorter than what it overwrites: old bytes follow it
    wal.flush()
    wal.close()
    again = WriteAheadLog.open_existing(tmp_path, PSIZE)
    assert again.generation == 3 and again.metas == b"\x03" * 2 * PSIZE
    assert [[op[1] for op in ops] for ops in again.records()] == [[b"new"]]
    again.close()


def test_a_record_taken_back_leaves_no_body_a_replay_could_read_as_a_record(tmp_path):
    import struct
    import zlib

    wal = new_log(tmp_path)
    # a value crafted to look like a record of this generation, past where a shorter record ends
    forged_body = encode_ops([(PUT, b"forged", b"!")])
    forged = struct.pack("<II", len(forged_body), zlib.crc32(forged_body, zlib.crc32(struct.pack("<Q", wal.writing))))
    short = encode_ops([(PUT, b"k", b"v")])
    pad = len(short) + 8 - (len(encode_ops([(PUT, b"k", b"")])) + 8)  # the crafted bytes start where `short` ends
    failed = encode_ops([(PUT, b"k", b"\0" * pad + forged + forged_body)])
    at = wal.append(failed)
    wal.take_back(at)  # its commit failed
    wal.append(short)
    wal.flush()
    wal.close()
    again = WriteAheadLog.open_existing(tmp_path, PSIZE)
    assert [[op[1] for op in ops] for ops in again.records()] == [[b"k"]]
    again.close()


def test_a_checkpoint_that_did_not_finish_replays_both_generations(tmp_path):
    wal = new_log(tmp_path, b"\x01" * 2 * PSIZE)  # generation 1
    wal.append(encode_ops([(PUT, b"a", b"1")]))
    wal.switch()                                    # generation 2 begun, its header not written
    wal.append(encode_ops([(PUT, b"b", b"2")]))
    wal.flush()
    wal.close()
    again = WriteAheadLog.open_existing(tmp_path, PSIZE)
    assert again.generation == 1 and again.metas == b"\x01" * 2 * PSIZE
    assert [[op[1] for op in ops] for ops in again.records()] == [[b"a"], [b"b"]]
    again.close()


def test_a_torn_header_falls_back_to_the_previous_generation(tmp_path):
    wal = new_log(tmp_path, b"\x01" * 2 * PSIZE)  # generation 1, in wal.1
    wal.append(encode_ops([(PUT, b"a", b"1")]))
    wal.flush()
    wal.close()
    with open(tmp_path / "wal.0", "r+b") as f:  # generation 2's header, torn halfway through
        f.write(b"HDBWAL01" + (2).to_bytes(8, "little") + b"\x00" * 100)
    again = WriteAheadLog.open_existing(tmp_path, PSIZE)
    assert again.generation == 1 and again.metas == b"\x01" * 2 * PSIZE
    assert [[op[1] for op in ops] for ops in again.records()] == [[b"a"]]
    again.close()


def test_a_directory_without_a_whole_header_has_no_log(tmp_path):
    (tmp_path / "wal.0").write_bytes(b"HDBWAL01" + bytes(50))
    assert WriteAheadLog.open_existing(tmp_path, PSIZE) is None
    assert WriteAheadLog.open_existing(tmp_path / "nothing", PSIZE) is None


# -- the environment ------------------------------------------------------------------------


def test_a_clean_close_leaves_nothing_to_replay(tmp_path, caplog):
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    kv.write(lambda txn: txn.put(b"a", b"1"))
    kv.close()
    wal = WriteAheadLog.open_existing(tmp_path / "kv", PSIZE)
    assert wal.closed and list(wal.records()) == []
    wal.close()
    assert contents(tmp_path / "kv") == {b"a": b"1"}
    assert "replayed" not in caplog.text


def test_a_killed_process_is_replayed_from_the_log(tmp_path, caplog):
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    for i in range(50):
        kv.write(lambda txn: txn.put(b"k%02d" % i, b"v%d" % i))
    kv.write(lambda txn: txn.delete(b"k07"))
    kv.write(lambda txn: txn.replace(b"k08", b"new"))
    crash(kv)
    with caplog.at_level("INFO", logger="hoarddb.kv"):
        got = contents(tmp_path / "kv")
    assert "replayed 52 records" in caplog.text
    want = {b"k%02d" % i: b"v%d" % i for i in range(50) if i != 7}
    assert got == {**want, b"k08": b"new"}


def test_an_environment_edited_by_lmdb_itself_after_a_clean_close_is_taken_as_found(tmp_path):
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    kv.write(lambda txn: txn.put(b"a", b"1"))
    kv.close()
    env = lmdb.open(str(tmp_path / "kv"), map_size=1 << 20)  # mdb_load, a repair, a test
    with env.begin(write=True) as txn:
        txn.put(b"b", b"2")
    env.close()
    assert contents(tmp_path / "kv") == {b"a": b"1", b"b": b"2"}


def test_an_environment_without_a_log_opens_as_it_is_and_gets_one(tmp_path):
    env = lmdb.open(str(tmp_path / "kv"), map_size=1 << 20)  # as hoardDB before the log left it
    with env.begin(write=True) as txn:
        txn.put(b"a", b"1")
    env.close()
    assert contents(tmp_path / "kv") == {b"a": b"1"}
    assert (tmp_path / "kv" / "wal.0").exists() and (tmp_path / "kv" / "wal.1").exists()


def test_a_commit_that_fails_takes_its_record_back(tmp_path):
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    kv.write(lambda txn: txn.put(b"a", b"1"))
    real = kv.env

    class Failing:  # a write transaction whose commit fails, as on an I/O error
        def __init__(self, txn):
            self.txn = txn

        def commit(self):
            self.txn.abort()
            raise lmdb.DiskError("Input/output error")

        def __getattr__(self, name):
            return getattr(self.txn, name)

    class Env:
        def begin(self, **kw):
            txn = real.begin(**kw)
            return Failing(txn) if kw.get("write") else txn

        def __getattr__(self, name):
            return getattr(real, name)

    kv.env = Env()
    with pytest.raises(StorageError, match="writing .* failed"):
        kv.write(lambda txn: txn.put(b"b", b"2"))
    kv.env = real
    kv.write(lambda txn: txn.put(b"c", b"3"))
    crash(kv)
    assert contents(tmp_path / "kv") == {b"a": b"1", b"c": b"3"}


def test_a_big_transaction_is_checkpointed_instead_of_logged(tmp_path, monkeypatch):
    monkeypatch.setattr(kv_module, "BIG_OPS", 100)
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    generation = kv.wal.generation
    kv.write(lambda txn: [txn.put(b"k%04d" % i, b"v") for i in range(500)])
    assert kv.wal.generation == generation + 1 and kv.wal.end == kv.wal.records_at and kv._inflight is None
    kv.write(lambda txn: txn.put(b"small", b"v"))
    assert kv.wal.end > kv.wal.records_at
    crash(kv)
    got = contents(tmp_path / "kv")
    assert len(got) == 501 and got[b"small"] == b"v"


def test_checkpoints_come_as_the_pages_grow_and_the_file_stops_growing(tmp_path, monkeypatch):
    monkeypatch.setattr(kv_module, "CHECKPOINT_GROWTH", 512 << 10)
    kv = KV(tmp_path / "kv", map_size=64 << 20)
    generation = kv.wal.generation
    rng = random.Random(1)
    for i in range(3000):  # rewrites of 200 keys: LMDB reuses pages once the pin moves on
        kv.write(lambda txn: txn.put(b"k%03d" % rng.randrange(200), bytes(rng.randrange(50, 500))))
    assert kv.wal.generation > generation + 3
    used = kv._used()
    for i in range(3000):
        kv.write(lambda txn: txn.put(b"k%03d" % rng.randrange(200), bytes(rng.randrange(50, 500))))
        if i % 100 == 0 and kv._inflight is not None:
            kv._inflight.result()  # (a loaded machine's background flush may lag; the growth is what is tested)
    assert kv._used() < used * 1.5
    kv.close()


# -- crashes ----------------------------------------------------------------------------------


class Recorder:
    """Keeps a copy of ``data.mdb`` as each checkpoint's flush left it: what a disk holds
    for sure (pages written since may be there too, or not)."""

    def __init__(self, monkeypatch):
        self.image = b""
        real = KV._seal

        def seal(kv, metas, closed=False):
            real(kv, metas, closed)
            self.image = (kv.path / "data.mdb").read_bytes()

        monkeypatch.setattr(KV, "_seal", seal)


def power_cut(path: Path, durable: bytes, rng: random.Random) -> None:
    """What a power cut may leave of ``data.mdb``: each page as the last checkpoint had it,
    or as the process last wrote it (the kernel wrote back some pages and not others)."""
    data = path / "data.mdb"
    now = data.read_bytes()
    pages = []
    for at in range(0, len(now), PSIZE):
        old = durable[at:at + PSIZE].ljust(PSIZE, b"\x00")
        pages.append(now[at:at + PSIZE] if rng.random() < 0.5 else old[:len(now[at:at + PSIZE])])
    data.write_bytes(b"".join(pages))


def random_writes(kv: KV, rng: random.Random, n: int, model: dict, history: list | None = None) -> None:
    for _ in range(n):
        roll = rng.random()
        if roll < 0.6 or not model:
            ops = [(b"k%05d" % rng.randrange(3000), bytes([rng.randrange(256)]) * rng.randrange(1, 2500))]
        elif roll < 0.8:
            ops = [(rng.choice(list(model)), None)]
        else:  # a transaction of many
            ops = [(b"k%05d" % rng.randrange(3000), bytes([rng.randrange(256)]) * rng.randrange(1, 300))
                   for _ in range(rng.randrange(2, 60))]

        def fn(txn):
            for key, value in ops:
                if value is None:
                    txn.delete(key)
                else:
                    txn.put(key, value)
        kv.write(fn)
        for key, value in ops:
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
        if history is not None:
            history.append(dict(model))


@pytest.mark.parametrize("seed", range(12 if not SLOW else 200))
def test_a_power_cut_keeps_every_acknowledged_write(tmp_path, monkeypatch, seed):
    """Durable writes, checkpoints now and then, the map growing; then each page of
    ``data.mdb`` as the last checkpoint left it or as the process last wrote it."""
    rng = random.Random(seed)
    monkeypatch.setattr(kv_module, "CHECKPOINT_GROWTH", rng.choice([128 << 10, 1 << 20, 64 << 20]))
    recorder = Recorder(monkeypatch)
    path, model = tmp_path / "kv", {}
    for _round in range(3):
        kv = KV(path, map_size=256 << 10)  # small: the map doubles during the run
        random_writes(kv, rng, rng.randrange(50, 400), model)
        crash(kv)  # (lets a checkpoint in flight finish: its copy is then the one that counts)
        power_cut(path, recorder.image, rng)
        assert contents(path) == model, f"seed {seed}, round {_round}"


@pytest.mark.parametrize("seed", range(6 if not SLOW else 100))
def test_a_power_cut_keeps_every_write_acknowledged_before_its_held_commit(tmp_path, monkeypatch, seed):
    """As a server writes for one client: each write's LMDB commit held back
    (commits_deferred) until its record is flushed and it is acknowledged; the last one
    cut off between its flush and its commit; then a power cut."""
    rng = random.Random(seed)
    monkeypatch.setattr(kv_module, "CHECKPOINT_GROWTH", rng.choice([128 << 10, 1 << 20, 64 << 20]))
    recorder = Recorder(monkeypatch)
    path, model = tmp_path / "kv", {}
    kv = KV(path, map_size=256 << 10, sync=False)  # small: the map doubles during the run
    for _ in range(rng.randrange(50, 300)):
        with commits_deferred():
            random_writes(kv, rng, 1, model)
            kv.sync()  # acknowledged here, committed at the block's end
    with commits_deferred():
        random_writes(kv, rng, 1, model)
        kv.sync()
        assert kv._held is not None
        kv._held.abort()  # the process dies before LMDB commits
        kv._held = None
        crash(kv)
    kv._commit_lock.release()
    power_cut(path, recorder.image, rng)
    assert contents(path) == model, f"seed {seed}"


@pytest.mark.parametrize("seed", range(6 if not SLOW else 100))
def test_a_power_cut_with_sync_off_leaves_some_earlier_state_whole(tmp_path, monkeypatch, seed):
    """With ``sync=False`` nothing since the last checkpoint is sure to be on disk: the log
    keeps some prefix of its records. What opens must be the state after some write."""
    rng = random.Random(seed)
    monkeypatch.setattr(kv_module, "CHECKPOINT_GROWTH", rng.choice([128 << 10, 1 << 20]))
    recorder = Recorder(monkeypatch)
    path, model, history = tmp_path / "kv", {}, [{}]
    kv = KV(path, map_size=256 << 10, sync=False)
    random_writes(kv, rng, rng.randrange(100, 400), model, history)
    if kv._inflight is not None:
        kv._inflight.result()
    durable, records_at, end, fd = recorder.image, kv.wal.records_at, kv.wal.end, kv.wal.writing % 2
    crash(kv)
    power_cut(path, durable, rng)
    cut = rng.randrange(records_at, end + 1)  # the log's pages reached the disk up to here
    with open(path / f"wal.{fd}", "r+b") as f:
        f.seek(cut)
        f.write(bytes(end - cut))
    got = contents(path)
    assert got in history, f"seed {seed}"


WRITER = r"""
import random, sys
from pathlib import Path
from hoarddb.errors import StorageError
from hoarddb.storage import kv as kv_module
from hoarddb.storage.kv import KV

path, start, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
kv_module.CHECKPOINT_GROWTH = 256 << 10  # checkpoints often, so kills land in them too
rng = random.Random(seed)
kv = KV(path, map_size=256 << 10)
print("ready", flush=True)
i = start
while True:
    n = rng.choice([1, 1, 1, 30])
    keys = list(range(i, i + n))
    kv.write(lambda txn: [txn.put(b"k%08d" % j, bytes([j % 251]) * rng.randrange(10, 2000)) for j in keys])
    print("A", keys[-1], flush=True)
    i += n
"""


@pytest.mark.parametrize("rounds", [5 if not SLOW else 50])
def test_a_writer_killed_at_any_moment_loses_no_acknowledged_commit(tmp_path, rounds):
    path = tmp_path / "kv"
    rng = random.Random(8)
    acked = -1
    for round_ in range(rounds):
        said = kill_midway(WRITER, [path, acked + 1, rng.randrange(2**32)], tmp_path / f"round{round_}.out",
                           rng.uniform(0.05, 0.4))
        lines = [line.split() for line in said]
        if lines:
            acked = int(lines[-1][1])
        got = contents(path)
        # Every acknowledged commit is there; the one in flight may be too (then it counts).
        keys = sorted(got)
        assert keys[:acked + 1] == [b"k%08d" % j for j in range(acked + 1)], f"round {round_}"
        assert all(v == bytes([int(k[1:]) % 251]) * len(v) for k, v in got.items())
        acked = len(keys) - 1
    assert acked > 200, "the child wrote too little to test anything"


def test_no_store_writes_through_a_cursor_or_around_the_log():
    """A write through a cursor reaches LMDB and not the log (lost after a crash); so does
    anything the transaction has besides get, cursor, put, replace, delete and pop."""
    import re

    package = Path(kv_module.__file__).resolve().parents[1]
    offenders = []
    for source in package.rglob("*.py"):
        for n, line in enumerate(source.read_text().splitlines(), 1):
            if re.search(r"\b(cursor|c|cur)\.(put|delete|replace|pop|putmulti)\(", line) or \
                    re.search(r"\btxn\.(drop|putmulti)\(", line):
                offenders.append(f"{source.relative_to(package)}:{n}: {line.strip()}")
    assert offenders == []


def test_a_logged_transaction_refuses_what_the_log_cannot_record(tmp_path):
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    with pytest.raises(AttributeError, match="has no 'drop'"):
        kv.write(lambda txn: txn.drop(None))
    kv.close()


@settings(max_examples=200)
@given(st.lists(st.one_of(st.tuples(st.just(PUT), st.binary(max_size=40), st.binary(max_size=300)),
                          st.tuples(st.just(DELETE), st.binary(max_size=40))), max_size=40),
       st.integers(0, 6000))
def test_a_records_size_is_known_without_encoding_it(ops, limit):
    assert record_exceeds(ops, limit) == (len(encode_ops(ops)) > limit)


def test_a_big_synced_transaction_is_checkpointed_without_being_encoded(tmp_path, monkeypatch):
    # A 1,000-document batch spent 4 of its 25 ms encoding a record that was then not written.
    monkeypatch.setattr(kv_module, "BIG_RECORD", 10_000)
    encoded = []
    monkeypatch.setattr(kv_module, "encode_ops", lambda ops: encoded.append(len(ops)) or encode_ops(ops))
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    generation = kv.wal.generation
    kv.write(lambda txn: [txn.put(b"k%04d" % i, b"v" * 100) for i in range(200)])  # ~23 KB of record
    assert encoded == [] and kv.wal.generation == generation + 1 and kv.wal.end == kv.wal.records_at
    kv.write(lambda txn: [txn.put(b"s%04d" % i, b"v" * 10) for i in range(100)])  # ~2.3 KB: logged
    assert encoded == [100] and kv.wal.end > kv.wal.records_at
    crash(kv)
    got = contents(tmp_path / "kv")
    assert len(got) == 300 and got[b"k0199"] == b"v" * 100 and got[b"s0099"] == b"v" * 10


def test_an_unsynced_big_transaction_is_logged_not_checkpointed(tmp_path, monkeypatch):
    monkeypatch.setattr(kv_module, "BIG_RECORD", 1000)
    kv = KV(tmp_path / "kv", map_size=1 << 20, sync=False)
    generation = kv.wal.generation
    kv.write(lambda txn: [txn.put(b"k%04d" % i, b"v" * 100) for i in range(50)])
    assert kv.wal.generation == generation and kv.wal.end > kv.wal.records_at + 5000
    kv.close()


def test_a_flush_returns_only_once_the_fdatasync_covering_its_records_is_done(tmp_path, monkeypatch):
    """Two writers flush at once: the second finds nothing left to flush (the first took it)
    and must still wait for the first one's fdatasync, which its record depends on."""
    import threading
    import time

    from hoarddb.storage import wal as wal_module

    wal = new_log(tmp_path)
    wal.append(encode_ops([(PUT, b"a", b"1")]))
    wal.append(encode_ops([(PUT, b"b", b"2")]))  # the second writer's record, before any flush
    started, finished = threading.Event(), threading.Event()
    real = wal_module._datasync

    def slow(fd):
        started.set()
        time.sleep(0.3)
        real(fd)
        finished.set()

    monkeypatch.setattr(wal_module, "_datasync", slow)
    first = threading.Thread(target=wal.flush)
    first.start()
    assert started.wait(5)
    wal.flush()
    assert finished.is_set(), "a flush returned while the fdatasync its record needs was running"
    first.join(5)
    wal.close()


# -- a crash during a checkpoint, then more writes and another crash ---------------------------


def test_records_of_a_checkpoint_in_flight_are_not_replayed_again_after_newer_writes(tmp_path):
    """A crash while a checkpoint was in flight leaves records of the next generation; the
    recovery replays them. The writes after it must not line up with those records and
    replay them once more after a second crash (they rewound the counter to 19)."""
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    for i in range(5):
        kv.write(lambda txn: txn.put(b"counter", b"%08d" % i))
    kv.wal.switch()  # a checkpoint's first step: the next generation's records begin ...
    for i in range(5, 20):
        kv.write(lambda txn: txn.put(b"counter", b"%08d" % i))
    crash(kv)        # ... and its header never came
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    with kv.read() as txn:
        assert txn.get(b"counter") == b"00000019"
    for i in range(20, 23):  # records of the same size as the ones before the crash
        kv.write(lambda txn: txn.put(b"counter", b"%08d" % i))
    crash(kv)
    assert contents(tmp_path / "kv") == {b"counter": b"00000022"}


COUNTER = r"""
import sys, time
from pathlib import Path
from hoarddb.storage import kv as kv_module
from hoarddb.storage.kv import KV

path, start, stall = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
kv_module.CHECKPOINT_COMMITS = 50
kv = KV(path, map_size=1 << 20)
if stall:  # the checkpoint thread busy (another bucket's big flush): the next checkpoint stays in flight
    kv_module._CHECKPOINTS.submit(time.sleep, 60)
print("ready", flush=True)
i = start
while True:
    kv.write(lambda txn: (txn.put(b"counter", b"%012d" % i), txn.delete(b"gone%012d" % (i - 1)),
                          txn.put(b"gone%012d" % i, b"x")))
    print(i, flush=True)
    i += 1
"""


@pytest.mark.parametrize("seed", range(2 if not SLOW else 20))
def test_a_writer_killed_during_a_checkpoint_then_again_keeps_its_last_writes(tmp_path, seed):
    """Real SIGKILLs: one while a checkpoint is in flight (records of two generations), then
    one shortly after the child that reopened it began writing (records of the same size
    as those), with no clean open in between. The counter is then the last acknowledged
    value, or the one in flight."""
    path, rng = tmp_path / "kv", random.Random(seed)
    acked = -1
    for pair in range(3):
        for stall in (True, False):
            said = kill_midway(COUNTER, [path, acked + 1, int(stall)], tmp_path / f"{pair}{stall}.out",
                               rng.uniform(0.3, 0.5) if stall else rng.uniform(0.0, 0.01))
            if said:
                acked = int(said[-1])
        got = contents(path)  # (opens and closes cleanly: checked after each pair only)
        counter = int(got[b"counter"])
        assert counter in (acked, acked + 1), f"pair {pair}: counter {counter}, acknowledged {acked}"
        assert [k for k in got if k != b"counter"] == [b"gone%012d" % counter], f"pair {pair}"
        acked = counter
