"""Flushing many segment logs at once (hoarddb/storage/segment_flush.py): what reaches the disk, and how many fdatasyncs it costs."""

from __future__ import annotations

import os
import random
from collections import deque
from pathlib import Path

import pytest

import hoarddb
from hoarddb.storage import segment_flush, segment_format
from hoarddb.storage.segment import SegmentLog
from hoarddb.values.codec import decode, encode

trusted = pytest.mark.skipif(
    not segment_flush.overwrites_flush_once(Path(os.environ.get("TMPDIR", "/tmp"))),
    reason="the temporary directory is not on ext4 or XFS: every file gets its own fdatasync there")


def payload(i: int, pad: int = 40) -> bytes:
    return encode({"i": i, "pad": "x" * pad})


def ids(payloads: list[bytes]) -> list[int]:
    return [decode(p)["i"] for p in payloads]


class Syncs:
    """Every fdatasync and write-back of the logs' files, by path (the real calls are made)."""

    def __init__(self, monkeypatch):
        self.datasyncs: list[str] = []
        self.write_backs: list[str] = []
        real_sync, real_back = segment_format.datasync, segment_flush._write_back

        def datasync(fd: int) -> None:
            self.datasyncs.append(os.readlink(f"/proc/self/fd/{fd}"))
            self.synced(fd)
            real_sync(fd)

        def write_back(fd: int, flags: int) -> None:
            self.write_backs.append(os.readlink(f"/proc/self/fd/{fd}"))
            real_back(fd, flags)
            if flags & 4:  # WAIT_AFTER: the device has the pages
                self.written_back(fd)

        monkeypatch.setattr(segment_format, "datasync", datasync)
        monkeypatch.setattr(segment_flush, "_write_back", write_back)

    def synced(self, fd: int) -> None:
        """Called after each fdatasync is counted (Disk, below, makes the file's pages durable then)."""

    def written_back(self, fd: int) -> None:
        """Called after a write-back that waited for the device (Disk, below, notes the pages as on the device)."""

    def clear(self) -> None:
        self.datasyncs.clear()
        self.write_backs.clear()


def logs_in(directory: Path, n: int, suffix: str = "fifo", size: int = 1 << 20) -> list[SegmentLog]:
    out = []
    for i in range(n):
        (directory / f"q{i}").mkdir(parents=True)
        out.append(SegmentLog(directory / f"q{i}", suffix, size, sync=False))
    return out


@trusted
def test_a_group_over_eight_logs_overwriting_their_zeros_costs_one_fdatasync_a_round(tmp_path, monkeypatch):
    syncs = Syncs(monkeypatch)
    logs = logs_in(tmp_path, 8)
    try:
        for log in logs:
            log.append([payload(0)])
        segment_flush.flush(logs)  # the first flush after an open: every file its own fdatasync
        assert len(syncs.datasyncs) >= 8
        syncs.clear()

        for log in logs:
            log.append([payload(1), payload(2)])  # over the zeros the first append left
        segment_flush.flush(logs)
        assert len(syncs.datasyncs) == 1, syncs.datasyncs

        for log in logs:
            assert ids(log.take_head(1, durable=False)) == [0]
        segment_flush.flush(logs)  # the state files: each was fdatasynced once already
        syncs.clear()
        for log in logs:
            log.take_head(1, durable=False)
            log.append([payload(3)])
        segment_flush.flush(logs)  # segments, then states: one each
        assert len(syncs.datasyncs) == 2, syncs.datasyncs
        assert syncs.datasyncs[0].endswith(".fifo") and syncs.datasyncs[1].endswith("state.bson")
    finally:
        for log in logs:
            log.close()


@trusted
def test_a_file_grown_truncated_or_created_since_its_last_flush_gets_its_own_fdatasync(tmp_path, monkeypatch):
    syncs = Syncs(monkeypatch)
    fifo, = logs_in(tmp_path / "f", 1)
    stack, = logs_in(tmp_path / "l", 1, "lifo")
    both = [fifo, stack]
    try:
        fifo.append([payload(0)])
        stack.append([payload(0), payload(1)])
        segment_flush.flush(both)
        syncs.clear()

        fifo.append([payload(1, 40_000)])  # past its preallocated zeros: the file grows
        segment_flush.flush(both)
        assert [p for p in syncs.datasyncs if p.endswith(".fifo")] == [str(tmp_path / "f/q0/seg_00001.fifo")]
        syncs.clear()

        stack.take_tail(1)  # a truncation ...
        stack.append([payload(2)])  # ... and the file back to the size it had
        segment_flush.flush(both)
        assert str(tmp_path / "l/q0/seg_00001.lifo") in syncs.datasyncs
        syncs.clear()

        segment_flush.flush(both)  # nothing written: nothing synced
        assert syncs.datasyncs == []
    finally:
        fifo.close()
        stack.close()


def test_on_a_file_system_it_does_not_trust_every_file_gets_its_own_fdatasync(monkeypatch):
    shm = Path("/dev/shm")
    if not shm.is_dir() or segment_flush.overwrites_flush_once(shm):
        pytest.skip("no tmpfs at /dev/shm")
    import tempfile
    syncs = Syncs(monkeypatch)
    with tempfile.TemporaryDirectory(dir=shm) as d:
        logs = logs_in(Path(d), 4)
        try:
            for log in logs:
                log.append([payload(0)])
            segment_flush.flush(logs)
            syncs.clear()
            for log in logs:
                log.append([payload(1)])
            segment_flush.flush(logs)
            assert len(syncs.datasyncs) == 4 and not syncs.write_backs
        finally:
            for log in logs:
                log.close()


class Disk(Syncs):
    """A disk with a volatile write cache, as little of it as the calls made promise: pages the
    device has (written back, or fdatasynced) become durable at the next fdatasync of any file
    (a device flush); a file's size only at an fdatasync of that file."""

    def __init__(self, monkeypatch):
        super().__init__(monkeypatch)
        self.device: dict[str, bytes] = {}  # what the device has of each file, in its cache
        self.durable: dict[str, bytes] = {}
        self.size: dict[str, int] = {}

    def _read(self, fd: int) -> tuple[str, bytes]:
        path = os.readlink(f"/proc/self/fd/{fd}")
        return path, os.pread(fd, os.fstat(fd).st_size, 0)

    def written_back(self, fd: int) -> None:
        path, data = self._read(fd)
        self.device[path] = data

    def synced(self, fd: int) -> None:
        path, data = self._read(fd)
        self.device[path] = data
        self.size[path] = len(data)
        self.durable.update(self.device)

    def power_cut(self, directory: Path) -> None:
        """Put every file under ``directory`` back as the disk holds it."""
        for path in directory.rglob("*"):
            if path.is_dir():
                continue
            if str(path) not in self.size:
                path.unlink()  # never made durable
                continue
            size = self.size[str(path)]
            path.write_bytes(self.durable[str(path)][:size].ljust(size, b"\0"))


@trusted
@pytest.mark.parametrize("seed", range(4))
def test_a_power_cut_after_group_flushes_keeps_every_flushed_push_and_pop(tmp_path, monkeypatch, seed):
    """Groups of pushes and pops over six logs (fifos and lifos, small segments so that files are
    created, grown, trimmed and unlinked), each group flushed together; then the power goes, and
    the files are as the disk holds them: every log opens with exactly what was flushed."""
    rnd = random.Random(seed)
    disk = Disk(monkeypatch)
    kinds = ["fifo", "fifo", "fifo", "fifo", "lifo", "lifo"]
    logs = []
    for i, kind in enumerate(kinds):
        (tmp_path / f"q{i}").mkdir()
        logs.append(SegmentLog(tmp_path / f"q{i}", kind, 64 * 1024, sync=False))
    models = [deque() for _ in logs]
    n = 0
    for _group in range(rnd.randrange(30, 60)):
        for log, model, kind in zip(logs, models, kinds):
            if rnd.random() < 0.3:
                continue
            if rnd.random() < 0.6 or not model:
                batch = [payload(n + j, rnd.choice([10, 300, 3000, 20_000])) for j in range(rnd.randrange(1, 4))]
                n += len(batch)
                log.append(batch)
                model.extend(decode(b)["i"] for b in batch)
            else:
                k = rnd.randrange(1, 3)
                if kind == "fifo":
                    got = ids(log.take_head(k, durable=False))
                    expected = [model.popleft() for _ in range(min(k, len(model)))]
                else:
                    got = ids(log.take_tail(k))
                    expected = [model.pop() for _ in range(min(k, len(model)))]
                assert got == expected
        segment_flush.flush(logs)
    for log in logs:
        log._closed = True  # the process and its page cache are gone: no clean close
        log._close_files()
    disk.power_cut(tmp_path)
    for i, (kind, model) in enumerate(zip(kinds, models)):
        log = SegmentLog(tmp_path / f"q{i}", kind, 64 * 1024, sync=False)
        try:
            everything = ids(log.read_range(0, len(log) + 1))
            assert everything == list(model), (kind, i)
        finally:
            log.close()


@trusted
def test_an_engine_flushes_the_logs_of_a_group_together(tmp_path, monkeypatch):
    """Engine.sync (a server's group commit) makes the pushes into eight fifo buckets durable with
    one fdatasync, once each file's first flush is behind it."""
    from hoarddb.engine import Engine
    from hoarddb.options import Options

    syncs = Syncs(monkeypatch)
    engine = Engine(tmp_path / "data", Options(sync=False))
    client = hoarddb.Client(engine)
    try:
        for i in range(8):
            client["app"].create_bucket(f"Q{i}", type="fifo")
        for round_ in range(2):
            for i in range(8):
                client["app"][f"Q{i}"].push({"n": round_})
            syncs.clear()
            engine.sync()
        assert len(syncs.datasyncs) == 1 and len(syncs.write_backs) == 16, syncs.datasyncs
    finally:
        client.close()
    with hoarddb.open(tmp_path / "data") as c:
        assert [c["app"][f"Q{i}"].length() for i in range(8)] == [2] * 8
