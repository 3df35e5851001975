"""The write-ahead log of one LMDB environment: each commit's puts and deletes, flushed once
per durable commit, and replayed onto the last checkpoint when the environment opens.

Why it exists: LMDB makes a commit durable with two flushes (its new pages, then the meta
page that points to them), and its one-flush mode, ``MDB_NOSYNC``, can be left corrupt by
a power cut. So LMDB runs with ``MDB_NOSYNC`` and this log is what makes a commit durable:
one append and one ``fdatasync`` of a file that is overwritten in place. Every so often a
*checkpoint* (:meth:`KV.checkpoint`) flushes LMDB's file and starts the log over.

What keeps LMDB's file recoverable between checkpoints, whatever a power cut lets reach the
disk: the log's header holds a copy of LMDB's two meta pages as they were at the
checkpoint, and until the next checkpoint a read transaction pinned on that snapshot keeps
LMDB from reusing any page the snapshot references (LMDB never overwrites a page a reader
can see). Opening after a crash writes those meta pages back — LMDB then sees exactly the
checkpoint's tree, every page of which was flushed and left alone since — and applies the
log's records in order.

On disk, ``kv/wal.0`` and ``kv/wal.1`` (generation g lives in ``wal.<g % 2>``)::

    0            HEADER                                                     file size
    +------------+--------------------------------+----------------------------+
    | header     | record | record | ... | record | older records, or zeros    |
    +------------+--------------------------------+----------------------------+

    header (HEADER = 64 + 2 * psize bytes):
        b"HDBWAL01" | generation u64 | psize u32 | flags u32 (1: closed cleanly)
        | crc32 u32 of everything else | pad to 64
        | LMDB's meta page 0 | meta page 1        (as they were when this generation began)
    record:
        length u32 | crc32 u32 of (generation u64 + body) | body (length bytes)
        body: op u8 (1 put, 2 delete) | key length u32 | key | [value length u32 | value] ...

Both files are made a header's length of zeros when the log is created, so that a
header write never grows a file (a checkpoint needs no room on a full disk), and each is
kept zeros past its last record when the disk has room: as many bytes as its records take,
from :data:`FILL_MIN` up to :data:`FILL`.

A checkpoint switches appends to the other file first (records of the next generation),
flushes LMDB's file meanwhile in the background, and only then writes the other file's
header: until that header is whole, a recovery starts from the older one and replays the
older generation's records and then the newer's. A generation writes its file from the
start again; a record's crc covers its generation, so what is left of an older
generation's records past the newest one fails its check and ends the replay, as does a
record torn by a crash. All numbers are little-endian.

What a crash leaves: a record is appended (``os.pwrite``) before LMDB commits its
transaction, and flushed before the write is acknowledged (with ``sync`` off, at
:meth:`WriteAheadLog.flush`, a checkpoint or close). A crash keeps a prefix of the
records: every acknowledged one, perhaps some after it, never a gap (the older file's
records are flushed before the first record goes to the newer one).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import Iterator

from .oserrors import FULL_ERRNOS, pwrite_all, storage_error

log = logging.getLogger("hoarddb.kv")

WAL_NAME = "wal"
MAGIC = b"HDBWAL01"
PUT, DELETE = 1, 2
_HEAD = struct.Struct("<8sQIII")       # magic, generation, psize, flags, crc
CLOSED = 1                             # flags: written by a clean close, nothing to recover
_RECORD = struct.Struct("<II")         # length, crc
_LEN = struct.Struct("<I")
_GEN = struct.Struct("<Q")
#: the log file is kept written ahead of its last record (zeros), so that an fdatasync
#: overwrites blocks the file has instead of growing it: as far as the records before it
#: reach (a small bucket's log stays small; a busy one's fill doubles), from FILL_MIN to FILL
FILL = 1 << 20
FILL_MIN = 64 * 1024
_ZEROS = bytes(FILL)
_datasync = getattr(os, "fdatasync", os.fsync)


#: The four bytes of each length below 512, made once: every key's (LMDB's keys are at most
#: 511 bytes) and most values' (an index entry's, a count's) are taken from here.
_LENGTHS = [_LEN.pack(n) for n in range(512)]


def encode_ops(ops: list) -> bytes:
    """A record's body: ``ops`` is a list of ``(PUT, key, value)`` and ``(DELETE, key)``."""
    parts = []
    pack, lengths = _LEN.pack, _LENGTHS
    for op in ops:
        key = op[1]
        n = len(key)
        if op[0] == PUT:
            value = op[2]
            m = len(value)
            parts += (b"\x01", lengths[n] if n < 512 else pack(n), key, lengths[m] if m < 512 else pack(m), value)
        else:
            parts += (b"\x02", lengths[n] if n < 512 else pack(n), key)
    return b"".join(parts)


def record_exceeds(ops: list, limit: int) -> bool:
    """Whether :func:`encode_ops` of ``ops`` would be longer than ``limit`` bytes, found
    without encoding them (and as soon as it is)."""
    size = 0
    for op in ops:
        size += 9 + len(op[1]) + len(op[2]) if op[0] == PUT else 5 + len(op[1])
        if size > limit:
            return True
    return False


def decode_ops(body: memoryview) -> Iterator[tuple]:
    """The ops of a record's body, as :func:`encode_ops` wrote them."""
    at, end = 0, len(body)
    unpack = _LEN.unpack_from
    while at < end:
        op = body[at]
        (n,) = unpack(body, at + 1)
        key = bytes(body[at + 5:at + 5 + n])
        at += 5 + n
        if op == PUT:
            (m,) = unpack(body, at)
            yield PUT, key, body[at + 4:at + 4 + m]
            at += 4 + m
        elif op == DELETE:
            yield DELETE, key
        else:
            raise ValueError(f"unknown op {op}")


class Recording:
    """A write transaction that remembers its puts and deletes (:attr:`ops`) for the log.

    It stands in for the ``lmdb.Transaction`` a store's write function is given: reads and
    cursors go straight to the transaction, and the writes are recorded when they change
    something. A cursor is for reading: a write through it (``cursor.put``,
    ``cursor.delete``) would reach LMDB and not the log, and be lost in a crash
    (tests/storage/test_wal.py checks that no store does). Anything else of the
    transaction is refused rather than passed through unlogged.
    """

    __slots__ = ("txn", "ops", "get", "cursor")

    def __init__(self, txn):
        self.txn = txn
        self.ops: list = []
        self.get = txn.get
        self.cursor = txn.cursor

    def put(self, key, value, dupdata=True, overwrite=True, append=False):
        done = self.txn.put(key, value, dupdata, overwrite, append)  # (by position: py-lmdb parses keywords slowly)
        if done:
            self.ops.append((PUT, key, value))
        return done

    def replace(self, key, value):
        old = self.txn.replace(key, value)
        self.ops.append((PUT, key, value))
        return old

    def delete(self, key, value=b""):
        gone = self.txn.delete(key, value)
        if gone:
            self.ops.append((DELETE, key))
        return gone

    def pop(self, key):
        old = self.txn.pop(key)
        if old is not None:
            self.ops.append((DELETE, key))
        return old

    def __getattr__(self, name):
        raise AttributeError(f"a logged write transaction has no {name!r} (only get, cursor, put, "
                             "replace, delete and pop: what the log can record)")


class WriteAheadLog:
    """WriteAheadLog is ``kv/wal.0`` and ``kv/wal.1``: a generation's header and records
    in one file, the next generation's in the other.

    :class:`~hoarddb.storage.kv.KV` appends and switches under its commit lock;
    :meth:`flush` may run on any thread (one at a time, see ``_flush_lock``), and
    :meth:`commit_generation` on the checkpoint thread while appends go on (to another part
    of the file).
    """

    def __init__(self, directory: Path, psize: int):
        self.directory = Path(directory)
        self.psize = psize
        self.header_size = self.records_at = 64 + 2 * psize  # the fields, padding, two meta pages
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        self.fds = [os.open(self.directory / f"{WAL_NAME}.{i}", flags, 0o644) for i in (0, 1)]
        self.generation = 0              # the newest header's (the recovery base)
        self.metas: bytes | None = None
        self.closed = False              # the newest header was written by a clean close
        self._write_generation(1)        # the generation records are appended to
        self.end = self.records_at       # where the next record goes, in that generation's file
        # How far the next generation is past the newest header's: 3 after a crash (see
        # read_header), so that records of generation + 1 left by the crash can never be
        # taken for the new generation's.
        self._step = 1
        self._unflushed: set[int] = set()  # files appended to since their last fdatasync
        # One flush at a time: a writer that finds nothing left to flush must not return
        # while another writer's fdatasync, which covers its record, is still running.
        self._flush_lock = threading.Lock()
        # How long each file is: records, then zeros up to here (the file never shrinks,
        # but an append taken back on a full disk cuts what it grew).
        self._filled = [os.fstat(fd).st_size for fd in self.fds]
        # Both files get a whole header's room at once, as zeros, so that a checkpoint's
        # header write (commit_generation) overwrites bytes the file has and can never
        # meet a full disk halfway through a checkpoint:
        #
        #     wal.N, new:  | 00 00 ... 00 (64 + 2 * psize bytes) |
        #
        # A zero header fails its magic and its crc, so it is "no header" to an opener. A
        # crash while writing these zeros leaves a shorter file of zeros: no header either.
        for i, fd in enumerate(self.fds):
            if self._filled[i] < self.header_size:
                try:
                    pwrite_all(fd, bytes(self.header_size - self._filled[i]), self._filled[i])
                except OSError as exc:
                    self.close()
                    raise storage_error(f"creating {self.directory / WAL_NAME}.{i}", exc,
                                        "the bucket was not opened") from None
                self._filled[i] = self.header_size

    def _write_generation(self, generation: int) -> None:
        """Append records as ``generation`` from now on (:attr:`writing`); their crc starts
        from the generation's number, computed here once rather than per record."""
        self.writing = generation
        self._seed = zlib.crc32(_GEN.pack(generation))

    @property
    def fd(self) -> int:
        """The file records are appended to."""
        return self.fds[self.writing % 2]

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open_existing(cls, directory: Path, psize: int) -> "WriteAheadLog | None":
        """The log in ``directory`` with its newest header loaded, or None if it has no whole one.

        The page size is the one a header says if one is readable, else ``psize``.
        """
        for i in (0, 1):
            try:
                with open(Path(directory) / f"{WAL_NAME}.{i}", "rb") as f:
                    head = f.read(_HEAD.size)
            except FileNotFoundError:
                continue
            if len(head) == _HEAD.size and head[:8] == MAGIC:
                psize = _HEAD.unpack(head)[2] or psize
                break
        else:
            return None
        wal = cls(directory, psize)
        if wal.read_header():
            return wal
        wal.close()
        return None

    def read_header(self) -> bool:
        """Load the newest whole header (generation and metas); False if there is none."""
        best = None
        for i, fd in enumerate(self.fds):
            raw = os.pread(fd, self.header_size, 0)
            if len(raw) < self.header_size:
                continue
            magic, gen, psize, flags, crc = _HEAD.unpack_from(raw)
            if magic != MAGIC or psize != self.psize or gen % 2 != i:
                continue
            if _crc_header(raw) != crc:
                continue
            if best is None or gen > best[0]:
                best = (gen, raw[64:64 + 2 * self.psize], bool(flags & CLOSED))
        if best is None:
            return False
        self.generation, self.metas, self.closed = best
        self._write_generation(self.generation)
        # A crash may have left records of the next generation (a checkpoint in flight):
        # they are replayed once, and must not be replayed again after newer writes. Were
        # the next generation numbered generation + 1 again, its records would overwrite
        # them from the start of that file, and a crash then would replay the new records
        # and, past them, the old ones (the same generation's crc), undoing the new writes.
        # So it skips to generation + 3: the same file as + 1, a number no record has.
        self._step = 1 if self.closed else 3
        return True

    def records(self) -> Iterator[list]:
        """Each whole record since the newest header, in order, as a list of ops: those of its
        generation, then those of the next (a checkpoint that had begun and not finished).

        Stops in each file at the first record that is missing, torn, or of another
        generation; appending goes on after the last record of the header's generation.
        """
        for gen in (self.generation, self.generation + 1):
            fd, at = self.fds[gen % 2], self.records_at
            size = os.fstat(fd).st_size
            seed = zlib.crc32(_GEN.pack(gen))
            while at + _RECORD.size <= size:
                length, crc = _RECORD.unpack(os.pread(fd, _RECORD.size, at))
                if length == 0 or at + _RECORD.size + length > size:
                    break
                body = os.pread(fd, length, at + _RECORD.size)
                if zlib.crc32(body, seed) != crc:
                    break
                try:
                    ops = list(decode_ops(memoryview(body)))
                except (ValueError, struct.error):
                    break
                at += _RECORD.size + length
                yield ops
            if gen == self.generation:
                self.end = at

    # -- writing -------------------------------------------------------------------------

    def switch(self) -> None:
        """Append from now on as the next generation, in the other file (a checkpoint's
        first step, holding the commit lock). Its header is written by
        :meth:`commit_generation` once LMDB's file is flushed; until then a recovery
        starts from this generation's header and replays both files. The records so far
        are flushed first, so that no record of the next generation can reach the disk
        before one of this generation (a replay must never skip a record)."""
        self.flush()  # every record of this generation durable before any of the next
        self._write_generation(self.generation + self._step)
        self.end = self.records_at

    def commit_generation(self, metas: bytes, closed: bool = False) -> None:
        """Write the header of the generation :meth:`switch` began, and flush its file:
        from now on a recovery starts from these meta pages (a checkpoint's last step).

        ``closed`` marks a clean close: the next open trusts LMDB's file as it finds it
        (it may have been edited meanwhile by LMDB's own tools) and restores nothing.
        """
        gen = self.writing
        body = struct.pack("<8sQII", MAGIC, gen, self.psize, CLOSED if closed else 0)
        tail = bytes(64 - _HEAD.size) + metas
        crc = zlib.crc32(tail, zlib.crc32(body))
        fd = self.fds[gen % 2]
        try:
            # Within the header's room, which every file has had since it was made (see
            # __init__): this overwrites, it never grows the file.
            pwrite_all(fd, body + _LEN.pack(crc) + tail, 0)
            _datasync(fd)
        except OSError as exc:
            raise storage_error(f"writing the header of {self.directory / WAL_NAME}.{gen % 2}", exc,
                                "a checkpoint did not finish") from None
        self.generation, self.metas, self.closed = gen, metas, closed
        self._step = 1

    def append(self, body: bytes) -> int:
        """Write one record (not flushed) of ``body`` (:func:`encode_ops`); returns the
        offset it went to, for :meth:`take_back`.

        A disk too full for the record raises StorageError and leaves nothing of it: the
        bytes that landed are zeroed (a zero length ends a replay) and what the file grew
        by is cut off again. A disk too full for the zeros ahead (:meth:`_fill`) is no
        error: the record then grows the file itself::

            before:         | header | r1 | r2 | 00 00 00 00 |          <- end of file
            a full disk:    | header | r1 | r2 | r3 (part)   |XX        (short write, ENOSPC)
            taken back:     | header | r1 | r2 | 00 00 00 00 |          (cut and zeroed)

        A crash in the middle leaves a torn r3, whose crc fails: the replay ends at r2,
        the same as after any torn record.
        """
        at = self.end
        n = len(body)
        record = _RECORD.pack(n, zlib.crc32(body, self._seed)) + body
        stop = at + _RECORD.size + n
        i = self.writing % 2
        size = self._filled[i]
        try:
            if stop > size:
                self._fill(i, stop)
                size = self._filled[i]
            if os.pwrite(self.fds[i], record, at) != stop - at:  # a short write: the rest, or ENOSPC
                pwrite_all(self.fds[i], record, at)
        except OSError as exc:
            self._unwrite(i, at, stop, size)
            raise storage_error(f"writing {self.directory / WAL_NAME}.{i}", exc) from None
        if stop > size:
            self._filled[i] = stop
        self.end = stop
        self._unflushed.add(i)
        return at

    def _unwrite(self, i: int, at: int, stop: int, size: int) -> None:
        """Take back a record that failed halfway: cut the file back to ``size`` (what it was
        before the record grew it) and zero what landed before that."""
        fd = self.fds[i]
        try:
            if stop > size:
                os.ftruncate(fd, max(size, at))
            if at < size:
                pwrite_all(fd, bytes(min(size, stop) - at), at)
        except OSError as exc:
            log.warning("%s: could not take back a record the disk refused (%s); a crash before the next "
                        "write would find a torn record there, which ends the replay", self.directory,
                        exc.strerror or exc)

    def take_back(self, at: int) -> None:
        """Forget the records from ``at`` on (their transaction did not commit).

        If even the zeroing fails (the disk is failing), the record stays until the next
        one overwrites it, and a crash before that would replay it: the failed write may
        then be there after recovery. Said in the log; the write was answered with an error.
        """
        try:
            # All of it zeroed, not just its length: a shorter record written here next would
            # otherwise leave the end of this one's body (user data) behind it, where a replay
            # reads on, and a body can be made to look like a record.
            os.pwrite(self.fd, bytes(max(self.end - at, _RECORD.size)), at)  # a zero length ends the replay
        except OSError as exc:
            log.warning("%s: could not take back the record of a failed commit (%s); a crash before "
                        "the next write would replay it", self.directory, exc.strerror or exc)
        self.end = at

    def flush(self) -> None:
        """Make every record appended so far durable (no fdatasync if nothing is new)."""
        with self._flush_lock:
            while self._unflushed:
                i = self._unflushed.pop()
                try:
                    _datasync(self.fds[i])
                except OSError as exc:
                    self._unflushed.add(i)
                    raise storage_error(f"flushing {self.directory / WAL_NAME}.{i}", exc,
                                        "the writes since the last flush are not known to be on disk") from None

    def unflushed(self) -> bool:
        """Whether records were appended since the last :meth:`flush`."""
        return bool(self._unflushed)

    def _fill(self, i: int, stop: int) -> None:
        """Write zeros from the file's end to past ``stop``: later flushes overwrite, not grow.

        Only a saving (an fdatasync that overwrites blocks commits no new size): on a disk
        too full for them, the zeros that landed are cut off again (they would only take
        the room the record needs) and the record grows the file itself::

            | header | records | 00 00 ... (up to FILL past the record) |   room for it
            | header | records |                                     a full disk: as it was

        A crash in the middle leaves zeros past the records, which read as the log's end.
        """
        fd = self.fds[i]
        target = stop + min(FILL, max(FILL_MIN, stop - self.header_size))
        start = offset = max(os.fstat(fd).st_size, self._filled[i])
        try:
            while offset < target:
                offset += os.pwrite(fd, memoryview(_ZEROS)[:min(FILL, target - offset)], offset)
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS:
                raise
            os.ftruncate(fd, start)
            self._filled[i] = start
            return
        self._filled[i] = target

    def close(self) -> None:
        for fd in self.fds:
            if fd >= 0:
                os.close(fd)
        self.fds = [-1, -1]


def newest_header(directory: Path) -> tuple[int, bool] | None:
    """``(generation, closed)`` of the newest whole header of the log in ``directory``, or
    None when neither file has one; reads only (:meth:`WriteAheadLog.open_existing` may
    create a missing file). A whole header says the environment was written: its
    ``data.mdb`` had been flushed with both meta pages before the header was written."""
    best = None
    for i in (0, 1):
        try:
            with open(Path(directory) / f"{WAL_NAME}.{i}", "rb") as f:
                head = f.read(_HEAD.size)
                if len(head) < _HEAD.size or head[:8] != MAGIC:
                    continue
                _magic, gen, psize, flags, crc = _HEAD.unpack(head)
                if not 256 <= psize <= 65536 or gen % 2 != i:
                    continue
                f.seek(0)
                raw = f.read(64 + 2 * psize)
        except FileNotFoundError:
            continue
        if len(raw) == 64 + 2 * psize and _crc_header(raw) == crc and (best is None or gen > best[0]):
            best = (gen, bool(flags & CLOSED))
    return best


def _crc_header(raw: bytes) -> int:
    """The crc of a header: its first 24 bytes, then everything after the crc field."""
    return zlib.crc32(raw[_HEAD.size:], zlib.crc32(raw[:_HEAD.size - 4]))
