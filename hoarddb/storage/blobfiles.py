"""The files of a blob bucket: one raw file per blob, and the ``_index.bson`` log describing them.

A blob bucket's directory holds:

    _index.bson       append-only log of framed BSON records (hoarddb.storage.framing)
    _index.closed     only while the bucket is closed cleanly: the index's counts then (see below)
    <DbID>            one blob's bytes, raw: no header, no encoding
    .tmp-<DbID>       a blob being written (only while a put runs, or after a crash)
    .tmp-index        a compacted index being written (likewise)

``_index.bson`` is a sequence of entries, each an 8-byte header and one BSON record:

    +------------+------------+--------------------------------------------------------+
    | length u32 | crc32 u32  | {op: "put", _id_, name, type, size, sha256, created}   |
    +------------+------------+--------------------------------------------------------+
    | length u32 | crc32 u32  | {op: "del", _id_}                                      |
    +------------+------------+--------------------------------------------------------+
    ...

Replaying the records in order gives the live blobs: a ``put`` adds an id, a ``del``
removes it. Only appends touch the log, so a put costs the same however many blobs the
bucket holds. When dead records (deleted puts and the dels themselves) outnumber live
ones, :meth:`IndexLog.rewrite` replaces the log with one ``put`` per live blob.

``_index.closed`` is one framed BSON document, ``{records, end}``: the index's records and
bytes when the store was closed with every write on disk. It is written last at a clean
close and removed before the first write after the next open, so while it is there no
put or delete can have been under way. An open that finds it trusts nothing a crash
could explain: a torn tail, a blob file the index does not name, or an index of another
length is damage, refused, never repaired by deleting (docs/dev/blobs.md).

This module does the file work (hashing writes, fsyncs, the log); the verbs, their
arguments and their errors are :mod:`hoarddb.stores.blob`.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import CorruptDataError
from ..values.codec import decode, encode
from . import framing
from .oserrors import fsync_directory

log = logging.getLogger(__name__)

INDEX_NAME = "_index.bson"
CLOSED_NAME = "_index.closed"
TEMP_PREFIX = ".tmp-"
COMPACT_TEMP_NAME = TEMP_PREFIX + "index"
#: How much of a blob is read, hashed and written at a time.
CHUNK_SIZE = 1024 * 1024


def write_blob(directory: Path, name: str, chunks: Iterable[bytes], sync: bool) -> tuple[int, str]:
    """Write ``chunks`` to ``directory/name`` through a temp file; return ``(size, sha256 hex)``.

    The bytes go to ``.tmp-<name>`` (hashed as they are written), which is fsynced,
    renamed to ``name``, and the directory fsynced. On any failure the temp file is
    removed and the error raised; ``name`` then does not exist.
    """
    temp = directory / (TEMP_PREFIX + name)
    digest = hashlib.sha256()
    size = 0
    try:
        with open(temp, "xb") as f:
            for chunk in chunks:
                digest.update(chunk)
                f.write(chunk)
                size += len(chunk)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.rename(temp, directory / name)
    except BaseException:
        _remove_quietly(temp)
        raise
    if sync:
        fsync_directory(directory)
    return size, digest.hexdigest()


def read_chunks(f, chunk_size: int) -> Iterator[bytes]:
    """The bytes of an open binary file, ``chunk_size`` at a time, until its end."""
    while True:
        chunk = f.read(chunk_size)
        if not chunk:
            return
        yield chunk


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class IndexLog:
    """IndexLog is a blob bucket's ``_index.bson``: read whole on open, then only appended to.

    :meth:`load` must be called once before :meth:`append`. Not thread-safe by itself:
    the store holds its lock around every call.
    """

    def __init__(self, directory: Path, sync: bool):
        self.directory = Path(directory)
        self.path = self.directory / INDEX_NAME
        self.sync = sync
        #: Entries in the file (live and dead).
        self.records = 0
        #: Offset just past the last whole entry: the file's length once loaded.
        self.end = 0
        self._file = None

    def exists(self) -> bool:
        return self.path.exists()

    def load(self, closed_cleanly: bool = False) -> list[dict]:
        """Every record of the log, in order; a torn tail is cut off and logged.

        A torn tail is what a crash in the middle of an append leaves: a partial entry,
        or zeros, after the last whole one. Damage *followed* by whole entries is not a
        torn tail (nothing appends past a torn entry) and is refused with
        :class:`CorruptDataError` instead of cutting away the records after it; so is any
        torn tail of a log ``closed_cleanly`` (no append was under way).
        """
        created = not self.path.exists()
        with open(self.path, "a+b") as f:
            size = f.seek(0, os.SEEK_END)
            records = []
            end = 0
            for offset, payload in framing.scan(f, 0):
                records.append(self._decode(offset, payload))
                end = offset + framing.HEADER_SIZE + len(payload)
            if end < size:
                later = _later_entry(f, end, size)
                if closed_cleanly:
                    raise CorruptDataError(
                        f"blob index {self.path} is damaged at offset {end}: the entry there fails its checksum "
                        f"({size - end} bytes from there on), and the bucket was closed cleanly, so no write was "
                        "cut short there. Restore _index.bson from a backup; nothing was changed, and the blob "
                        "files themselves are untouched."
                    )
                if later is not None:
                    raise CorruptDataError(
                        f"blob index {self.path} is damaged at offset {end}: the entry there fails "
                        f"its checksum but whole entries follow at offset {later}, so this is not "
                        "a write cut short by a crash. Restore _index.bson from a backup; the blob "
                        "files themselves are untouched."
                    )
                log.warning(
                    "blob index %s: cut a torn tail of %d bytes at offset %d "
                    "(an append interrupted by a crash)",
                    self.path, size - end, end,
                )
                f.truncate(end)
                if self.sync:
                    os.fsync(f.fileno())
        if created and self.sync:
            fsync_directory(self.directory)
        self.records, self.end = len(records), end
        self._file = open(self.path, "ab", buffering=0)
        return records

    def _decode(self, offset: int, payload: bytes) -> dict:
        try:
            record = decode(payload)
        except Exception as exc:  # a checksummed entry that is not BSON: a bug, not a crash
            raise CorruptDataError(
                f"blob index {self.path}: the entry at offset {offset} is not a BSON document ({exc}); "
                "restore _index.bson from a backup"
            ) from None
        if record.get("op") not in ("put", "del") or not isinstance(record.get("_id_"), str):
            raise CorruptDataError(
                f"blob index {self.path}: the entry at offset {offset} is not a put or del record "
                f"({record!r:.200}); restore _index.bson from a backup"
            )
        return record

    def append(self, record: dict) -> None:
        """Append one record and (with sync) fsync it. On failure the file is cut back."""
        data = framing.frame(encode(record))
        view = memoryview(data)
        try:
            while view:
                written = self._file.write(view)
                view = view[written:]
            if self.sync:
                os.fsync(self._file.fileno())
        except BaseException:
            # Leave no partial entry behind: later appends would sit after it, unread.
            try:
                os.ftruncate(self._file.fileno(), self.end)
            except OSError:
                pass
            raise
        self.end += len(data)
        self.records += 1

    def flush(self) -> None:
        """fsync the log (what ``append`` does itself when ``sync`` is on)."""
        if self._file is not None:
            os.fsync(self._file.fileno())

    def rewrite(self, records: Iterable[dict]) -> None:
        """Replace the log with ``records``: write a new file, fsync, rename over, fsync the directory.

        A crash before the rename leaves the old log whole (and a ``.tmp-index`` the
        next open deletes); after it, the new log is whole.
        """
        temp = self.directory / COMPACT_TEMP_NAME
        count = end = 0
        try:
            with open(temp, "wb") as f:
                for record in records:
                    data = framing.frame(encode(record))
                    f.write(data)
                    count += 1
                    end += len(data)
                f.flush()
                if self.sync:
                    os.fsync(f.fileno())
            new_file = open(temp, "ab", buffering=0)
            try:
                os.rename(temp, self.path)
            except BaseException:
                new_file.close()
                raise
        except BaseException:
            _remove_quietly(temp)
            raise
        # From the rename on, appends must go to the new file, whatever happens next.
        self._file.close()
        self._file = new_file
        self.records, self.end = count, end
        if self.sync:
            fsync_directory(self.directory)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_closed_mark(directory: Path) -> dict | None:
    """The counts a clean close recorded in ``_index.closed``, or None (none there, or one
    a crash cut short: then the bucket is opened as after a crash)."""
    try:
        raw = (Path(directory) / CLOSED_NAME).read_bytes()
    except FileNotFoundError:
        return None
    header, payload = raw[:framing.HEADER_SIZE], raw[framing.HEADER_SIZE:]
    if framing.check(header, payload):
        try:
            mark = decode(payload)
        except Exception:
            mark = None
        if isinstance(mark, dict) and isinstance(mark.get("records"), int) and isinstance(mark.get("end"), int):
            return mark
    log.warning("blob bucket %s: %s does not check; opening as after a crash", directory, CLOSED_NAME)
    return None


def write_closed_mark(directory: Path, records: int, end: int) -> None:
    """Record a clean close (every write of the bucket is on disk): one write, fsynced."""
    path = Path(directory) / CLOSED_NAME
    with open(path, "wb") as f:
        f.write(framing.frame(encode({"records": records, "end": end})))
        f.flush()
        os.fsync(f.fileno())
    fsync_directory(directory)


def remove_closed_mark(directory: Path) -> None:
    """Before the first write after a clean close: the bucket is open for writes again, durably."""
    _remove_quietly(Path(directory) / CLOSED_NAME)
    fsync_directory(directory)


def _later_entry(f, start: int, size: int) -> int | None:
    """The offset of a whole entry somewhere after ``start``, or None when there is none.

    Only runs on a damaged log. A candidate must repeat its length in the payload's
    first four bytes (a BSON document starts with its own length) before its CRC is
    checked, so scanning garbage stays cheap.
    """
    f.seek(start)
    tail = f.read(size - start)
    n = framing.HEADER_SIZE
    for i in range(1, len(tail) - n - framing.MIN_PAYLOAD + 1):
        if tail[i:i + 4] != tail[i + n:i + n + 4]:
            continue
        length = int.from_bytes(tail[i:i + 4], "little")
        if length < framing.MIN_PAYLOAD or i + n + length > len(tail):
            continue
        if framing.check(tail[i:i + n], tail[i + n:i + n + length]):
            return start + i
    return None


def read_index(directory: Path) -> tuple[list[dict], int, int]:
    """``(records, end, size)`` of a blob bucket's ``_index.bson``, reading only (a check):
    every record up to the first entry that does not check, the offset just past the last
    whole one, and the file's size (``end < size``: damage, or a torn tail).

    FileNotFoundError when there is no index; CorruptDataError for an entry that checks but
    is not a put or del record.
    """
    with open(Path(directory) / INDEX_NAME, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        records, end = read_records(f, directory)
    return records, end, size


def read_records(f, directory: Path, stop: int | None = None) -> tuple[list[dict], int]:
    """``(records, end)`` of the index open as ``f``: every record up to the first entry that
    does not check (or up to byte ``stop``: an open bucket's index as of one moment, whose
    later appends are not read), and the offset just past the last whole one.
    CorruptDataError for an entry that checks but is not a put or del record."""
    index = IndexLog(directory, sync=False)
    records, end = [], 0
    for offset, payload in framing.scan(f, 0, stop):
        records.append(index._decode(offset, payload))
        end = offset + framing.HEADER_SIZE + len(payload)
    return records, end


def file_digest(path: Path) -> tuple[int, str]:
    """``(size, sha256 hex)`` of a blob's file, read a chunk at a time (a check)."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for chunk in read_chunks(f, CHUNK_SIZE):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
