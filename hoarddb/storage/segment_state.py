"""A segment log's state file and durability: the head's slot writes, the flush with sync off, and the clean close.

:class:`SegmentState` is a mixin of :class:`hoarddb.storage.segment.SegmentLog`: it
writes the log's own fields (head, cut, counts, identity) into ``state.bson`` and
decides when a write is fsynced, so its methods are the log's, kept here so that a
reader of appends and takes need not hold them.

``state.bson`` is never rewritten whole and never renamed. It is two fixed 512-byte slots
(as LMDB keeps two meta pages); update number ``seq`` goes to slot ``seq % 2`` with one
``pwrite`` and one fdatasync, so the slot the previous update wrote stays whole whatever
happens to this one::

    0                              512                            1024
    +------------------------------+------------------------------+
    | slot 0 (even seq)            | slot 1 (odd seq)             |
    | len u32 | crc32 u32 | BSON   | len u32 | crc32 u32 | BSON   |
    | ... zero padding ...         | ... zero padding ...         |
    +------------------------------+------------------------------+
    BSON = {seq, head_segment, head_offset, popped, cut_segment, cut_offset, cut_above,
            queue, tagged_from, closed?}

The opener reads both slots and keeps the one that checks with the higher ``seq``; a torn
or corrupt slot is the update that did not finish (or a damaged sector), and the other
slot is the state before it. ``popped`` counts entries ever taken from the head. A clean
close (:meth:`SegmentLog.close`) writes its state into both slots, one after the other,
so after it a damaged slot loses nothing: the other holds the same state, whole.
"""

from __future__ import annotations

import logging
import os

from ..errors import StorageError
from ..values.codec import encode
from . import framing, segment_flush, segment_format
from .oserrors import pwrite_all
from .segment_flush import File, Taken
from .segment_format import SLOT_SIZE, STATE_FILE

log = logging.getLogger("hoarddb.segment")

#: The state file's key among a log's files in segment_flush (segments are numbered from 1).
STATE_KEY = -1


class SegmentState:
    """SegmentState records the log's head durably, and makes its other writes durable when asked."""

    def _write_state(self, head: tuple[int, int] | None = None, popped: int | None = None,
                     cut: tuple[int, int, int] | None = None, durable: bool = True,
                     closed: dict | None = None, always: bool = False) -> None:
        """Durably record the head (and cut): one pwrite into the slot the last update did not use, one fsync.

        ``durable=False`` skips the fsync (a later fsync of the file, or a flush, covers it),
        as ``sync`` off does, unless ``always``.
        ``closed``: the counts a clean close records (:meth:`close`); any other update
        leaves them out, which says the log is open. The first update after a clean close
        is always flushed, even with sync off: until it is on disk, the opener would take a
        change to any other file (a flush puts segments first) for damage. So is the first
        that records the log's identity, which must be on disk before a segment carrying it is.
        """
        reopening = (self._clean and closed is None) or not self._identity_durable
        self._clean = False  # this update says the log is open (unless it is the close's own)
        seq = self._seq + 1
        data = self._slot_bytes(seq, closed, head, popped, cut)
        slot = seq % 2
        if seq == 0:
            data += bytes(SLOT_SIZE)
        try:
            pwrite_all(self._state_fd, data, slot * SLOT_SIZE)
            if (self.sync and durable) or always or reopening:
                segment_format.datasync(self._state_fd)
                self._identity_durable = True
            else:
                self._dirty_state = True
        except OSError as exc:
            # The slot may hold the new state or not; the opener will know, this log cannot.
            raise self._fail(exc, self.directory / STATE_FILE) from None
        self._seq = seq

    def _slot_bytes(self, seq: int, closed: dict | None = None, head: tuple[int, int] | None = None,
                    popped: int | None = None, cut: tuple[int, int, int] | None = None) -> bytes:
        """The 512 bytes of state update ``seq``: the head and cut given, else the log's own."""
        head = head or self._head
        cut = cut or self._cut
        doc = {
            "seq": seq, "head_segment": head[0], "head_offset": head[1],
            "popped": self._popped if popped is None else popped,
            "cut_segment": cut[0], "cut_offset": cut[1], "cut_above": cut[2],
            "queue": self._queue, "tagged_from": self._tagged_from,
        }
        if closed is not None:
            doc["closed"] = closed
        framed = framing.frame(encode(doc))
        assert len(framed) <= SLOT_SIZE, "a state document outgrew its slot"
        return framed.ljust(SLOT_SIZE, b"\0")

    def flush(self) -> None:
        """Make every change so far durable: what each write does itself when ``sync`` is on.

        Segments first, then the state, then the directory, so a crash inside leaves
        states the opener already knows (see the module's docstring). An engine flushes
        the logs of a whole group together (hoarddb.storage.segment_flush), this one alone.
        """
        segment_flush.flush([self])

    def _take_dirty(self) -> Taken:
        """What is unflushed, taken (holding the lock): duplicated descriptors of the dirty
        segments and of the state, each with its size and whether its writes only
        overwrite blocks on disk, and whether the directory is dirty.

        What is taken is synced outside the lock, so appends and pops go on meanwhile
        (they are the next group's); duplicated descriptors stay valid even if a pop
        unlinks and closes a segment meanwhile."""
        taken = Taken(directory=self._dirty_dir, reshapes=self._reshapes)
        for n in sorted(n for n in self._dirty if n in self._sizes):
            taken.segments.append(self._taken_file(self._fd(n), n))
        if self._dirty_state:
            taken.state = self._taken_file(self._state_fd, STATE_KEY)
        self._dirty.clear()
        self._dirty_state = self._dirty_dir = False
        return taken

    def _taken_file(self, fd: int, key: int) -> File:
        size = os.fstat(fd).st_size
        return File(os.dup(fd), size, size <= self._durable.get(key, -1), key)

    def _flushed(self, taken: Taken) -> None:
        """Note the sizes a flush made durable, unless a file was truncated or created since it was taken."""
        with self._lock:
            if self._reshapes == taken.reshapes:
                for f in taken.files():
                    self._durable[f.key] = max(f.size, self._durable.get(f.key, 0))

    def _reshaped(self, number: int) -> None:
        """Segment ``number`` was truncated or created: its size on disk is not known durable any more."""
        self._durable.pop(number, None)
        self._reshapes += 1

    def close(self) -> None:
        """Make every change durable, record a clean close, and close the files; later calls
        raise ClosedError. Idempotent.

        The clean close is a state update (into the next slot, as any) that also holds
        the log's counts — entries, segment files, the last one's number and the bytes
        of whole entries (where the entries of each segment end, its identity counted)::

            {seq, head_segment, ..., closed: {entries, segments, last, bytes}}

        It comes after everything else is on disk, so the next open knows that nothing
        was being written, and that files which do not match these counts, or do not
        check to their end, were damaged since: it refuses them instead of cutting
        entries away as it does after a crash. A log whose writes failed (see _fail) is
        not marked; nor is anything if the flush or the state write fails (logged).

        It is written twice, update ``seq`` then ``seq + 1`` (the other slot), each
        fdatasync'd before the next write: both slots then hold the same state, so damage
        to either after the close loses nothing (the opener uses the other, whole, and
        writes the damaged one again), where one copy would leave the update before the
        close, which the opener must take for a crash. A crash between the two writes
        leaves one copy and the update before it, as a close from before this did.
        """
        with self._lock:
            if self._closed:
                return
            try:
                if self._failed is None and not self._clean and self._state_fd is not None:
                    segment_flush.write_through([(self, self._take_dirty())])
                    totals = self._totals()
                    for _copy in range(2):  # one slot, then (once that is on disk) the other
                        self._write_state(durable=False, closed=totals)
                        segment_format.datasync(self._state_fd)
                    self._clean = True
            except (OSError, StorageError) as exc:
                log.warning("%s: could not record a clean close (%s); the next open treats it as after a crash",
                            self.directory, getattr(exc, "message", None) or exc)
            finally:
                self._closed = True
                self._close_files()

    def _totals(self) -> dict:
        """What a clean close records of the log, and the opener checks against the files."""
        return {"entries": self._length, "segments": len(self._segs),
                "last": self._segs[-1] if self._segs else 0, "bytes": sum(self._sizes.values())}
