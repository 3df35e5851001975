"""The blob store type: raw binary files named by DbID, with metadata and a SHA-256 each.

    >>> store = BlobStore(bucket_dir, {"type": "blob"}, Options())
    >>> blob_id = store.put({"data": b"...", "name": "sunset.jpg", "type": "image/jpeg"})
    >>> store.info(blob_id)["size"]
    3
    >>> b"".join(store.stream({"_id_": blob_id}))
    b'...'

The files and the index log are :mod:`hoarddb.storage.blobfiles`; this module is the
verbs, their arguments and their errors, for a blob bucket (:class:`BlobStore`) and a
document's blob store field (:class:`BlobField`) alike: both read through
:class:`BlobReads`, and differ only in where a blob's record lives (docs/dev/blobs.md).
A bucket's index is held in memory as a dict of DbID -> record, rebuilt from
``_index.bson`` on open. Every read checks the SHA-256 recorded at put, so altered bytes
are never returned: :class:`CorruptDataError` instead.
"""

from __future__ import annotations

import bisect
import datetime
import hashlib
import io
import logging
import os
import re
import threading
import uuid
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Iterator

from ..errors import BadValueError, ClosedError, CorruptDataError, DuplicateKeyError, NotFoundError, StorageError
from ..ids import uuid7
from ..options import Options
from ..chunks import chunks as _chunks
from ..storage import blobfiles
from ..storage.blobfiles import CHUNK_SIZE, INDEX_NAME, TEMP_PREFIX, IndexLog
from ..storage.oserrors import fsync_directory, is_full, storage_error
from ..values.codec import decode, encode
from ..values.keys import encode_key
from .base import Problem, Problems, Store, check_limit

log = logging.getLogger(__name__)

#: The index is compacted when it holds more records than this and dead ones outnumber live ones.
COMPACT_MIN_RECORDS = 1000
#: The longest ``name`` or ``type`` accepted, in UTF-8 bytes (they live in the index log,
#: whose records must stay small).
MAX_LABEL_BYTES = 1024

_ID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # (fullmatch: $ takes a "\n")
_PUT_FIELDS = ("data", "name", "type")
_ACCEPTED = (
    "bytes, bytearray, memoryview, a binary file object (anything with .read(n)), "
    "or a document {data: <bytes>, name: \"sunset.jpg\", type: \"image/jpeg\"}"
)


class BlobReads:
    """BlobReads is how a blob is read, in a blob bucket and a blob store field alike:
    ``get``, ``info`` and ``stream``, whose bytes are checked against the SHA-256 recorded
    at put, so altered bytes are never returned (CORRUPT_DATA instead). The storage gives:

        _lookup(blob_id)                       its record {_id_, name, type, size, sha256, created}
                                               (NOT_FOUND when there is none)
        _open_blob(blob_id, record)            its file, open for reading
        _corrupt(blob_id, record, size, sha)   the error for bytes that do not match
        _got(record, data)                     get's answer
    """

    def get(self, id: Any) -> dict:
        """``{"_id_", "data", "name", "type", "size", "sha256"}``, the bytes checked against their SHA-256."""
        blob_id = _blob_id(id)
        record = self._lookup(blob_id)
        f = self._open_blob(blob_id, record)
        with f:
            data = f.read()
        self._verify(blob_id, record, len(data), hashlib.sha256(data).hexdigest())
        return self._got(record, data)

    def info(self, id: Any) -> dict:
        """``{"_id_", "name", "type", "size", "sha256", "created"}``: metadata, no bytes read."""
        blob_id = _blob_id(id)
        return _info(self._lookup(blob_id))

    def stream(self, id: Any, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """The blob's bytes as chunks of ``chunk_size`` (the last may be shorter).

        Unknown ids and missing files raise here, before iteration. The SHA-256 is
        computed as the chunks are read, one chunk ahead of what is yielded, so a
        corrupt blob raises CorruptDataError *instead of* yielding its last chunk: a
        consumer that gets every chunk without an error got the bytes that were put.
        """
        blob_id = _blob_id(id)
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise BadValueError(f"stream chunk_size must be a positive integer (bytes), got {chunk_size!r}")
        record = self._lookup(blob_id)
        f = self._open_blob(blob_id, record)
        return self._verified_chunks(blob_id, record, f, chunk_size)

    def _verified_chunks(self, blob_id: str, record: dict, f, chunk_size: int) -> Iterator[bytes]:
        with f:
            digest = hashlib.sha256()
            size = 0
            chunk = f.read(chunk_size)
            while True:
                digest.update(chunk)
                size += len(chunk)
                ahead = f.read(chunk_size) if chunk else b""
                if not ahead:  # ``chunk`` is the last one: check before handing it out
                    self._verify(blob_id, record, size, digest.hexdigest())
                    if chunk:
                        yield chunk
                    return
                yield chunk
                chunk = ahead

    def _verify(self, blob_id: str, record: dict, size: int, sha256: str) -> None:
        if sha256 != record["sha256"]:
            raise self._corrupt(blob_id, record, size, sha256)


class BlobStore(BlobReads, Store):
    """BlobStore keeps a bucket's blobs as files in its directory, indexed by ``_index.bson``.

    Writes (put, delete) are durable when they return unless ``options.sync`` is off.
    Any number of threads may call it; index changes happen under one lock, while the
    bytes of a put are written and hashed outside it.
    """

    type_name = "blob"
    bucket_options: dict[str, str] = {}

    def __init__(self, directory: Path, declaration: Mapping[str, Any], options: Options):
        super().__init__(directory, declaration, options)
        self._lock = threading.Lock()
        self._unsynced: list[str] = []
        self._records: dict[str, dict] = {}  # live blobs: DbID -> its put record
        self._order: list[str] = []  # DbIDs sorted; may still hold deleted ones
        self._stale_in_order = 0
        self._index = IndexLog(self.directory, options.sync)
        self._closed = False
        self._clean = False  # _index.closed was there (see storage/blobfiles.py) and nothing was written since
        self._putting: set[str] = set()  # ids of puts between their first file and their index record
        try:
            self._open()
        except BaseException as exc:
            self._index.close()
            if isinstance(exc, OSError):
                raise storage_error(f"opening {exc.filename or self.directory}", exc, "the bucket was not opened") \
                    from None
            raise

    # -- checking (hoarddb check) ------------------------------------------------------

    @classmethod
    def check(cls, directory, declaration):
        """The index reads whole to its end, holding what its clean close counted; every
        blob file it names is there with the SHA-256 and size it records; it names every
        blob file. Every blob's bytes are read."""
        directory = Path(directory)
        problems = Problems()
        names = sorted(p.name for p in directory.iterdir())
        try:
            records, end, size = blobfiles.read_index(directory)
        except FileNotFoundError:
            files = [n for n in names if _ID_TEXT.fullmatch(n) and (directory / n).is_file()]
            if files:
                problems.append(Problem(INDEX_NAME, f"is missing, and {len(files)} blob files are there"))
            return problems
        except CorruptDataError as exc:
            problems.append(Problem(INDEX_NAME, exc.message))
            return problems
        mark = blobfiles.read_closed_mark(directory)
        for problem, _about in _check_blobs(directory, records, end, size, mark, names):
            problems.append(problem)
        return problems

    def check_open(self, declaration: Mapping[str, Any]) -> list[Problem]:
        """:meth:`check` on the open bucket, while it serves: the same checks over one moment
        of the bucket, its index as it was then and the blobs it named then, while puts and
        deletes go on. The moment is taken under the store's lock (the index file opened, its
        length and the live blobs noted); the rest is read without it: a blob file never
        changes once in place, appends to the index land past the length noted, and a
        compaction puts a new index in place, leaving the file opened whole. What the reads
        find of one blob is reported only if, asked under the lock again at the end, the
        bucket still holds that blob as it was (a blob deleted meanwhile is skipped) or, for
        a file the index does not name, no put is placing it and it is still there."""
        problems = Problems()
        with self._lock:
            self._check_open()
            try:
                f = open(self._index.path, "rb")
            except FileNotFoundError:
                f = None
            end, serving = self._index.end, dict(self._records)
            mark = blobfiles.read_closed_mark(self.directory) if self._clean else None
        if f is None:
            problems.append(Problem(INDEX_NAME, f"is missing, and the bucket holds {len(serving)} blobs"))
            return problems
        try:
            with f:
                records, found = blobfiles.read_records(f, self.directory, end)
        except CorruptDataError as exc:
            problems.append(Problem(INDEX_NAME, exc.message))
            return problems
        live = _replay(records)
        if found == end and live.keys() != serving.keys():
            gone, extra = sorted(serving.keys() - live.keys()), sorted(live.keys() - serving.keys())
            problems.append(Problem(INDEX_NAME, f"does not record the blobs the bucket serves: {len(gone)} it serves "
                                                f"are not in it{' (such as ' + gone[0] + ')' if gone else ''}, and "
                                                f"{len(extra)} in it are not served"
                                                f"{' (such as ' + extra[0] + ')' if extra else ''}"))
        names = sorted(p.name for p in self.directory.iterdir())
        found_now = list(_check_blobs(self.directory, records, found, end, mark, names))
        with self._lock:
            for problem, about in found_now:
                if about is None:
                    problems.append(problem)
                elif about in serving:  # a blob of that moment: reported if the bucket still holds it as it was
                    if self._records.get(about) is serving[about]:
                        problems.append(problem)
                elif about not in self._records and about not in self._putting and (self.directory / about).exists():
                    problems.append(problem)  # a file no blob has, and no put is placing
        return problems

    # -- opening -------------------------------------------------------------------------

    def _open(self) -> None:
        """Load the index and make the directory agree with it (see the put's crash table).

        After a clean close (``_index.closed``) no put or delete was under way, so what a
        crash would explain is damage instead: refused (torn tail, another length, blob
        files the index does not name), or, for a blob whose file is gone, kept in the
        index so that reading it answers CORRUPT_DATA while the others stay readable.
        """
        mark = blobfiles.read_closed_mark(self.directory)
        self._clean = mark is not None
        for path in self.directory.iterdir():
            if path.name.startswith(TEMP_PREFIX) and path.is_file():  # a put or compaction cut short
                log.warning("blob bucket %s: removing %s, left by an interrupted write", self.directory, path.name)
                path.unlink()
        blob_files = {p.name for p in self.directory.iterdir() if _ID_TEXT.fullmatch(p.name) and p.is_file()}
        if blob_files and not self._index.exists():
            raise CorruptDataError(
                f"blob bucket {self.directory} holds {len(blob_files)} blob files but no {INDEX_NAME}; "
                "hoardDB will not guess their metadata. Restore the index from a backup."
            )
        for record in self._index.load(closed_cleanly=self._clean):
            if record["op"] == "put":
                self._records[record["_id_"]] = record
            else:
                self._records.pop(record["_id_"], None)
        if self._clean:
            self._check_clean(mark, blob_files)
            self._order = sorted(self._records)
            return
        for name in sorted(blob_files - self._records.keys()):
            # Renamed into place but never indexed (or deleted but not yet unlinked).
            log.warning("blob bucket %s: removing blob file %s, which the index does not record", self.directory, name)
            os.unlink(self.directory / name)
        for blob_id in sorted(self._records.keys() - blob_files):
            r = self._records.pop(blob_id)
            log.error(
                "blob bucket %s: blob %s (name %r, %d bytes, sha256 %s) is in the index but its file "
                "is missing; dropping it from the index",
                self.directory, blob_id, r.get("name"), r.get("size", 0), r.get("sha256"),
            )
            # Recorded, so the index agrees with the directory and this is reported once
            # (on a disk too full for the record, at a later open).
            try:
                self._index.append({"op": "del", "_id_": blob_id})
            except OSError as exc:
                log.warning("blob bucket %s: could not record that blob %s is gone (%s); the next open tries "
                            "again", self.directory, blob_id, exc.strerror or exc)
        self._order = sorted(self._records)
        self._maybe_compact()

    def _check_clean(self, mark: dict, blob_files: set[str]) -> None:
        """After a clean close: the index must be the one the close counted, and name every blob file."""
        index = self.directory / INDEX_NAME
        if (self._index.records, self._index.end) != (mark["records"], mark["end"]):
            raise CorruptDataError(
                f"blob index {index} held {mark['records']} records ({mark['end']} bytes) when the bucket was closed "
                f"cleanly, and now holds {self._index.records} ({self._index.end} bytes): it was cut short, "
                "replaced or written to since. Restore _index.bson from a backup; nothing was changed, and the "
                "blob files are untouched.")
        unnamed = sorted(blob_files - self._records.keys())
        if unnamed:
            raise CorruptDataError(
                f"blob bucket {self.directory} holds {len(unnamed)} blob file(s) its index does not name (such as "
                f"{unnamed[0]}), and it was closed cleanly, so no put was cut short: the index lost their records "
                "or is another bucket's. Restore _index.bson from a backup; nothing was changed or deleted.")
        for blob_id in sorted(self._records.keys() - blob_files):
            r = self._records[blob_id]
            log.error("blob bucket %s: the file of blob %s (name %r, %d bytes, sha256 %s) is missing, though the "
                      "bucket was closed cleanly; reading it answers CORRUPT_DATA: restore the file from a backup, "
                      "or delete the blob", self.directory, blob_id, r.get("name"), r.get("size", 0), r.get("sha256"))

    def _reopen_for_writes(self) -> None:
        """Before the first write after a clean close (lock held): remove ``_index.closed``,
        durably, so that what a crash leaves from now on is repaired as a crash's."""
        if self._clean:
            try:
                blobfiles.remove_closed_mark(self.directory)
            except OSError as exc:
                raise storage_error(f"writing to blob bucket {self.directory.name}", exc) from None
            self._clean = False

    # -- writing -------------------------------------------------------------------------

    def put(self, data: Any, name: str | None = None, type: str | None = None) -> str:
        """Store ``data`` as a new blob and return its DbID.

        :param data: bytes, bytearray, memoryview, a binary file object (read in 1 MiB
            chunks, never whole), or the document ``{data, name, type}``.
        :param name: the blob's name, such as ``"sunset.jpg"`` (or None).
        :param type: its media type, such as ``"image/jpeg"`` (or None).
        :raises BadValueError: for any other kind of data, a name or type that is not a
            string, or given both in the document and as an argument.

        The steps, and what a crash after each leaves on disk:

            step                                   a crash after it leaves       the next open
            1. write .tmp-<id> in 1 MiB chunks,    .tmp-<id>                     deletes it
               hashing them; fsync it
            2. rename .tmp-<id> to <id>;           <id>, but no index record     deletes <id>
               fsync the directory
            3. append {op: "put", ...} to          a torn last entry, or a       cuts a torn entry (then
               _index.bson                         whole one not yet fsynced     deletes <id>, as after 2)
            4. fsync _index.bson; return the id    the put, whole                has nothing to repair

        No crash leaves an index record without its file, or a put half visible: the
        blob is in the bucket exactly when its record is in the index.

        Only step 3 touches the index, and only by appending one record, so a put costs
        the same however many blobs the bucket holds.
        """
        self._check_open()
        data, name, type = _put_arguments(data, name, type)
        return self._put(data, name, type, uuid7(), _now_ms())

    def _put(self, data, name, type, blob_id: str, created, sha256_expected: str | None = None) -> str:
        with self._lock:
            self._check_open()
            self._reopen_for_writes()
            self._putting.add(blob_id)  # (a close meanwhile marks nothing; an online check skips its file)
        try:
            return self._put_files(data, name, type, blob_id, created, sha256_expected)
        finally:
            with self._lock:
                self._putting.discard(blob_id)

    def _put_files(self, data, name, type, blob_id: str, created, sha256_expected: str | None) -> str:
        try:
            size, sha256 = blobfiles.write_blob(self.directory, blob_id, _chunks(data), self.options.sync)
        except OSError as exc:  # (write_blob removed what it wrote: no partial blob stays)
            raise storage_error(f"writing a blob to bucket {self.directory.name}", exc) from None
        if sha256_expected is not None and sha256 != sha256_expected:
            _unlink_quietly(self.directory / blob_id)
            raise CorruptDataError(
                f"blob {blob_id} loaded with sha256 {sha256}, but its dump recorded {sha256_expected}; "
                "the dump is damaged: load it from another copy"
            )
        if not self.options.sync:
            self._unsynced.append(blob_id)
        record = {
            "op": "put", "_id_": blob_id, "name": name, "type": type,
            "size": size, "sha256": sha256, "created": created,
        }
        with self._lock:
            try:
                self._check_open()
                self._index.append(record)
            except BaseException as exc:
                _unlink_quietly(self.directory / blob_id)
                if isinstance(exc, OSError):  # (append cut the index back to its last whole record)
                    raise storage_error(f"indexing a blob in bucket {self.directory.name}", exc) from None
                raise
            self._records[blob_id] = record
            if not self._order or blob_id > self._order[-1]:
                self._order.append(blob_id)
            else:
                bisect.insort(self._order, blob_id)
            self._maybe_compact()
        return blob_id

    def load(self, docs: list) -> dict:
        """Restore blobs with their own ids: each ``{_id_, data, name, type, sha256?, created?}``.

        ``data`` is bytes or a binary file object; a given ``sha256`` is checked against
        the bytes written (CorruptDataError, and that blob is not kept). An id that is
        already in the bucket is refused (DUPLICATE_KEY).
        """
        loaded = 0
        for i, doc in enumerate(docs):
            if not isinstance(doc, dict) or "_id_" not in doc or "data" not in doc:
                raise BadValueError(f"load: blob {i} must be a document {{_id_, data, name, type}}")
            blob_id = _blob_id(doc["_id_"])
            if blob_id in self._records:
                raise DuplicateKeyError(f"load: blob {blob_id} is already in bucket {self.directory.name}")
            data, name, type = _put_arguments(doc["data"], doc.get("name"), doc.get("type"))
            self._put(data, name, type, blob_id, doc.get("created") or _now_ms(), doc.get("sha256"))
            loaded += 1
        return {"loaded": loaded}

    def export(self, cursor: Any = None, limit: int = 1000) -> dict:
        """A page of blob infos in id order: ``{docs, next}``; read each blob's bytes with stream."""
        docs = self.list(after=cursor, limit=limit)
        return {"docs": docs, "next": docs[-1]["_id_"] if len(docs) == limit else None}

    def sync(self, logs: list | None = None) -> None:
        """Make every blob put since the last sync durable (with ``options.sync`` off)."""
        with self._lock:
            pending, self._unsynced = self._unsynced, []
        self._sync(pending)

    def _sync(self, pending: list[str]) -> None:
        for blob_id in pending:
            try:
                fd = os.open(self.directory / blob_id, os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted since
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(self.directory)
        self._index.flush()

    def delete(self, id: Any) -> dict:
        """Remove a blob: ``{"deleted": 1}``; an unknown id raises NotFoundError.

        The del record is appended and fsynced first, then the file unlinked: a crash
        between the two leaves a file the index does not record, deleted on open.

        On a disk too full for the record (its last block full, so the record needs a new
        one), deleting is how a user makes room, and refusing it would leave no way to
        free space through hoardDB. So then the order turns: the blob's file is unlinked
        first (its blocks are freed), and the record appended after::

            _index.bson: | ... | put X |            X's file: 2 MiB    the append: ENOSPC
            _index.bson: | ... | put X |            X's file: gone     room for a block
            _index.bson: | ... | put X | del X |    X's file: gone     the delete, whole

        A crash between the unlink and the record leaves a put whose file is missing: the
        next open drops it (logging it as missing) and appends the del, so the delete
        completes. An empty blob frees no block, and is refused instead.
        """
        blob_id = _blob_id(id)
        with self._lock:
            self._check_open()
            record = self._record(blob_id)
            self._reopen_for_writes()
            try:
                self._index.append({"op": "del", "_id_": blob_id})
            except OSError as exc:
                if not is_full(exc) or not record.get("size"):
                    raise storage_error(f"deleting blob {blob_id} from bucket {self.directory.name}", exc) from None
                self._delete_unlinking_first(blob_id)
            del self._records[blob_id]
            self._stale_in_order += 1
            # Not fsynced: after a crash the file is one the index lacks, deleted on open.
            _unlink_quietly(self.directory / blob_id)
            self._maybe_compact()
        return {"deleted": 1}

    def _delete_unlinking_first(self, blob_id: str) -> None:
        """delete's way on a full disk (lock held): unlink the file, then append the del record."""
        path = self.directory / blob_id
        _unlink_quietly(path)
        if self.options.sync:
            fsync_directory(self.directory)
        log.warning("blob bucket %s: the disk is full; removed blob %s's file before recording its delete",
                    self.directory, blob_id)
        try:
            self._index.append({"op": "del", "_id_": blob_id})
        except OSError as exc:  # the room went elsewhere meanwhile: the bytes are gone, the record stays
            raise storage_error(
                f"deleting blob {blob_id} from bucket {self.directory.name}", exc,
                "its file is removed (it reads as missing) but the delete could not be recorded: delete "
                "it again once there is room (opening the database again records it too)") from None

    def _maybe_compact(self) -> None:
        """Rewrite the index when dead records outnumber live ones (lock held, or opening)."""
        live = len(self._records)
        if self._index.records > COMPACT_MIN_RECORDS and self._index.records - live > live:
            before = self._index.records
            try:
                self._reopen_for_writes()
                self._index.rewrite(self._records[i] for i in sorted(self._records))
            except (OSError, StorageError) as exc:  # the old log is still whole and in use; try again later
                log.warning("blob bucket %s: compacting %s failed: %s", self.directory, INDEX_NAME, exc)
            else:
                log.info("blob bucket %s: compacted %s from %d records to %d",
                         self.directory, INDEX_NAME, before, live)
        if self._stale_in_order > len(self._records):
            self._order = sorted(self._records)
            self._stale_in_order = 0

    # -- reading -------------------------------------------------------------------------

    def _got(self, record: dict, data: bytes) -> dict:
        return {
            "_id_": record["_id_"], "data": data, "name": record["name"], "type": record["type"],
            "size": record["size"], "sha256": record["sha256"],
        }

    def length(self) -> int:
        """How many blobs the bucket holds."""
        self._check_open()
        return len(self._records)

    def backup(self, target: Path) -> None:
        """``_index.bson`` up to its last whole record, and each blob file it names (hard links:
        a blob file never changes once written), taken with the index held still."""
        from .base import link_files

        self._check_open()
        with self._lock:
            target.mkdir(parents=True)
            end = self._index.end
            if end:
                with open(self._index.path, "rb") as src, open(target / self._index.path.name, "wb") as dst:
                    dst.write(src.read(end))
            link_files(self.directory, target, names=list(self._records))

    def stats(self) -> dict:
        """``{"entries": blobs, "bytes": bytes on disk, "data_bytes": the blobs' sizes summed}``."""
        self._check_open()
        with self._lock:
            size = sum(int(r.get("size") or 0) for r in self._records.values())
        return {**super().stats(), "data_bytes": size}

    def list(self, after: Any = None, limit: int = 100) -> list[dict]:
        """Info dicts of up to ``limit`` blobs in DbID order (so, oldest first), after the id ``after``."""
        self._check_open()
        limit = check_limit(limit, self.options.max_peek, "list")
        start = None if after is None else _blob_id(after, "list after")
        out = []
        with self._lock:
            i = 0 if start is None else bisect.bisect_right(self._order, start)
            while i < len(self._order) and len(out) < limit:
                record = self._records.get(self._order[i])
                if record is not None:
                    out.append(_info(record))
                i += 1
        return out

    def close(self) -> None:
        """Make every write durable, record a clean close (``_index.closed``), and close the
        index file; later calls raise ClosedError. A close that cannot record it (a full
        disk) leaves the bucket to be opened as after a crash (logged)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._putting:  # its file may be in place and its record never come: no clean close
                    log.info("blob bucket %s: closed while a put was under way; the next open checks it as after a "
                             "crash", self.directory)
                elif not self._clean:
                    pending, self._unsynced = self._unsynced, []
                    self._sync(pending)
                    blobfiles.write_closed_mark(self.directory, self._index.records, self._index.end)
            except OSError as exc:
                log.warning("blob bucket %s: could not record a clean close (%s); the next open treats it as "
                            "after a crash", self.directory, exc.strerror or exc)
            finally:
                self._index.close()

    # -- helpers -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"blob bucket {self.directory.name} is closed")

    def _record(self, blob_id: str) -> dict:
        record = self._records.get(blob_id)
        if record is None:
            raise NotFoundError(f"no blob {blob_id} in bucket {self.directory.name}", id=blob_id)
        return record

    def _lookup(self, blob_id: str) -> dict:
        self._check_open()
        return self._record(blob_id)

    def _open_blob(self, blob_id: str, record: dict):
        try:
            return open(self.directory / blob_id, "rb")
        except FileNotFoundError:
            if blob_id not in self._records:  # deleted since we looked it up
                raise NotFoundError(f"no blob {blob_id} in bucket {self.directory.name}", id=blob_id) from None
            raise CorruptDataError(
                f"blob {blob_id} is corrupt: its file {self.directory / blob_id} is missing, though the "
                f"index records it ({record['size']} bytes, sha256 {record['sha256']}); "
                "restore it from a backup or delete it",
                id=blob_id,
            ) from None
        except OSError as exc:
            raise StorageError(f"blob {blob_id} in bucket {self.directory.name} cannot be read: {exc}") from exc

    def _corrupt(self, blob_id: str, record: dict, size: int, sha256: str) -> CorruptDataError:
        size_note = "" if size == record["size"] else f" ({size} bytes on disk, {record['size']} recorded)"
        return CorruptDataError(
            f"blob {blob_id} is corrupt: sha256 on disk {sha256} differs from {record['sha256']} "
            f"recorded at put{size_note} (file {self.directory / blob_id}); "
            "restore it from a backup or delete it",
            id=blob_id,
        )


class BlobField(BlobReads):
    """BlobField is a document's blob store field: the same blobs (a DbID each, the bytes
    raw in a file named by it, a SHA-256 checked on every read), with their records in a
    keyspace of the bucket's LMDB environment instead of an index log, so that a put and
    the check that its document exists are one transaction (docs/dev/blobs.md says why the
    records live there). The keyspace (:class:`~hoarddb.stores.fields.FieldSpace`) also
    gives the folder of the files (``directory``) and records which store owns an id
    (``own``/``disown``, in the same transaction).

        encode_key(DbID)  ->  {_id_, name, type, size, sha256, created}      (BSON)

    A put writes the file (fsynced) before its record commits, and a delete unlinks the
    file after its record's delete commits: a crash between leaves a file no record
    names, which the bucket removes when it opens.
    """

    def __init__(self, space, options: Options):
        self.space, self.options, self.directory = space, options, space.directory

    def put(self, data: Any, doc: Any = None, name: str | None = None, type: str | None = None) -> str:
        """Store ``data`` as a new blob (``doc``: the options ``{name, type}``); return its DbID."""
        where = self.space.where
        if doc is not None:  # put(data, {name, type})
            if not isinstance(doc, Mapping):
                raise BadValueError(f"{where}.put takes the bytes and an options document {{name, type}}, "
                                    f"such as put(data, {{name: \"lease.pdf\", type: \"application/pdf\"}}); "
                                    f"got {_kind(doc)}: {doc!r:.80}")
            extra = sorted(map(str, set(doc) - {"name", "type"}))
            if extra:
                raise BadValueError(f"{where}.put options have unknown field(s) {', '.join(extra)}; accepted: name, type")
            for field, given in (("name", name), ("type", type)):
                if field in doc and given is not None:
                    raise BadValueError(f"{where}.put got {field} twice: in the options and as an argument; give it once")
            name, type = doc.get("name", name), doc.get("type", type)
        data, name, type = _put_arguments(data, name, type)
        self.space.read(lambda keys: None)  # the document exists (or NOT_FOUND) before a file is written
        blob_id = uuid7()
        try:
            size, sha256 = blobfiles.write_blob(self.directory, blob_id, _chunks(data), self.options.sync)
        except OSError as exc:  # (write_blob removed what it wrote)
            raise storage_error(f"{where}: writing a blob", exc) from None
        meta = {"_id_": blob_id, "name": name, "type": type, "size": size, "sha256": sha256, "created": _now_s()}

        def fn(keys) -> str:
            keys.put(encode_key(blob_id), encode(meta))
            self.space.own(keys, blob_id)
            return blob_id

        try:
            return self.space.write(fn)
        except BaseException:
            _unlink_quietly(self.directory / blob_id)
            raise

    def load(self, docs: list) -> dict:
        """Restore blobs with their own ids (for a dump's restore): ``{_id_, data, name, type, sha256?, created?}``.

        A given ``sha256`` is checked against the bytes written; an id the store already
        has is refused. Every file is written (and fsynced) before the records of all of
        them commit in one write.
        """
        where = self.space.where
        self.space.read(lambda keys: None)
        written, metas = [], []
        try:
            for i, doc in enumerate(docs):
                if not isinstance(doc, Mapping) or "_id_" not in doc or "data" not in doc:
                    raise BadValueError(f"{where}.load: blob {i} must be a document {{_id_, data, name, type}}")
                blob_id = _blob_id(doc["_id_"])
                if (self.directory / blob_id).exists() or blob_id in written:  # ids are unique in a bucket
                    raise DuplicateKeyError(f"{where}.load: blob {blob_id} exists already in bucket "
                                            f"{self.space.bucket!r}")
                data, name, type = _put_arguments(doc["data"], doc.get("name"), doc.get("type"))
                size, sha256 = blobfiles.write_blob(self.directory, blob_id, _chunks(data), self.options.sync)
                written.append(blob_id)
                if doc.get("sha256") is not None and doc["sha256"] != sha256:
                    raise CorruptDataError(f"{where}.load: blob {blob_id} has sha256 {sha256}, but its dump "
                                           f"recorded {doc['sha256']}; the dump is damaged: load it from another copy")
                metas.append({"_id_": blob_id, "name": name, "type": type, "size": size, "sha256": sha256,
                              "created": doc.get("created") or _now_s()})

            def fn(keys) -> dict:
                for meta in metas:
                    if keys.get(encode_key(meta["_id_"])) is not None or self.space.owned(keys, meta["_id_"]):
                        raise DuplicateKeyError(f"{where}.load: blob {meta['_id_']} exists already")
                    keys.put(encode_key(meta["_id_"]), encode(meta))
                    self.space.own(keys, meta["_id_"])
                return {"loaded": len(metas)}

            return self.space.write(fn)
        except BaseException:
            for blob_id in written:
                _unlink_quietly(self.directory / blob_id)
            raise

    def delete(self, key: Any) -> dict:
        """Remove a blob: ``{"deleted": 1}``; an unknown id answers NOT_FOUND. The file goes after the commit."""
        blob_id = self._lookup(_blob_id(key))["_id_"]

        def fn(keys) -> dict:
            gone = keys.delete(encode_key(blob_id))
            self.space.disown(keys, blob_id)
            return {"deleted": int(gone)}

        got = self.space.write(fn)
        _unlink_quietly(self.directory / blob_id)
        return got

    def list(self, after: Any = None, limit: int = 100) -> list:
        """Info dicts of up to ``limit`` blobs in DbID order (so, oldest first), after the id ``after``."""
        check_limit(limit, self.options.max_peek, "list")
        start = None if after is None else encode_key(_blob_id(after, "list after"))
        return self.space.read(lambda keys: [decode(v) for _, v in keys.items(after=start, limit=limit)])

    def length(self) -> int:
        return self.space.read(lambda keys: keys.count)

    # -- the storage BlobReads reads -------------------------------------------------------

    def _lookup(self, blob_id: str) -> dict:
        raw = self.space.read(lambda keys: keys.get(encode_key(blob_id)))
        if raw is None:
            raise NotFoundError(f"{self.space.where} has no blob {blob_id}")
        return decode(raw)

    def _open_blob(self, blob_id: str, record: dict):
        try:
            return open(self.directory / blob_id, "rb")
        except FileNotFoundError:
            raise CorruptDataError(f"{self.space.where}: the file of blob {blob_id} is missing; restore it from a "
                                   "backup or delete the blob") from None

    def _corrupt(self, blob_id: str, record: dict, size: int, sha256: str) -> CorruptDataError:
        return CorruptDataError(
            f"{self.space.where}: blob {blob_id} is corrupt: sha256 on disk {sha256} differs from "
            f"{record['sha256']} recorded at put. Restore it from a backup, or delete it."
        )

    def _got(self, record: dict, data: bytes) -> dict:
        return {**record, "data": data}


def _replay(records: list[dict]) -> dict[str, dict]:
    """The live blobs an index's records give, in order: a put adds its id, a del removes it."""
    live: dict[str, dict] = {}
    for record in records:
        if record["op"] == "put":
            live[record["_id_"]] = record
        else:
            live.pop(record["_id_"], None)
    return live


def _check_blobs(directory: Path, records: list[dict], end: int, size: int, mark: dict | None,
                 names: list[str]) -> Iterator[tuple[Problem, str | None]]:
    """What a check of a blob bucket finds (:meth:`BlobStore.check`), as ``(problem, about)``:
    ``about`` the blob id (or file name) a problem is about, None for one of the index.

    ``records`` are the index's whole records, which end at byte ``end`` of a file that should
    be whole up to ``size``; ``mark`` the clean close's counts (or None); ``names`` the names
    in the bucket's folder. Every blob the records leave live is read and hashed.
    """
    fix_file = "restore the file from a backup, or delete the blob"
    files = {n for n in names if _ID_TEXT.fullmatch(n) and (directory / n).is_file()}
    if end < size:
        yield Problem(INDEX_NAME, f"the entry at byte {end} fails its checksum ({size - end} bytes from there on do "
                                  "not check): the records from there on are lost"), None
    if mark is not None and (mark["records"], mark["end"]) != (len(records), end):
        yield Problem(INDEX_NAME, f"held {mark['records']} records ({mark['end']} bytes) when the bucket was closed "
                                  f"cleanly, and holds {len(records)} ({end} bytes): it was cut short, replaced or "
                                  "written to since"), None
    live = _replay(records)
    for name in sorted(files - live.keys()):
        yield Problem(name, "the index does not name this blob file",
                      "restore _index.bson from a backup, or delete the file"), name
    for blob_id in sorted(i for i in live if not _ID_TEXT.fullmatch(i)):
        yield Problem(repr(blob_id), f"the index names a blob whose id {blob_id!r} is not a DbID (a lowercase UUID, "
                                     "nothing around it): no put accepts it",
                      "dump the bucket, delete that blob from the dump, and restore it"), None
    own = {INDEX_NAME, blobfiles.CLOSED_NAME}
    for name in names:
        if name not in own and not _ID_TEXT.fullmatch(name) and not name.startswith(TEMP_PREFIX):
            yield Problem(repr(name), "this file's name is not a blob's id (a lowercase UUID, nothing around it): no "
                                      "blob of the bucket is read from it", "move it out of the bucket's folder"), None
    for blob_id in sorted(live):
        record = live[blob_id]
        missing = Problem(blob_id, f"the file of blob {blob_id} (name {record.get('name')!r}, {record.get('size')} "
                                   "bytes) is missing", fix_file)
        if blob_id not in files:
            yield missing, blob_id
            continue
        try:
            found_size, sha256 = blobfiles.file_digest(directory / blob_id)
        except FileNotFoundError:  # deleted since the folder was listed
            yield missing, blob_id
            continue
        if sha256 != record.get("sha256") or found_size != record.get("size"):
            yield Problem(blob_id, f"blob {blob_id} is corrupt: its file has {found_size} bytes of sha256 {sha256}, "
                                   f"recorded at put {record.get('size')} bytes of {record.get('sha256')}",
                          fix_file), blob_id


def _put_arguments(data: Any, name: Any, type: Any) -> tuple[Any, str | None, str | None]:
    """``(data, name, type)`` from either call form, checked; nothing is written yet."""
    if isinstance(data, Mapping):
        extra = sorted(set(data) - set(_PUT_FIELDS))
        if extra:
            raise BadValueError(
                f"put document has unknown field(s) {', '.join(map(str, extra))}; "
                "accepted: data, name, type"
            )
        if "data" not in data:
            raise BadValueError("put document needs a data field: {data: <bytes>, name: ..., type: ...}")
        for field, given in (("name", name), ("type", type)):
            if field in data and given is not None:
                raise BadValueError(f"put got {field} twice: in the document and as an argument; give it once")
        name = data.get("name", name)
        type = data.get("type", type)
        data = data["data"]
        if isinstance(data, Mapping):
            raise BadValueError(
                "put document's data must be bytes, bytearray, memoryview or a binary file object; "
                "got a document"
            )
    if not isinstance(data, (bytes, bytearray, memoryview)):
        read = getattr(data, "read", None)
        if not callable(read):
            hint = " (encode text first, such as text.encode())" if isinstance(data, str) else ""
            raise BadValueError(f"put data must be {_ACCEPTED}; got {_kind(data)}{hint}")
        if isinstance(data, io.TextIOBase):
            raise BadValueError("put data is a file opened in text mode; open it in binary mode ('rb')")
    _check_label("name", name)
    _check_label("type", type)
    return data, name, type


def _check_label(what: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise BadValueError(f"blob {what} must be a string or null, got {_kind(value)}: {value!r:.80}")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadValueError(f"blob {what} is not valid Unicode text: {exc}") from None
    if len(encoded) > MAX_LABEL_BYTES:
        raise BadValueError(f"blob {what} is {len(encoded)} bytes of UTF-8; the limit is {MAX_LABEL_BYTES}")


def _blob_id(id: Any, what: str = "blob id") -> str:
    """The DbID text of an id given as a string, a uuid.UUID, or the document ``{_id_: id}``."""
    if isinstance(id, Mapping):
        if "_id_" not in id:
            raise BadValueError(f"{what} document must be {{_id_: \"<DbID>\"}}, got fields {', '.join(map(str, id))}")
        id = id["_id_"]
    if isinstance(id, uuid.UUID):
        return str(id)
    if not isinstance(id, str):
        raise BadValueError(f"{what} must be a DbID string or {{_id_: \"<DbID>\"}}, got {_kind(id)}: {id!r:.80}")
    text = id.lower()
    if not _ID_TEXT.fullmatch(text):
        raise BadValueError(f"{what} {id!r:.80} is not a DbID (a UUID such as 0192a3b4-c5d6-7890-abcd-ef12345678a1)")
    return text


def _info(record: dict) -> dict:
    return {
        "_id_": record["_id_"], "name": record["name"], "type": record["type"],
        "size": record["size"], "sha256": record["sha256"], "created": record["created"],
    }


def _now_ms() -> datetime.datetime:
    """Now in UTC, to the millisecond: what a BSON date keeps, so a reopened index reads the same."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _now_s() -> datetime.datetime:
    """Now in UTC, to the second: what a blob store field records as ``created`` (see docs/dev/blobs.md)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
