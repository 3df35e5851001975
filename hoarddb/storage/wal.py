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

On disk, ``kv/wal``::

    0            HEADER           2*HEADER                                     file size
    +------------+------------------+--------------------------------+---------------+
    | header A   | header B         | record | record | ... | record | older records |
    +------------+------------------+--------------------------------+---------------+

    header (HEADER = 64 + 2 * psize bytes; A holds even generations, B odd ones):
        b"HDBWAL01" | generation u64 | psize u32 | flags u32 (1: closed cleanly)
        | crc32 u32 of everything else | pad to 64
        | LMDB's meta page 0 | meta page 1        (as they were when this generation began)
    record:
        length u32 | crc32 u32 of (generation u64 + body) | body (length bytes)
        body: op u8 (1 put, 2 delete) | key length u32 | key | [value length u32 | value] ...

A checkpoint writes the *other* header slot with the next generation, so a crash while
writing it leaves the older header whole (and the older records, which the new generation
has not yet overwritten). Records are written from the start of the record area again at
each generation; a record's crc covers its generation, so what is left of an older
generation's records past the newest one fails its check and ends the replay, as does a
record torn by a crash. All numbers are little-endian.

What a crash leaves: a record is appended (``os.pwrite``) before LMDB commits its
transaction, and flushed before the write is acknowledged (with ``sync`` off, at
:meth:`WriteAheadLog.flush`, a checkpoint or close). A crash keeps a prefix of the
records: every acknowledged one, perhaps some after it, never a gap.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Iterator

from ..errors import StorageError

WAL_NAME = "wal"
MAGIC = b"HDBWAL01"
PUT, DELETE = 1, 2
_HEAD = struct.Struct("<8sQIII")       # magic, generation, psize, flags, crc
CLOSED = 1                             # flags: written by a clean close, nothing to recover
_RECORD = struct.Struct("<II")         # length, crc
_LEN = struct.Struct("<I")
_GEN = struct.Struct("<Q")
#: the log file is kept written this far ahead of its last record (zeros), so that an
#: fdatasync overwrites blocks the file has instead of growing it
FILL = 1 << 20
_ZEROS = bytes(FILL)
_datasync = getattr(os, "fdatasync", os.fsync)


def encode_ops(ops: list) -> bytes:
    """A record's body: ``ops`` is a list of ``(PUT, key, value)`` and ``(DELETE, key)``."""
    parts = []
    pack = _LEN.pack
    for op in ops:
        key = op[1]
        if op[0] == PUT:
            value = op[2]
            parts += (b"\x01", pack(len(key)), key, pack(len(value)), value)
        else:
            parts += (b"\x02", pack(len(key)), key)
    return b"".join(parts)


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
        done = self.txn.put(key, value, dupdata=dupdata, overwrite=overwrite, append=append)
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
    """WriteAheadLog is ``kv/wal``: a header per generation and the records since it began.

    Not thread-safe by itself: :class:`~hoarddb.storage.kv.KV` appends under its commit
    lock. :meth:`flush` may run on any thread.
    """

    def __init__(self, path: Path, psize: int):
        self.path = Path(path)
        self.psize = psize
        self.header_size = 64 + 2 * psize  # the fields, padding, the two meta pages
        self.records_at = 2 * self.header_size
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        self.generation = 0
        self.metas: bytes | None = None
        self.closed = False              # the newest header was written by a clean close
        self.end = self.records_at       # where the next record goes
        self._written = 0                # bytes appended in all (what flush compares)
        self._flushed = 0
        self._filled = os.fstat(self.fd).st_size

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open_existing(cls, path: Path, psize: int) -> "WriteAheadLog | None":
        """The log at ``path`` with its newest header loaded, or None if it has no whole one.

        The page size is the one its first header says if that is readable, else ``psize``.
        """
        with open(path, "rb") as f:
            head = f.read(_HEAD.size)
        if len(head) == _HEAD.size and head[:8] == MAGIC:
            psize = _HEAD.unpack(head)[2] or psize
        wal = cls(path, psize)
        if wal.read_header():
            return wal
        wal.close()
        return None

    def read_header(self) -> bool:
        """Load the newest whole header (generation and metas); False if there is none."""
        best = None
        for slot in (0, 1):
            raw = os.pread(self.fd, self.header_size, slot * self.header_size)
            if len(raw) < self.header_size:
                continue
            magic, gen, psize, flags, crc = _HEAD.unpack_from(raw)
            if magic != MAGIC or psize != self.psize or gen % 2 != slot:
                continue
            if _crc_header(raw) != crc:
                continue
            if best is None or gen > best[0]:
                best = (gen, raw[64:64 + 2 * self.psize], bool(flags & CLOSED))
        if best is None:
            return False
        self.generation, self.metas, self.closed = best
        return True

    def records(self) -> Iterator[list]:
        """Each whole record of the current generation, in order, as a list of ops.

        Stops at the first record that is missing, torn, or of an older generation, and
        leaves :attr:`end` there, where the next record will be written.
        """
        at = self.records_at
        size = os.fstat(self.fd).st_size
        seed = zlib.crc32(_GEN.pack(self.generation))
        while at + _RECORD.size <= size:
            length, crc = _RECORD.unpack(os.pread(self.fd, _RECORD.size, at))
            if length == 0 or at + _RECORD.size + length > size:
                break
            body = os.pread(self.fd, length, at + _RECORD.size)
            if zlib.crc32(body, seed) != crc:
                break
            try:
                ops = list(decode_ops(memoryview(body)))
            except (ValueError, struct.error):
                break
            at += _RECORD.size + length
            self.end = at
            yield ops
        self.end = at

    # -- writing -------------------------------------------------------------------------

    def begin_generation(self, metas: bytes, closed: bool = False) -> None:
        """Start the next generation from these meta pages (a checkpoint's last step).

        Writes the other header slot and flushes it; from then on records start again at
        the head of the record area. A crash before the flush returns leaves the older
        header, which still describes the pages on disk (the caller's pin keeps them).
        ``closed`` marks a clean close: the next open trusts LMDB's file as it finds it
        (it may have been edited meanwhile by LMDB's own tools) and restores nothing.
        """
        gen = self.generation + 1
        body = struct.pack("<8sQII", MAGIC, gen, self.psize, CLOSED if closed else 0)
        tail = bytes(64 - _HEAD.size) + metas
        crc = zlib.crc32(tail, zlib.crc32(body))
        raw = body + _LEN.pack(crc) + tail
        try:
            os.pwrite(self.fd, raw, (gen % 2) * self.header_size)
            _datasync(self.fd)
        except OSError as exc:
            raise StorageError(f"cannot write {self.path}: {exc.strerror or exc}; check free disk space") from None
        self.generation, self.metas, self.end, self.closed = gen, metas, self.records_at, closed
        self._flushed = self._written

    def append(self, body: bytes) -> int:
        """Write one record (not flushed) of ``body`` (:func:`encode_ops`); returns the
        offset it went to, for :meth:`take_back`."""
        at = self.end
        crc = zlib.crc32(body, zlib.crc32(_GEN.pack(self.generation)))
        record = _RECORD.pack(len(body), crc) + body
        stop = at + len(record)
        try:
            if stop > self._filled:
                self._fill(stop)
            os.pwrite(self.fd, record, at)
        except OSError as exc:
            raise StorageError(f"cannot write {self.path}: {exc.strerror or exc}; check free disk space") from None
        self.end = stop
        self._written += len(record)
        return at

    def take_back(self, at: int) -> None:
        """Forget the records from ``at`` on (their transaction did not commit)."""
        try:
            os.pwrite(self.fd, bytes(_RECORD.size), at)  # a zero length ends the replay there
        except OSError:
            pass
        self.end = at

    def flush(self) -> None:
        """Make every record appended so far durable (one fdatasync, none if nothing is new)."""
        written = self._written
        if written == self._flushed:
            return
        try:
            _datasync(self.fd)
        except OSError as exc:
            raise StorageError(f"cannot flush {self.path}: {exc.strerror or exc}") from None
        if written > self._flushed:
            self._flushed = written

    def _fill(self, stop: int) -> None:
        """Write zeros from the file's end to past ``stop``: later flushes overwrite, not grow."""
        size = os.fstat(self.fd).st_size
        target = stop + FILL
        offset = max(size, self._filled)
        while offset < target:
            offset += os.pwrite(self.fd, memoryview(_ZEROS)[:min(FILL, target - offset)], offset)
        self._filled = target

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _crc_header(raw: bytes) -> int:
    """The crc of a header: its first 24 bytes, then everything after the crc field."""
    return zlib.crc32(raw[_HEAD.size:], zlib.crc32(raw[:_HEAD.size - 4]))
