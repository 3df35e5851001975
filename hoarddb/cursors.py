"""The open cursors of a database: the rest of a find, search, range, list or aggregate answer, handed out a batch at a time.

A read asked with ``batch_size`` (every Python client asks so) answers its first batch;
when more remain the answer carries ``cursor``, an id, and ``more`` with that id answers
the next batch, until an answer comes without ``cursor`` (the end). ``close_cursor``
ends one early. A batch holds at most ``batch_size`` documents (the first one's default
is 101, as MongoDB's; a later one's is no count but :data:`MORE_BYTES`, 1 MiB) and at most
:data:`BATCH_BYTES` of BSON, so the 16 MiB message limit bounds one document and one
batch, never a result.

A cursor is a Python iterator over the store's read (``stream=True`` on the store
method): it reads in chunks, each in a fresh LMDB read transaction that it ends before it
hands the chunk out (hoarddb/stores/resumable.py). So a cursor waiting for its next
``more`` holds no LMDB reader slot and no transaction: abandoned cursors cannot use up
``max_readers``, and a long read is not one snapshot (as MongoDB's cursors are not). What
it holds is at most one chunk of documents, and the sorted result when it sorts in memory
(bounded by ``stage_memory_bytes``, refused past it, never spilled).

Idle cursors are closed after ``cursor_timeout`` seconds unread (checked at every open and
``more``, and by a server every second or so); at most ``max_cursors`` are open at once.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any, Callable, Iterator

from .errors import BadValueError, CursorNotFoundError, LimitExceededError
from .values.codec import encode_checked

#: The documents a first batch holds when ``batch_size`` says nothing else (MongoDB's default).
FIRST_BATCH = 101
#: The most bytes of documents one batch holds: under the 16 MiB message limit with room for
#: the answer's own fields. A document alone bigger than this (up to 16 MiB) is a batch of one.
BATCH_BYTES = 16 * 1024 * 1024 - 64 * 1024
#: The most bytes of a later batch when ``more`` names no batch_size. Smaller than a message:
#: a batch is built whole before it is sent and decoded whole after, so a reader waits for
#: the server and the server for the reader; batches of about a MiB keep both busier (a
#: find of 200,000 documents of 250 bytes over the wire: 14k documents/s with 16 MiB batches,
#: 27k to 31k with 0.1 to 0.5 MiB; bench/stream.py), and hold less on both sides.
MORE_BYTES = 1024 * 1024
#: How many times a second at most the idle cursors are looked for (their timeout is minutes).
_EXPIRE_EVERY = 1.0

_END = object()


def check_batch_size(value: Any, what: str = "batch_size") -> int | None:
    """``value`` as a batch size (None: the default); BadValueError unless a whole number ≥ 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadValueError(f"{what} is a whole number of documents ≥ 0 (0: none in this batch, only the cursor), "
                            f"got {value!r:.40}")
    return value


class Cursor:
    """Cursor is one open cursor: where its documents come from, and the one read ahead."""

    __slots__ = ("id", "what", "source", "ahead", "used", "lock", "on_error", "on_close")

    def __init__(self, cursor_id: int, what: str, source: Iterator, on_error: Callable | None,
                 on_close: Callable | None = None):
        self.id = cursor_id
        self.what = what  # "find on app.Users", for messages
        self.source = source
        self.ahead: Any = _END  # a document read but not yet handed out
        self.used = time.monotonic()
        self.lock = threading.Lock()  # one batch at a time
        self.on_error = on_error  # turns an error of the read into what the caller hears
        self.on_close = on_close  # frees what the source holds elsewhere (a cluster cursor's owners' cursors)

    def batch(self, size: int | None, room: int = BATCH_BYTES) -> tuple[list, bool]:
        """The next batch (at most ``size`` documents, at most ``room`` bytes), and whether more remain."""
        out: list = []
        taken = 0
        source = self.source
        doc = self.ahead
        self.ahead = _END
        if size == 0:
            if doc is _END:
                doc = next(source, _END)
            self.ahead = doc
            return out, doc is not _END
        while True:
            if doc is _END:
                doc = next(source, _END)
                if doc is _END:
                    return out, False
            # its bytes in the answer's array: its BSON, a type byte, and its index as a C string
            n = len(encode_checked(doc, "a document of the answer")) + 2 + len(str(len(out)))
            if out and taken + n > room:
                self.ahead = doc
                return out, True
            out.append(doc)
            taken += n
            doc = _END
            if size is not None and len(out) >= size:
                doc = next(source, _END)
                self.ahead = doc
                return out, doc is not _END


class Cursors:
    """Cursors is the open cursors of one engine, by id."""

    def __init__(self, timeout: float, max_open: int, metrics=None, max_batch_bytes: int | None = None):
        self.timeout = timeout
        #: The most bytes of one batch: BATCH_BYTES, or an engine's max_answer_bytes when smaller.
        self.room = min(BATCH_BYTES, max_batch_bytes or BATCH_BYTES)
        self.max_open = max_open
        self.metrics = metrics
        self._open: dict[int, Cursor] = {}
        self._lock = threading.Lock()
        self._looked = 0.0
        self.timed_out = 0

    def __len__(self) -> int:
        return len(self._open)

    def ids(self) -> list:
        """The ids of the open cursors."""
        return list(self._open)

    def __contains__(self, cursor_id: Any) -> bool:
        return cursor_id in self._open

    def open(self, what: str, source, batch_size: int | None, on_error: Callable | None = None,
             on_close: Callable | None = None) -> dict:
        """The answer's fields of a new read: ``{result: first batch}``, and ``cursor`` when more remain.
        ``on_close`` is called once the cursor is dropped (read to its end, closed, timed out), not
        under this object's lock."""
        self.expire()
        cursor = Cursor(0, what, iter(source), on_error, on_close)
        size = FIRST_BATCH if batch_size is None else batch_size
        try:
            batch, more = cursor.batch(size, self.room)
        except Exception as exc:
            if on_error is not None:
                on_error(exc)
            raise
        if not more:
            return {"result": batch}
        with self._lock:
            if len(self._open) >= self.max_open:
                raise LimitExceededError(
                    f"{what}: {len(self._open)} cursors are open, the most there may be (max_cursors); read open "
                    "cursors to their end or close them (close_cursor), or ask for fewer documents (limit) or "
                    "bigger batches (batch_size). Idle ones close after cursor_timeout")
            while True:
                cursor_id = secrets.randbits(63)
                if cursor_id and cursor_id not in self._open:
                    break
            cursor.id = cursor_id
            self._open[cursor_id] = cursor
            self._gauge()
        return {"result": batch, "cursor": cursor_id}

    def more(self, cursor_id: Any, batch_size: Any = None) -> dict:
        """The answer to ``more``: ``{result: the next batch}``, and ``cursor`` while more remain."""
        size = check_batch_size(batch_size, "more's batch_size")
        cursor = self._get(cursor_id)
        with cursor.lock:
            if self._open.get(cursor_id) is not cursor:  # closed while this waited for it
                raise self._not_found(cursor_id)
            try:
                batch, more = cursor.batch(size, self.room if size is not None else min(MORE_BYTES, self.room))
            except Exception as exc:
                self._drop(cursor_id)
                if cursor.on_error is not None:
                    cursor.on_error(exc)
                raise
            cursor.used = time.monotonic()
        if not more:
            self._drop(cursor_id)
            return {"result": batch}
        self.expire()
        return {"result": batch, "cursor": cursor_id}

    def close(self, ids: Any) -> int:
        """Close the cursors of ``ids`` (one id or a list); how many were open."""
        ids = ids if isinstance(ids, list) else [ids]
        closed = 0
        for cursor_id in ids:
            if self._drop(cursor_id) is not None:
                closed += 1
        return closed

    def close_all(self) -> None:
        with self._lock:
            dropped = list(self._open.values())
            self._open.clear()
            self._gauge()
        for cursor in dropped:
            _closed(cursor)

    def expire(self, now: float | None = None) -> int:
        """Close the cursors unread for ``timeout`` seconds; how many. Looks at most once a second
        unless ``now`` is given."""
        if not self.timeout:
            return 0
        clock = time.monotonic()
        if now is None:
            if clock - self._looked < _EXPIRE_EVERY:
                return 0
            now = clock
        self._looked = clock
        stale = [c for c in list(self._open.values()) if now - c.used > self.timeout and not c.lock.locked()]
        n = 0
        for cursor in stale:
            if self._drop(cursor.id) is cursor:
                n += 1
        if n:
            self.timed_out += n
            if self.metrics is not None:
                self.metrics.cursors_timed_out.inc(n)
        return n

    # -- inside

    def _get(self, cursor_id: Any) -> Cursor:
        if isinstance(cursor_id, bool) or not isinstance(cursor_id, int):
            raise BadValueError(f"a cursor id is the integer an answer's 'cursor' gave, got {cursor_id!r:.40}")
        self.expire()
        cursor = self._open.get(cursor_id)
        if cursor is None:
            raise self._not_found(cursor_id)
        return cursor

    def _not_found(self, cursor_id: Any) -> CursorNotFoundError:
        return CursorNotFoundError(
            f"cursor {cursor_id} is not open: it was read to its end, closed, left unread longer than "
            f"cursor_timeout ({self.timeout:g} s), or its connection closed; run the read again "
            "(with skip, or a filter past the last document you had, to go on from there)", cursor=cursor_id)

    def _drop(self, cursor_id: Any) -> Cursor | None:
        with self._lock:
            try:
                cursor = self._open.pop(cursor_id, None)
            except TypeError:  # an unhashable id: none such is open
                return None
            if cursor is not None:
                self._gauge()
        if cursor is not None:
            _closed(cursor)
        return cursor

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.cursors_open.set(len(self._open))


def _closed(cursor: Cursor) -> None:
    """Run a dropped cursor's ``on_close``, once."""
    on_close, cursor.on_close = cursor.on_close, None
    if on_close is not None:
        on_close()


def batches(first: dict, more: Callable[[int], dict]) -> Iterator[list]:
    """Every batch of a read whose first answer is ``first``, asking ``more(cursor_id)`` for the rest."""
    answer = first
    while True:
        yield answer.get("result") or []
        cursor_id = answer.get("cursor")
        if not cursor_id:
            return
        answer = more(cursor_id)

