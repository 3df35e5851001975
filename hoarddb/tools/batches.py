"""Writing a file's documents in batches of one write each, finding the bad ones of a refused batch, and
reading pages small enough for one message.

Every batch is one operation (``batch_put``, ``batch_push``, ``load``…), so the engine
writes all of it or none of it. When the engine refuses a batch because of one of its
documents (a duplicate unique value, a document too large, a bad key), the writer
halves the batch and writes each half, down to the single documents that are refused:
so the documents before a bad one are loaded, the bad one is reported with its file,
number and offset, and — with ``on_error="skip"`` — the documents after it are loaded
too. With ``on_error="stop"`` nothing after the first bad document is written.

A refused write leaves nothing behind, so a batch is never partly in the bucket: what
is loaded is exactly the documents the writes that succeeded carried, and the report
says which those are.

A hash bucket's write replaces the document of the same key. With ``track_keys``, the
writer remembers the key (``Record.key``) of every document written from the file and
reports a later document with the same key as a replacement of the earlier one (in the
report's ``replaced``), so "loaded" and what the bucket holds never differ silently.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Any, Callable

from ..errors import (BadValueError, DocumentTooLargeError, DuplicateKeyError, HoardError, InvalidArgumentError,
                      MissingKeyError, NotADocumentError)
from .readers import Record
from .report import BucketReport, Refusal, Replacement

#: Errors that blame a document of the batch rather than the database: the batch is split to find it.
DOCUMENT_ERRORS = (DuplicateKeyError, BadValueError, DocumentTooLargeError, NotADocumentError, MissingKeyError,
                   InvalidArgumentError)
#: Documents per write.
BATCH_SIZE = 1000
#: Bytes of BSON per write at most (a batch of large documents is cut sooner): well under
#: the wire's one-message limit (16 MiB and a little), so a batch is one message to a server.
BATCH_BYTES = 8 * 1024 * 1024
ON_ERROR = ("stop", "skip")


class Stop(Exception):
    """Stop ends the loading of a file (on_error=stop met a bad document, or a fatal error)."""


class BatchWriter:
    """BatchWriter gathers records into batches and writes each with ``write(docs)``.

    ``report`` receives the count of loaded documents and every refusal. ``on_result``
    sees each successful write's result (restore collects unique-index conflicts from
    ``load``). ``write_one(doc)``, when given, writes a batch of one (``put`` for
    ``batch_put``), so a refusal found by halving is worded for that document alone.
    ``track_keys`` reports each document written whose key an earlier written document of
    the file had (it replaced that one) in ``report.replaced``; it holds every key of the
    file in memory (under 100 bytes each). ``add`` raises :class:`Stop` when loading must end.
    """

    def __init__(self, write: Callable[[list], Any], report: BucketReport, *, on_error: str = "stop",
                 batch_size: int = BATCH_SIZE, batch_bytes: int = BATCH_BYTES,
                 on_result: Callable[[Any], None] | None = None, write_one: Callable[[Any], Any] | None = None,
                 stop_hint: str = "fix it, or use --on-error skip, and run again", track_keys: bool = False):
        if on_error not in ON_ERROR:
            raise BadValueError(f"on_error is \"stop\" or \"skip\", got {on_error!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise BadValueError(f"batch_size is a positive number of documents, got {batch_size!r}")
        self._write = write
        self._write_one = write_one
        self.stop_hint = stop_hint
        self.report = report
        self.on_error = on_error
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.on_result = on_result
        self._pending: list[Record] = []
        self._bytes = 0
        #: key -> the number of the last document written with it, or (number, line) in JSON Lines (track_keys).
        self._written: dict[bytes, int | tuple[int, int]] | None = {} if track_keys else None

    def add(self, record: Record) -> None:
        """Queue a record; write a batch when one is full. Raises Stop when loading must end."""
        if record.error is not None:
            self.refuse(record, record.error, record.code or "BAD_INPUT", fatal=record.fatal)
            return
        if self._pending and self._bytes + record.size > self.batch_bytes:
            self.flush()
        self._pending.append(record)
        self._bytes += record.size
        if len(self._pending) >= self.batch_size:
            self.flush()

    def refuse(self, record: Record, reason: str, code: str, fatal: bool = False) -> None:
        """Report ``record`` as not loaded; stop when on_error is stop or nothing after it can be read."""
        if self.on_error == "stop" or fatal:
            self.flush()  # everything before the bad document is loaded
        self.report.refused.append(_refusal(self.report.file, record, reason, code))
        if fatal:
            self.report.stopped = (f"the file cannot be read past document {record.number} (byte {record.offset}); "
                                   "nothing after it was loaded")
            raise Stop
        if self.on_error == "stop":
            self.report.stopped = (f"document {record.number} was refused, and nothing after it was loaded"
                                   + (f" ({self.stop_hint})" if self.stop_hint else ""))
            raise Stop

    def flush(self) -> None:
        """Write what is pending."""
        batch, self._pending, self._bytes = self._pending, [], 0
        if batch:
            self._write_batch(batch)

    def _write_batch(self, batch: list[Record]) -> None:
        try:
            if len(batch) == 1 and self._write_one is not None:  # its refusal then speaks of it alone
                result = self._write_one(batch[0].doc)
            else:
                result = self._write([r.doc for r in batch])
        except DOCUMENT_ERRORS as exc:
            if len(batch) == 1:
                self.refuse(batch[0], exc.message, exc.codeName)
                return
            half = len(batch) // 2
            self._write_batch(batch[:half])  # raises Stop when on_error is stop
            self._write_batch(batch[half:])
            return
        except HoardError as exc:
            self.report.error = f"{exc.codeName}: {exc.message}"
            self.report.stopped = (f"the database refused a write of documents {batch[0].number} to "
                                   f"{batch[-1].number}: nothing from document {batch[0].number} on was loaded")
            raise Stop from exc
        self.report.documents += len(batch)
        if self._written is not None:
            self._remember(batch)
        if self.on_result is not None:
            self.on_result(result)


    def _remember(self, batch: list[Record]) -> None:
        """Note the keys of a written batch, and the documents among them that replaced an earlier one."""
        written = self._written
        for r in batch:
            if r.key is None:
                continue
            earlier = written.get(r.key)
            if earlier is not None:
                number, line = earlier if type(earlier) is tuple else (earlier, None)
                self.report.replaced.append(Replacement(
                    file=self.report.file, number=r.number, offset=r.offset, line=r.line, earlier=number,
                    earlier_line=line))
            written[r.key] = r.number if r.line is None else (r.number, r.line)


def _refusal(file: str, record: Record, reason: str, code: str) -> Refusal:
    return Refusal(file=file, number=record.number, offset=record.offset, line=record.line, reason=reason, code=code)


@contextmanager
def fewer_collections(threshold: int = 50_000):
    """Run the body with the garbage collector's first generation collected less often.

    Loading creates a few containers per document and no reference cycles, so the
    default threshold (700 allocations) spends about a quarter of an ingest's time
    scanning young objects for cycles there are none of. The old thresholds are put
    back on exit. (Measured: 18k -> 25k documents/s on bench/ingest.py.)
    """
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], threshold), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def blob_data(bucket: Any, fh: Any) -> Any:
    """A blob's bytes as ``bucket``'s client sends them: the open file itself. Embedded, the
    engine streams it from disk; a server client uploads it in chunks (a one-blob ``load``,
    like a ``put``), so a large blob is never whole in memory either way."""
    return fh


def shrinking(read: Callable[[int], Any], limit: int) -> tuple[Any, int]:
    """``read(limit)``, halving ``limit`` while its answer is too large for one message; (answer, limit)."""
    while True:
        try:
            return read(limit), limit
        except DocumentTooLargeError:
            if limit <= 1:
                raise
            limit = max(1, limit // 2)
