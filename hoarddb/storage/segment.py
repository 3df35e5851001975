"""Segment files: the append-only log of entries under a fifo or lifo bucket, consumed from either end.

A :class:`SegmentLog` owns every file of one fifo or lifo bucket directory::

    <bucket>/
      state.bson       two fixed slots holding the head pointer (and a pending cut): segment_state.py
      seg_00001.fifo   the log's identity (32 bytes, see segment_header), then entries, each
      seg_00002.fifo   framed by hoarddb.storage.framing: | len | crc32 | BSON |   (".lifo" in a lifo bucket)

Entries are appended to the last segment; a segment holds at most ``segment_size``
bytes, and an entry that would cross that starts the next segment (an entry larger than
a whole segment goes alone into a fresh one). Segment numbers only grow and are never
reused, so a name always means the same file (save a last segment that a crash left
without an acknowledged entry: the opener removes it, and the next segment takes its
number, so that a fifo's numbering has no gap).

The log is a deque: a fifo bucket takes entries from the head (:meth:`SegmentLog.take_head`),
a lifo bucket from the tail (:meth:`SegmentLog.take_tail`). The log deals in payload bytes
(BSON); documents are the stores' business.

What each write does, and what a crash at each step leaves (``sync`` on; with ``sync``
off every fsync below is skipped, and a power cut may lose writes a kill would not,
until :meth:`SegmentLog.flush` fsyncs what was left unsynced):

* **append** (push, batch_push): one ``pwrite`` of all the batch's frames per segment it
  lands in (nearly always one), one fdatasync of each such segment, and one fsync of
  the directory when a segment file was created. A kill inside the write leaves a torn
  tail: the opener cuts the last segment back to its last whole entry and logs a
  warning naming the file and the bytes cut. A torn batch leaves none of its entries:
  all but its last carry the MORE bit, and the opener cuts a batch whose last entry is
  missing. With preallocation (a fifo's log) the last segment also ends in zeros the
  appends write over, see *Preallocation* below.
* **take_head** (fifo pop): one write of ``state.bson`` (pwrite + fdatasync) moves the head
  over every popped entry; this is the commit. Segments the head has left are unlinked
  after it; a crash in between leaves them, and the opener unlinks every segment
  numbered below the head. A pop that empties the queue while its last segment holds
  1 MiB or more (or half a segment) moves the head to the number the next segment will
  have, so an empty queue does not keep a big file.
* **take_tail** (lifo pop): within the last segment, ``ftruncate`` to the first popped
  entry and one fdatasync: the commit is the truncation. A pop that exactly empties the
  last segment unlinks it and fsyncs the directory. A pop spanning more segments than
  that cannot commit with one file operation, so it first writes a *cut*
  ``(segment, offset, above)`` into ``state.bson`` (the commit), then truncates and
  unlinks, and fsyncs both before returning. The opener finishes a cut whose doomed
  segments (numbered in ``(segment, above]``) still exist; once they are gone the cut
  is inert, since new segments are numbered above ``above``.

``state.bson`` holds the head in two slots written in turn, drawn in
:mod:`hoarddb.storage.segment_state` beside the code that writes them.

**Identity.** ``queue`` is a random number the log draws when it is created; every segment
file it creates begins with it and the segment's own number (:func:`segment_header`), and
the opener refuses a file that names another queue or another number: a segment of
another bucket copied over this one's, even with entries of exactly the same sizes.
Segments numbered below ``tagged_from`` may have been written before identities and carry
none (their entries start at byte 0); a log written then draws its identity at its first
open, with ``tagged_from`` past its last segment, and records it, durably, before it creates
a segment carrying it. Nothing written earlier is rewritten. A segment created later always
carries the identity, even under a number below ``tagged_from`` (a lifo that popped its old
top segment whole numbers the next one as that was): a file naming this queue and its own
number can only be this queue's.

**Preallocation** (``preallocate`` > 0; a fifo's log, not a lifo's, whose pops truncate
the tail and would throw the zeros away each time). An fdatasync after an append that
grows the file must also commit the new size through the file system's journal; one
after overwriting blocks the file already has flushes only the data (on ext4 about 30%
less time for a small entry, half for a 4 KiB one). So the last segment is kept longer
than its entries: an append that would run past the file's end writes, after its
frames, zeros: as many bytes as the segment holds already, from 16 KiB up to
``preallocate`` (1 MiB for a fifo), and never past ``segment_size`` — so a queue of a few
entries keeps a file of a few KiB, and a growing one preallocates more each time — and
the appends that follow land on those zeros::

    0                                        data end                 file size
    +---------+---------+-----+---------+------------------------------------+
    | entry   | entry   | ... | entry   | 00 00 00 ... zeros (preallocated)  |
    +---------+---------+-----+---------+------------------------------------+
    (file size <= segment_size, or the size of the one entry bigger than a segment)

An entry header of zeros gives length 0, which no entry has, so the data ends at the
first header that does not check, as before. Only the last segment has zeros: before an
append starts a new segment it truncates the old last one to its data end (and fsyncs
that, before the new file exists), so a segment before the last still ends with its
last entry, and its damage is still told from a crash. The opener scans the last
segment as ever, then looks at what follows its last whole entry (or whole batch):

* nothing (a file written before preallocation, or trimmed): nothing to do;
* only zeros: preallocated space, kept without a warning; appends go on over it. A
  crash halfway through an append leaves this when none of its bytes reached the disk
  (the zeros after the frames, or the file's new size, may have), which is the same as
  no append;
* anything else: a torn append (part of a frame, or the whole entries of a batch whose
  last one is missing, then zeros or not), cut as before: the file is truncated at the
  data end, zeros and all, with the warning; the next append preallocates again.

So nothing but zeros ever lies past the data end of an open log: an append's frames and
zeros land on zeros or past the end, and every cut (a repair, a lifo pop, an append
taken back) truncates. A version of hoardDB from before preallocation reads a file with
zeros as a torn tail and cuts them with a warning, losing no entry.

Damage that no crash explains is refused, never returned or cut away; what the opener
repairs and what it refuses is told in :mod:`hoarddb.storage.segment_recovery`, which
holds the opening half of the log. The bytes both halves read and write (segment
identities, state slots) are :mod:`hoarddb.storage.segment_format`'s.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path

from ..errors import ClosedError, StorageError
from . import framing, segment_format
from .framing import HEADER, HEADER_SIZE
from .oserrors import FULL_ERRNOS, fsync_directory, pwrite_all, storage_error
from .segment_format import SEGMENT_HEADER_SIZE, segment_header, segment_name
from .segment_reads import SegmentReads
from .segment_check import SegmentCheck
from .segment_recovery import SegmentRecovery
from .segment_state import SegmentState
# Where callers (stores, tools, tests) import them from, as before the split:
from .segment_format import SEGMENT_MAGIC, SLOT_SIZE, STATE_FILE  # noqa: F401
from .segment_check import verify  # noqa: F401
from .segment_recovery import closed_cleanly  # noqa: F401

log = logging.getLogger("hoarddb.segment")

#: An emptied fifo drops its last segment when it holds this much (or half a segment).
_RESET_BYTES = 1 << 20
#: Zeros a fifo log's append writes after its entries when it grows the last segment, at most:
#: as many as the segment holds already (so a small queue's file stays small, a growing one's
#: preallocation doubles), and never fewer than PREALLOCATE_MIN.
PREALLOCATE = 1 << 20
PREALLOCATE_MIN = 16 * 1024
#: Segment files whose descriptors stay open besides the head and the tail.
_OPEN_FDS = 4


class SegmentLog(SegmentRecovery, SegmentState, SegmentReads, SegmentCheck):
    """SegmentLog is one bucket's log of entries in segment files, with a durable head pointer.

    ``directory`` exists; ``suffix`` names the segment files (``fifo`` or ``lifo``);
    ``segment_size`` is the most bytes one segment holds; with ``sync`` every method that
    changes the log has made its change durable (fsync) before it returns;
    ``preallocate`` is how many bytes of zeros an append that grows the last segment
    writes after its entries (0: none; the default is :data:`PREALLOCATE` for a fifo
    log and none for a lifo log; see the module's docstring). Opening
    repairs what a crash left (torn tail, unfinished cut, consumed segments not yet
    unlinked). Every method is safe to call from several threads.

    Its methods are in five files, each what a reader needs at once: this one (files,
    appends and takes), :class:`~.segment_recovery.SegmentRecovery` (opening),
    :class:`~.segment_state.SegmentState` (the state file, flush, close),
    :class:`~.segment_reads.SegmentReads` (reads) and :class:`~.segment_check.SegmentCheck`
    (the check while it serves); mixins, since all of them work on the log's own fields
    under its one lock.
    """

    def __init__(self, directory: Path, suffix: str, segment_size: int, sync: bool = True,
                 preallocate: int | None = None):
        self.directory = Path(directory)
        self.suffix = suffix
        self.segment_size = segment_size
        self.sync = sync
        if preallocate is None:  # a fifo's tail only grows; a lifo's pops truncate it
            preallocate = PREALLOCATE if suffix == "fifo" else 0
        self.preallocate = preallocate
        self._lock = threading.Lock()
        self._closed = False
        self._failed: str | None = None  # set when a write failed halfway: see _fail
        # With sync off, what flush() must fsync: segment numbers, the state file, the directory.
        self._dirty: set[int] = set()
        self._dirty_state = False
        self._dirty_dir = False
        # What the last flush made durable of each file (segment number, or STATE_KEY: its size),
        # for segment_flush to tell a file whose writes only overwrite blocks on disk; and a
        # count of truncations and creations, after which a flush taken before notes nothing.
        self._durable: dict[int, int] = {}
        self._reshapes = 0
        self._state_fd: int | None = None
        self._fds: dict[int, int] = {}
        self._segs: list[int] = []  # segment numbers on disk, ascending; [0] is the head segment
        self._sizes: dict[int, int] = {}  # where the whole entries of each segment end (bytes)
        self._base: dict[int, int] = {}  # where they start: after the identity (32), or 0 in a file without one
        self._padded: dict[int, int] = {}  # file size of the last segment when zeros follow its entries
        self._counts: dict[int, int] = {}  # entries not yet taken in each segment
        self._offsets: dict[int, array] = {}  # entry offsets of a few segments (always the tail's when known)
        self._length = 0
        self._seq = 0
        self._head = (1, 0)  # (segment, offset) of the oldest entry not yet taken
        self._popped = 0
        self._cut = (0, 0, 0)  # (segment, offset, above) of the last cut, (0, 0, 0) for none
        self._last_number = 0  # highest segment number ever used
        # The log's identity, which each segment numbered from tagged_from on carries in its
        # first bytes (segment_header); a log written before identities gets one at its open,
        # numbered past its segments, and the state must hold it (durably) before the first
        # segment that carries it exists: _identity_durable.
        self._queue: int | None = None
        self._tagged_from: int | None = None
        self._identity_durable = False
        self._slot_damaged: int | None = None  # a state slot that did not check on open (for messages)
        self._rewrites = 0  # lifo pops, which cut or rewrite entries in place (an online check asks: segment_check)
        # The state said the log was closed cleanly (see close): nothing was being written
        # when it was last closed, so nothing a crash leaves can be on disk, and every
        # irregularity the opener finds is damage. The first change after the open records
        # that the log is open again (_reopen_for_writes), before it touches a file.
        self._clean = False
        try:
            self._open()
        except OSError as exc:  # a file the operating system will not let us open or read
            self._close_files()
            raise storage_error(f"opening {exc.filename or self.directory}", exc, "the bucket was not opened") \
                from None
        except BaseException:
            self._close_files()
            raise

    # -- opening: SegmentRecovery (segment_recovery.py) ---------------------------------------
    # -- the state file, flush and close: SegmentState (segment_state.py) -----------------------
    # -- reading entries: SegmentReads (segment_reads.py) ---------------------------------------
    # -- the check while it serves: SegmentCheck (segment_check.py) ----------------------------

    def _path(self, number: int) -> Path:
        return self.directory / segment_name(number, self.suffix)

    # -- files --------------------------------------------------------------------------------

    def _fd(self, number: int, create: bool = False) -> int:
        fd = self._fds.get(number)
        if fd is None:
            if len(self._fds) >= _OPEN_FDS + 2:
                keep = {self._segs[0], self._segs[-1]} if self._segs else set()
                for n in [n for n in self._fds if n not in keep]:
                    os.close(self._fds.pop(n))
            flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
            try:
                fd = os.open(self._path(number), flags, 0o644)
            except OSError as exc:
                raise storage_error(f"writing {self._path(number)}", exc) from None
            self._fds[number] = fd
            if create:
                self._reshaped(number)
        return fd

    def _forget_segment(self, number: int) -> None:
        """Forget a segment whose file is gone."""
        fd = self._fds.pop(number, None)
        if fd is not None:
            os.close(fd)
        self._segs.remove(number)
        self._length -= self._counts.pop(number)
        del self._sizes[number]
        del self._base[number]
        self._padded.pop(number, None)
        self._offsets.pop(number, None)

    def _truncate_path(self, path: Path, size: int) -> None:
        fd = os.open(path, os.O_RDWR)
        self._durable.clear()  # (a repair: by path, so every file's durable size is forgotten)
        self._reshapes += 1
        try:
            os.ftruncate(fd, size)
            segment_format.datasync(fd)  # repairs are made durable even with sync off: they are rare
        finally:
            os.close(fd)

    def _sync_dir(self) -> None:
        """Make creations and unlinks of files in the directory durable (with sync off: at flush)."""
        if not self.sync:
            self._dirty_dir = True
            return
        fsync_directory(self.directory)

    def _close_files(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if self._state_fd is not None:
            os.close(self._state_fd)
            self._state_fd = None

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the {self.suffix} bucket at {self.directory} is closed; open the database again")
        if self._failed:
            raise StorageError(self._failed)

    def _reopen_for_writes(self) -> None:
        """Before the first change to the files after a clean close: record, durably, that
        the log is open again, so that what a crash from now on leaves is repaired, not
        refused as damage (a fifo's pop needs none: its own state write says it)."""
        if self._clean:
            self._write_state()  # flushed, even with sync off (see _write_state)

    def _fail(self, exc: OSError, path) -> StorageError:
        """Refuse every later call: a write failed halfway, and only reopening (which repairs) is safe."""
        self._failed = storage_error(
            f"writing {path}", exc, "the write failed halfway, so the bucket takes no more operations until "
            "the database is opened again, which repairs it").message
        log.error("%s", self._failed)
        return StorageError(self._failed)

    # -- the log's interface --------------------------------------------------------------------

    def __len__(self) -> int:
        return self._length

    @property
    def segments(self) -> int:
        """How many segment files the log has on disk."""
        return len(self._segs)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the log still inside: no append, pop or cut runs, so its files (segments and
        ``state.bson``, which every change writes at once, flushed or not) can be copied as one
        moment of the queue (a hot backup)."""
        with self._lock:
            self._check_open()
            yield

    @property
    def data_bytes(self) -> int:
        """Bytes of the entries the log holds, frames included: no segment header, popped entry or
        preallocated zero is counted (what the files take on disk is more)."""
        with self._lock:
            head_seg, head_off = self._head
            return sum(max(0, self._sizes[n] - (head_off if n == head_seg else self._base[n]))
                       for n in self._segs if n >= head_seg)

    @property
    def popped(self) -> int:
        """How many entries were ever taken from the head."""
        return self._popped

    def append(self, payloads: list[bytes]) -> None:
        """Add entries at the tail, all in one durable write per segment they land in.

        On an error of the operating system (disk full) nothing of them stays, and
        StorageError says why.
        """
        frames = framing.frame_batch(payloads)
        if not frames:
            return
        with self._lock:
            self._check_open()
            self._reopen_for_writes()
            # Every entry of the batch but its last is flagged MORE (framing.frame_batch), so a
            # crash inside the batch leaves a tail of MORE entries, which the opener cuts: the
            # batch is all or nothing, also when it spans segments.
            groups: list[list] = []  # [number, start, frames, created]
            number = self._segs[-1] if self._segs else None
            size = self._sizes[number] if number is not None else 0
            base = self._base[number] if number is not None else 0
            next_number = self._last_number + 1
            for fr in frames:
                if number is None or (size > base and size + len(fr) > self.segment_size):
                    # A new segment: its identity, then its entries (segment_header)
                    number, next_number = next_number, next_number + 1
                    size = base = SEGMENT_HEADER_SIZE
                    groups.append([number, base, [], True])
                elif not groups:
                    groups.append([number, size, [], False])
                groups[-1][2].append(fr)
                size += len(fr)
            written: list[list] = []
            # A last segment with zeros after its entries that stops being the last is cut to
            # its entries before the next segment exists (the opener checks only the last for zeros).
            old_tail = self._segs[-1] if self._segs else None
            trim = old_tail if old_tail in self._padded and groups[-1][0] != old_tail else None
            pad_end = 0
            last_number, last_start, last_parts, _ = groups[-1]
            if self.preallocate:
                end = last_start + sum(len(fr) for fr in last_parts)
                if end > self._padded.get(last_number, last_start):  # the write runs past the file's end
                    ahead = min(self.preallocate, max(PREALLOCATE_MIN, end))  # scaled to what it holds
                    pad_end = max(end, min(end + ahead, self.segment_size))
            if groups[-1][3] and not self._identity_durable:
                self._write_state()  # the identity the new segment carries, durably first (see _write_state)
            try:
                if trim is not None and groups[0][0] != trim:
                    self._trim(trim, self._sizes[trim])
                for group in groups:
                    number, start, parts, created = group
                    fd = self._fd(number, create=created)
                    written.append(group)
                    data, at = b"".join(parts), start
                    if created:  # one pwrite from byte 0: the identity, then the entries
                        data, at = segment_header(self._queue, number) + data, 0
                    pwrite_all(fd, data, at)
                    if number == trim:
                        os.ftruncate(fd, at + len(data))
                        self._reshaped(number)
                        self._padded.pop(number)
                    elif number == last_number and pad_end > at + len(data):
                        pad_end = self._pad(number, fd, at + len(data), pad_end)
                    if self.sync:
                        segment_format.datasync(fd)
                    else:
                        self._dirty.add(number)
                if any(g[3] for g in groups):
                    self._sync_dir()
            except (OSError, StorageError) as exc:  # (StorageError: a new segment file that could not be made)
                path = self._path(written[-1][0]) if written else self.directory
                if not self._undo_append(written):
                    raise self._fail(exc, path) from None
                raise (exc if isinstance(exc, StorageError) else storage_error(f"writing {path}", exc)) from None
            for number, start, parts, created in groups:
                if created:
                    if not self._segs:
                        self._head = (number, start)
                    self._segs.append(number)
                    self._sizes[number], self._counts[number], self._base[number] = start, 0, start
                    self._offsets[number] = array("q")
                    self._last_number = number
                    self._trim_offsets()
                offsets = self._offsets.get(number)
                pos = start
                for fr in parts:
                    if offsets is not None:
                        offsets.append(pos)
                    pos += len(fr)
                self._sizes[number] = pos
                self._counts[number] += len(parts)
            if pad_end > self._sizes[last_number]:
                self._padded[last_number] = pad_end
            self._length += len(frames)

    def _trim(self, number: int, end: int) -> None:
        """Cut the zeros after segment ``number``'s entries (it is no longer the last), durably."""
        fd = self._fd(number)
        os.ftruncate(fd, end)
        self._reshaped(number)
        self._padded.pop(number)
        if self.sync:
            segment_format.datasync(fd)
        else:
            self._dirty.add(number)

    def _pad(self, number: int, fd: int, end: int, pad_end: int) -> int:
        """Write zeros in ``[end, pad_end)`` after an append's frames, and answer where the file ends.

        A disk too full for the zeros is no error: the ones that landed go again (they are
        all past the file's old end) and the entries stand without them.
        """
        try:
            pwrite_all(fd, bytes(pad_end - end), end)
            return pad_end
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS:
                raise
            os.ftruncate(fd, end)
            self._reshaped(number)
            return end

    def _undo_append(self, written: list[list]) -> bool:
        """Take back the bytes of an append that failed; False when that failed too."""
        try:
            for number, start, _parts, created in written:
                if created:
                    fd = self._fds.pop(number, None)
                    if fd is not None:
                        os.close(fd)
                    os.unlink(self._path(number))
                else:
                    fd = self._fd(number)
                    os.ftruncate(fd, start)
                    self._reshaped(number)
                    self._padded.pop(number, None)
                    if self.sync:
                        segment_format.datasync(fd)
            return True
        except OSError:
            return False

    def take_head(self, n: int, durable: bool = True) -> list[bytes]:
        """Remove and return up to ``n`` payloads from the head, oldest first, in one state write.

        ``durable=False`` is for a caller whose own commit already recorded the move (a fifo's
        claim table, see hoarddb/stores/fifo.py): the state write then skips its fsync, a kill
        loses nothing (the kernel has the write) and after a power cut the caller's open moves
        the head again. A move that leaves segments to unlink is made durable all the same,
        with ``sync`` off too, before they go: an unlink can reach the disk before a state
        write the kernel has not written back, and an unlinked segment under a stale head
        would shift every entry's number (a fifo's claims count entries by number).
        """
        with self._lock:
            self._check_open()
            if not self._length:
                return []
            out, taken, (number, offset) = self._read_forward(0, self._head[1], n)
            index = self._segs.index(number)
            while offset == self._sizes[number] and index + 1 < len(self._segs):
                index, number = index + 1, self._segs[index + 1]
                offset = self._base[number]
            if len(out) == self._length and self._sizes[self._segs[-1]] >= min(_RESET_BYTES, self.segment_size // 2):
                # Emptied, and the last segment is big: the head moves to the segment the next
                # push will create, so the files go now instead of lingering until a rollover.
                # (A small one stays: a queue that is often empty would pay a file creation
                # and a directory fsync per push.)
                index, number, offset = len(self._segs), self._last_number + 1, 0
            self._write_state(head=(number, offset), popped=self._popped + len(out), durable=durable or index > 0,
                              always=index > 0)
            # The new head is durable: the segments it left can go (the opener unlinks them if we die here).
            for seg, count in taken:
                self._counts[seg] -= count
            self._length -= len(out)
            self._popped += len(out)
            self._head = (number, offset)
            for seg in self._segs[:index]:
                try:
                    os.unlink(self._path(seg))
                except OSError as exc:  # harmless: the opener removes segments below the head
                    log.warning("%s: could not remove consumed segment: %s", self._path(seg), exc)
                self._forget_segment(seg)
            return out

    def take_tail(self, n: int) -> list[bytes]:
        """Remove and return up to ``n`` payloads from the tail, newest first, in one commit.

        See the module's docstring for which commit: a truncation, an unlink, or a cut.
        """
        with self._lock:
            self._check_open()
            out = self._read_tail(n)
            if not out:
                return []
            self._rewrites += 1  # before any byte changes (segment_check.SegmentCheck.check_open)
            self._reopen_for_writes()
            remaining = len(out)
            doomed: list[int] = []
            index = len(self._segs) - 1
            while remaining:
                number = self._segs[index]
                live = self._counts[number]
                if remaining >= live and index > 0:
                    doomed.append(number)
                    remaining -= live
                    index -= 1
                    continue
                offsets, lo = self._entry_offsets(number)
                new_end = offsets[lo + live - remaining]
                break
            else:
                number = self._segs[index]
                new_end = self._sizes[number]
            keep = number  # the segment that becomes the tail, cut at new_end
            shorter = new_end < self._sizes[keep]
            self._end_batch_at(keep, new_end)  # the new last entry must not say MORE
            if doomed and (shorter or len(doomed) > 1):
                cut = (keep, new_end, max(doomed))
                self._write_state(cut=cut, always=True)  # the commit (on disk before an unlink, sync off too)
                self._cut = cut
            try:
                if shorter:
                    os.ftruncate(self._fd(keep), new_end)
                    self._reshaped(keep)
                for seg in doomed:
                    os.unlink(self._path(seg))
                if shorter:
                    if self.sync:
                        segment_format.datasync(self._fd(keep))
                    else:
                        self._dirty.add(keep)
                if doomed:  # with sync off too: a push after the pop must not reach the disk before the unlink
                    fsync_directory(self.directory)
            except OSError as exc:
                # Part of the pop may be on disk and the rest not: only the opener can tell
                # which (it finishes a committed cut), so this log takes no more calls.
                raise self._fail(exc, self._path(keep)) from None
            for seg in doomed:
                self._forget_segment(seg)
            if shorter:
                self._padded.pop(keep, None)
            self._counts[keep] -= remaining
            self._length -= remaining
            self._sizes[keep] = new_end
            offsets = self._offsets.get(keep)
            if offsets is not None:
                del offsets[bisect.bisect_left(offsets, new_end):]
            return out

    def _end_batch_at(self, number: int, end: int) -> None:
        """Make the entry that ends at ``end`` the end of its batch (clear its MORE flag).

        A lifo pop that cuts a batch in two would otherwise leave entries flagged MORE at the
        tail, which the opener takes for a batch torn by a crash and cuts. The rewritten
        header is made durable before the truncation (one more fsync, only for a pop that
        lands inside a batch), so no crash can leave the cut without the header.
        """
        fd = self._fd(number)
        offsets, _ = self._entry_offsets(number)
        i = bisect.bisect_left(offsets, end) - 1
        if i < 0:
            return
        off = offsets[i]
        word = HEADER.unpack(os.pread(fd, HEADER_SIZE, off))[0]
        if not word & framing.MORE:
            return
        payload = os.pread(fd, word & framing.LENGTH_MASK, off + HEADER_SIZE)
        pwrite_all(fd, framing.frame(payload)[:HEADER_SIZE], off)
        if self.sync:
            segment_format.datasync(fd)
