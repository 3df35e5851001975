"""The KV engine's data file kept written ahead of LMDB's pages: layout, reopening, a kill."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from hoarddb.storage import kv as kv_module
from hoarddb.storage.kv import KV, PREALLOC_MIN

from ..killing import kill_midway

SLOW = os.environ.get("HOARDDB_SLOW") == "1"


def used_bytes(kv: KV) -> int:
    return (kv.env.info()["last_pgno"] + 1) * kv.env.stat()["psize"]


def data_file(kv: KV) -> Path:
    return kv.path / "data.mdb"


def put(kv: KV, i: int, size: int = 1000) -> None:
    kv.write(lambda txn: txn.put(b"k%08d" % i, bytes([i % 251]) * size))


def records(path: Path) -> dict[bytes, bytes]:
    kv = KV(path, map_size=1 << 20)
    try:
        with kv.read() as txn:
            return dict(txn.cursor())
    finally:
        kv.close()


def test_the_data_file_is_written_ahead_with_zeros(tmp_path):
    kv = KV(tmp_path / "kv", map_size=64 << 20)
    put(kv, 0)
    size = data_file(kv).stat().st_size
    used = used_bytes(kv)
    assert size >= used + PREALLOC_MIN // 2
    with open(data_file(kv), "rb") as f:
        f.seek(used)
        ahead = f.read()
    assert ahead.count(0) == len(ahead) == size - used
    for i in range(1, 2000):  # about 2 MiB of data: the file stays ahead, in steps
        put(kv, i)
        # a commit may take a few pages past the check made at its start
        assert data_file(kv).stat().st_size - used_bytes(kv) >= PREALLOC_MIN // 2 - 4 * 4096
    kv.close()
    got = records(tmp_path / "kv")
    assert len(got) == 2000 and got[b"k%08d" % 1999] == bytes([1999 % 251]) * 1000


def test_an_environment_grown_ahead_reopens_with_every_record_even_with_a_smaller_map(tmp_path):
    kv = KV(tmp_path / "kv", map_size=2 << 20)  # the map doubles as it fills; the zeros follow it
    for i in range(5000):
        put(kv, i)
    assert kv.env.info()["map_size"] > 2 << 20
    assert data_file(kv).stat().st_size > used_bytes(kv)
    kv.close()
    kv = KV(tmp_path / "kv", map_size=1 << 20)  # smaller than the file: LMDB takes the used size
    with kv.read() as txn:
        assert sum(1 for _ in txn.cursor()) == 5000
    put(kv, 5000)
    kv.close()
    assert len(records(tmp_path / "kv")) == 5001


def test_zeros_never_run_past_the_map(tmp_path):
    kv = KV(tmp_path / "kv", map_size=1 << 20)
    put(kv, 0)
    assert data_file(kv).stat().st_size <= kv.env.info()["map_size"]
    kv.close()


def test_a_copy_holds_the_used_pages_only(tmp_path):
    kv = KV(tmp_path / "kv", map_size=64 << 20)
    for i in range(100):
        put(kv, i)
    (tmp_path / "copy").mkdir()
    kv.env.copy(str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "data.mdb").stat().st_size <= used_bytes(kv)
    kv.close()
    assert len(records(tmp_path / "copy")) == 100


def test_a_group_of_writes_keeps_the_file_ahead_too(tmp_path):
    kv = KV(tmp_path / "kv", map_size=64 << 20)
    kv.begin_group()
    for i in range(50):
        put(kv, i)
    kv.end_group()
    assert data_file(kv).stat().st_size >= used_bytes(kv) + PREALLOC_MIN // 2
    kv.close()
    assert len(records(tmp_path / "kv")) == 50


def test_a_fill_the_disk_refuses_is_taken_back_and_the_write_goes_on(tmp_path, monkeypatch, caplog):
    kv = KV(tmp_path / "kv", map_size=64 << 20)
    size = data_file(kv).stat().st_size
    real_pwrite = os.pwrite

    def full(fd, data, offset):
        if fd == kv._data_fd:
            real_pwrite(fd, bytes(4096), offset)  # some zeros land, then the disk is full
            raise OSError(28, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(kv_module.os, "pwrite", full)
    put(kv, 0)
    assert "could not write" in caplog.text
    monkeypatch.setattr(kv_module.os, "pwrite", real_pwrite)
    put(kv, 1)  # no new try until the data grew by half a step
    assert data_file(kv).stat().st_size == used_bytes(kv) > size  # LMDB appended, as without zeros
    kv.close()
    assert len(records(tmp_path / "kv")) == 2


#: A child writing one record per durable commit until it is killed; "A i" once commit i returned.
WRITER = r"""
import random, sys
from pathlib import Path
from hoarddb.storage.kv import KV

path, start, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
kv = KV(path, map_size=4 << 20)  # small, so the map grows while the zeros run ahead
print("ready", flush=True)
i = start
while True:
    n = rng.choice([1, 1, 1, 40])  # now and then a commit of 40 records, more than a few pages
    keys = list(range(i, i + n))
    kv.write(lambda txn: [txn.put(b"k%08d" % j, bytes([j % 251]) * rng.randrange(100, 3000)) for j in keys])
    print("A", keys[-1], flush=True)
    i += n
"""


@pytest.mark.parametrize("rounds", [6 if not SLOW else 60])
def test_a_killed_writer_loses_no_acknowledged_commit(tmp_path, rounds):
    path = tmp_path / "kv"
    rng = random.Random(3)
    acked = -1
    for round_ in range(rounds):
        said = kill_midway(WRITER, [path, acked + 1, rng.randrange(2**32)], tmp_path / f"round{round_}.out",
                           rng.uniform(0.05, 0.4))
        lines = [line.split() for line in said]
        if lines:
            acked = int(lines[-1][1])
        got = records(path)
        # Every acknowledged commit is there; the one in flight may be too (then it counts).
        keys = sorted(got)
        assert keys[:acked + 1] == [b"k%08d" % j for j in range(acked + 1)], f"round {round_}"
        acked = len(keys) - 1
        assert all(v == bytes([int(k[1:]) % 251]) * len(v) for k, v in got.items())
    assert acked > 200, "the child wrote too little to test anything"
