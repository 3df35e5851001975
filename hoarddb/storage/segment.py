"""Segment files: the append-only log of entries under a fifo or lifo bucket, consumed from either end.

A :class:`SegmentLog` owns every file of one fifo or lifo bucket directory::

    <bucket>/
      state.bson       two fixed slots holding the head pointer (and a pending cut), see below
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

Damage that no crash explains is refused, never returned or cut away: an entry failing
its checksum while being read raises CorruptDataError naming the file and the byte; so
does the opener, always, for a segment file that names another queue or another number
(or whose identity does not check though the entry after it does), with ``sync`` on, for
a segment before the last that does not check, is empty or is missing (the head's, or
one in a fifo's numbering), and for a head past its segment's end; and, after a clean
close (:meth:`SegmentLog.close` records the log's counts in the state), for anything
irregular at all, a torn tail included, and segment files that do not hold what the
close counted. The one identity a crash can spoil is that of the last segment, in the
write that created it (the identity and its first entries share a block): the opener
writes the identity again and cuts the rest, as a torn append. A write the operating
system refuses (disk full) is taken back and raises StorageError; one that fails halfway
through a commit (an fsync error) leaves the log refusing every call until the database
is opened again, since only the opener can tell which side of the commit the disk is on.

After a crash with ``sync`` off, what ``sync`` on refuses is a power cut's, which may keep
a later segment's writes and lose an earlier one's. A segment before the last that is
empty, torn, or shorter than the head in it lost writes, and none after it was flushed
(a flush syncs segments in ascending order, before the state): the opener removes every
segment after it, durably, then reads it as the last (:meth:`SegmentLog._cut_after`), so
what is left is a prefix of the log, batches whole. Likewise the segments pushed after a
lifo cut whose doomed segments are still there. A missing segment is read past, as
before: a fifo pop's unlinks may reach the disk before its state, and the segments after
them hold flushed entries (docs/dev/segments.md).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import re
import struct
import threading
import zlib
from array import array
from collections.abc import Iterator
from pathlib import Path

from ..errors import ClosedError, CorruptDataError, StorageError
from ..values.codec import decode, encode
from . import framing
from .framing import HEADER, HEADER_SIZE, MAX_PAYLOAD, MIN_PAYLOAD
from .oserrors import FULL_ERRNOS, fsync_directory, pwrite_all, storage_error

log = logging.getLogger("hoarddb.segment")

STATE_FILE = "state.bson"
#: Bytes of one state slot; a state document is about 150 bytes of BSON.
SLOT_SIZE = 512
#: Reads of entries go in chunks of about this many bytes per wanted entry (4 KiB to 1 MiB).
_READ_GUESS = 512
_WALK_CHUNK = 1 << 20
#: An emptied fifo drops its last segment when it holds this much (or half a segment).
_RESET_BYTES = 1 << 20
#: Zeros a fifo log's append writes after its entries when it grows the last segment, at most:
#: as many as the segment holds already (so a small queue's file stays small, a growing one's
#: preallocation doubles), and never fewer than PREALLOCATE_MIN.
PREALLOCATE = 1 << 20
PREALLOCATE_MIN = 16 * 1024
#: Segment files whose descriptors stay open besides the head and the tail.
_OPEN_FDS = 4
#: How many segments' entry offsets stay in memory besides the tail's.
_CACHED_OFFSETS = 2

#: The identity a segment file begins with (see segment_header): its first 8 bytes, which as a
#: frame's length word would give more than MAX_PAYLOAD, so no file of entries begins with them.
SEGMENT_MAGIC = b"hoardseg"
_SEGMENT_HEADER = struct.Struct("<8sQQI4x")
#: Bytes of a segment file's identity; its entries start after them (a file written before the
#: identity has none, and its entries start at byte 0).
SEGMENT_HEADER_SIZE = _SEGMENT_HEADER.size  # 32

# fdatasync writes the data and the metadata needed to read it back (the file size),
# which is all a segment append, a truncation or a slot write needs; it skips mtime.
_datasync = getattr(os, "fdatasync", os.fsync)


def segment_name(number: int, suffix: str) -> str:
    """The file name of segment ``number``: ``seg_00001.fifo``."""
    return f"seg_{number:05d}.{suffix}"


def new_queue_id() -> int:
    """A random identity for a log, which every segment file it creates carries (63 bits: a BSON int64)."""
    return int.from_bytes(os.urandom(8), "little") >> 1


def segment_header(queue: int, number: int) -> bytes:
    """The first bytes of segment ``number`` of log ``queue``: who the file belongs to.

    Written with the file's first entries, in the same ``pwrite`` at byte 0; the entries
    start at byte 32::

        0          8               16               24          28       32
        +----------+---------------+----------------+-----------+--------+------------
        | hoardseg | queue u64 LE  | number u64 LE  | crc32 u32 | 0 0 0 0| entries ...
        +----------+---------------+----------------+-----------+--------+------------
        crc32 covers bytes 0..23

    A crash halfway through that write leaves the file without a whole identity (zeros,
    part of it, or nothing) and without a whole entry after it, since they share the
    file's first block; none of the write's entries was acknowledged. The opener writes
    the identity again and cuts the rest, as a torn append (see check_identity).
    """
    head = SEGMENT_MAGIC + queue.to_bytes(8, "little") + number.to_bytes(8, "little")
    return _SEGMENT_HEADER.pack(SEGMENT_MAGIC, queue, number, zlib.crc32(head))


def _header_base(path: Path) -> int:
    """Where the entries of the segment file at ``path`` start: after its identity, if it begins with one."""
    with open(path, "rb") as f:
        return SEGMENT_HEADER_SIZE if f.read(len(SEGMENT_MAGIC)) == SEGMENT_MAGIC else 0


def check_identity(path: Path, number: int, queue: int | None, tagged_from: int | None) -> tuple[int, str | None, bool]:
    """Whether segment file ``path`` is segment ``number`` of log ``queue``: ``(where its
    entries start, what is wrong or None, whether a crash can have left that)``.

    A log knows its identity (``queue``) and the first segment number that carries it
    (``tagged_from``; segments below it may have been written before identities, and then
    carry none: one there is checked if it has one, and accepted if it has none).
    ``queue`` None: a log that has no identity yet, none of whose segments carries one.
    The only wrong a crash can leave is a file that should carry the identity and has no
    whole one (the write that creates a segment was cut short).
    """
    with open(path, "rb") as f:
        raw = f.read(SEGMENT_HEADER_SIZE)
    if raw[:len(SEGMENT_MAGIC)] == SEGMENT_MAGIC and len(raw) == SEGMENT_HEADER_SIZE:
        _magic, owner, said, crc = _SEGMENT_HEADER.unpack(raw)
        if crc == zlib.crc32(raw[:24]):
            if queue is None or owner != queue:
                return SEGMENT_HEADER_SIZE, ("this file belongs to another queue (its first bytes name queue "
                                             f"{owner:016x}, not this one's): a file copied or restored into the "
                                             "wrong bucket"), False
            if said != number:
                return SEGMENT_HEADER_SIZE, (f"this file is segment {said} of this queue, not segment {number}: a "
                                             "file copied or renamed"), False
            return SEGMENT_HEADER_SIZE, None, False
    if queue is not None and tagged_from is not None and number >= tagged_from:
        with open(path, "rb") as f:
            legacy = next(framing.scan(f), None) is not None
            entries = next(framing.scan(f, SEGMENT_HEADER_SIZE), None) is not None
        if legacy:  # whole entries from byte 0: a file written without an identity
            return 0, ("this file does not begin with the queue's identity, which every segment numbered from "
                       f"{tagged_from} on carries: a file of another queue (or one written before identities) "
                       "copied or restored into this bucket"), False
        # The identity and the first entry go to disk in one write, in the same block: a
        # crash in that write leaves neither whole; a whole entry after a broken identity is damage.
        if not raw:
            return SEGMENT_HEADER_SIZE, "this file is empty: not even the 32 bytes naming its queue are there", True
        return SEGMENT_HEADER_SIZE, ("its first 32 bytes, which name the queue it belongs to, do not check"
                                     + (" (the entries after them do)" if entries else "")), not entries
    return 0, None, False


class SegmentLog:
    """SegmentLog is one bucket's log of entries in segment files, with a durable head pointer.

    ``directory`` exists; ``suffix`` names the segment files (``fifo`` or ``lifo``);
    ``segment_size`` is the most bytes one segment holds; with ``sync`` every method that
    changes the log has made its change durable (fsync) before it returns;
    ``preallocate`` is how many bytes of zeros an append that grows the last segment
    writes after its entries (0: none; the default is :data:`PREALLOCATE` for a fifo
    log and none for a lifo log; see the module's docstring). Opening
    repairs what a crash left (torn tail, unfinished cut, consumed segments not yet
    unlinked). Every method is safe to call from several threads.
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

    # -- reading and repairing what is on disk ------------------------------------------

    def _path(self, number: int) -> Path:
        return self.directory / segment_name(number, self.suffix)

    def _open(self) -> None:
        pattern = re.compile(r"seg_(\d+)\." + re.escape(self.suffix) + r"$")
        numbers = sorted(int(m.group(1)) for name in os.listdir(self.directory) if (m := pattern.match(name)))
        closed = self._load_state(bool(numbers))
        self._clean = closed is not None
        # What no crash can leave is refused as damage (never repaired by cutting entries
        # away): after a clean close, anything irregular; with sync on, anything but a torn
        # last append. With sync off and no clean close, a power cut may have lost any
        # unflushed write, so the opener repairs and logs as before.
        strict = self._clean or self.sync
        head_seg, head_off = self._head
        cut_seg, cut_off, cut_above = self._cut
        # A head segment with entries taken keeps its number even if its file went missing.
        self._last_number = max([head_seg if head_off else head_seg - 1, cut_above, *numbers])

        doomed = [n for n in numbers if cut_seg < n <= cut_above]
        if doomed and self._clean:
            raise self._damaged(self._path(doomed[0]), "a segment file that a finished pop had removed is there "
                                "again (a file restored or copied into the bucket)")
        later = [n for n in numbers if n > cut_above] if doomed and not strict else []
        if later:
            # (sync off) A doomed segment is there: the pop's unlinks never reached the disk,
            # so no flush completed since (it fsyncs the directory last), and the segments
            # made after the pop hold nothing flushed; they go first, durably, as the writes
            # into the cut segment after the pop go with the cut below: the log is as the
            # pop left it, not later entries without the earlier ones.
            log.warning("%s: removing %s, written after an interrupted pop whose removal of %s did not reach the "
                        "disk (a power cut with sync off), and never flushed", self.directory,
                        ", ".join(segment_name(n, self.suffix) for n in later),
                        ", ".join(segment_name(n, self.suffix) for n in doomed))
            for n in later:
                os.unlink(self._path(n))
            fsync_directory(self.directory)  # (repairs are made durable even with sync off)
            numbers = [n for n in numbers if n not in later]
        if doomed:  # a lifo pop over several segments committed its cut, then was killed
            log.warning(
                "%s: finishing an interrupted pop: removing %s and cutting %s at byte %d",
                self.directory, ", ".join(segment_name(n, self.suffix) for n in doomed),
                segment_name(cut_seg, self.suffix), cut_off,
            )
            if cut_seg in numbers:
                _end_batch_in_file(self._path(cut_seg), cut_off, _header_base(self._path(cut_seg)))
                if os.path.getsize(self._path(cut_seg)) > cut_off:
                    self._truncate_path(self._path(cut_seg), cut_off)
            for n in doomed:
                os.unlink(self._path(n))
            self._sync_dir()
            numbers = [n for n in numbers if n not in doomed]

        consumed = [n for n in numbers if n < head_seg]
        for n in consumed:  # the head left them; a crash came before their unlink
            log.info("%s: removing consumed segment %s", self.directory, segment_name(n, self.suffix))
            os.unlink(self._path(n))
        numbers = [n for n in numbers if n >= head_seg]
        for n in numbers:  # each file must be this log's segment n (see segment_header)
            base, wrong, crash = check_identity(self._path(n), n, self._queue, self._tagged_from)
            if wrong is None:
                self._base[n] = base
            elif crash and not self._clean and (n == numbers[-1] or not strict):
                # The write that created the segment was cut short, and none of its entries
                # was acknowledged: the file becomes the empty segment it was meant to start as.
                size = os.path.getsize(self._path(n))
                log.warning("%s: %s: %s (a write that created it did not finish); writing them again and "
                            "cutting the %d bytes after them", self.directory, segment_name(n, self.suffix),
                            wrong, max(0, size - SEGMENT_HEADER_SIZE))
                fd = os.open(self._path(n), os.O_RDWR)
                try:
                    pwrite_all(fd, segment_header(self._queue, n), 0)
                    os.ftruncate(fd, SEGMENT_HEADER_SIZE)
                    _datasync(fd)  # (repairs are made durable even with sync off)
                finally:
                    os.close(fd)
                self._base[n] = base
            else:
                raise self._damaged(self._path(n), wrong)
        tail: tuple | None = None  # after a clean close: the last segment's bytes past its entries, not zeros
        if numbers and numbers[0] != head_seg and strict:
            # The head's segment exists as long as anything after it does: its file was
            # lost, and the entries it held with it.
            raise self._damaged(self._path(head_seg), "the file holding the head of the queue is missing, "
                                f"and {len(numbers)} later segment file(s) are there")
        if strict and self.suffix == "fifo" and numbers and numbers != list(range(numbers[0], numbers[-1] + 1)):
            # A fifo's segments are numbered one after the other from the head's on (only a
            # lifo's multi-segment pop leaves a gap): one in the middle is missing.
            missing = next(n for n in range(numbers[0], numbers[-1] + 1) if n not in numbers)
            raise self._damaged(self._path(missing), "this segment file is missing between "
                                f"{segment_name(numbers[0], self.suffix)} and {segment_name(numbers[-1], self.suffix)}")
        if numbers and numbers[0] != head_seg:
            if head_off:
                log.warning(
                    "%s: head segment %s is missing; reading from %s",
                    self.directory, segment_name(head_seg, self.suffix), segment_name(numbers[0], self.suffix),
                )
            head_seg, head_off = numbers[0], 0

        i = 0
        while i < len(numbers):
            n = numbers[i]
            last = i == len(numbers) - 1
            path = self._path(n)
            size = os.path.getsize(path)
            base = self._base[n]
            if n == head_seg and head_off < base:  # (a head moved to a segment before it was made)
                head_off = base
            start = head_off if n == head_seg else base
            if start > size and strict:
                raise self._damaged(path, f"the queue's head is at byte {start}, past the file's end ({size} bytes): "
                                    "the file was cut short")
            if size <= base and not last and strict:
                raise self._damaged(path, "a segment file before the last is empty")
            if not last and (size <= base or start > size):
                # (sync off, after a crash) this segment's writes were lost: so were the later ones
                numbers = self._cut_after(numbers, i, "it is empty" if size <= base else
                                          f"the queue's head is at byte {start}, past its end ({size} bytes)")
                continue  # and this segment is read again, as the last
            if start > size:  # only after a power cut with sync off: the head was durable, the entries not
                log.warning("%s: head at byte %d is past the end (%d bytes); the segment is empty", path, start, size)
                start = size
                head_off = size
            offsets = array("q")
            end = start
            with open(path, "rb", buffering=_WALK_CHUNK) as f:
                for off, payload in framing.scan(f, start, whole_batches=last):
                    offsets.append(off)
                    end = off + HEADER_SIZE + len(payload)
            if last and end < size and _zeros_from(path, end, size):
                self._padded[n] = size  # preallocated (see the module's docstring), or a write that left no byte
            elif end < size and not last and strict:
                # Only the last segment is ever being appended to; with sync on, an earlier
                # one was fsynced whole before the next began, so this is damage, not a crash.
                raise self._damaged(path, f"an entry at byte {end} fails its checksum ({size - end} bytes from "
                                    "there on do not check) in a segment that is not the last")
            elif end < size and not last:  # (sync off, after a crash) writes lost here, so later ones too
                numbers = self._cut_after(numbers, i, f"the {size - end} bytes from byte {end} on do not check")
                continue  # read again as the last: its torn tail (or torn batch) is cut, its zeros kept
            if end < size and n not in self._padded and self._clean:
                # Closed cleanly, so no append was torn: either entries are damaged (the
                # counts the close recorded will not match) or only bytes after the last
                # entry are (they match), which is cut below.
                tail = (path, end, size)
            elif end < size and n not in self._padded:
                log.warning(
                    "%s: cut %d bytes of torn tail from %s at byte %d (an append that did not finish); "
                    "%d whole entries kept", self.directory, size - end, path.name, end, len(offsets),
                )
                self._truncate_path(path, end)
            self._segs.append(n)
            self._sizes[n] = end
            self._counts[n] = len(offsets)
            self._length += len(offsets)
            if last:
                self._offsets[n] = offsets
            i += 1
        self._head = (head_seg, head_off)
        if not self._clean:  # (after a clean close no batch was torn: the counts below tell damage)
            self._cut_torn_batch()
        else:
            self._check_closed_counts(closed, tail)
            if tail is not None:
                path, end, size = tail
                log.warning("%s: cut %d bytes after the last entry of %s at byte %d: damaged bytes past the data "
                            "(every entry the clean close counted is there)",
                            self.directory, size - end, path.name, end)
                self._truncate_path(path, end)
        if self._queue is None:  # a log written before identities: its next segments carry one
            self._queue, self._tagged_from = new_queue_id(), self._last_number + 1
        if self._clean and self._slot_damaged is not None:
            self._heal_slot(closed)

    def _cut_after(self, numbers: list[int], i: int, why: str) -> list[int]:
        """After a crash with sync off, segment ``numbers[i]``, not the last, lost writes
        (``why``): remove every segment after it, durably, and answer the numbers left.

        Nothing in them was flushed either: they hold only entries appended after that
        segment's, and a flush fsyncs every segment it has dirty in ascending order before
        the state and the directory, so one that completed after any of them was written
        would have made that segment whole. Keeping them would keep later entries without
        earlier ones (and a batch without its first entries). Done before the segment is
        cut itself, so a crash in this repair leaves it to be done again. (A missing
        segment is not such a loss: see the module's docstring.)
        """
        later = numbers[i + 1:]
        log.warning("%s: %s lost writes (%s), a power cut with sync off; removing %s, written after it and "
                    "never flushed", self.directory, segment_name(numbers[i], self.suffix), why,
                    ", ".join(segment_name(n, self.suffix) for n in later))
        for n in later:
            os.unlink(self._path(n))
            self._base.pop(n, None)
        fsync_directory(self.directory)  # (repairs are made durable even with sync off)
        return numbers[:i + 1]

    def _cut_torn_batch(self) -> None:
        """A batch that spanned segments and was torn leaves MORE entries at the end of the
        segment before an emptied last one: cut them too, so the batch is all or nothing."""
        while len(self._segs) > 1 and self._counts[self._segs[-1]] == 0:
            empty, prev = self._segs[-1], self._segs[-2]
            head_seg, head_off = self._head
            start = head_off if prev == head_seg else self._base[prev]
            with open(self._path(prev), "rb") as f:
                kept = [off for off, _ in framing.scan(f, start, self._sizes[prev], whole_batches=True)]
            with open(self._path(prev), "rb") as f:
                end = start
                for off, payload in framing.scan(f, start, self._sizes[prev], whole_batches=True):
                    end = off + HEADER_SIZE + len(payload)
            log.warning("%s: removing %s and cutting %s at byte %d: a batch that spanned them did not finish",
                        self.directory, segment_name(empty, self.suffix), segment_name(prev, self.suffix), end)
            os.unlink(self._path(empty))
            self._sync_dir()
            self._forget_segment(empty)
            if end < self._sizes[prev]:
                self._truncate_path(self._path(prev), end)
                self._length -= self._counts[prev] - len(kept)
                self._counts[prev], self._sizes[prev] = len(kept), end
                self._offsets[prev] = array("q", kept)
            if self._counts[prev]:
                break
        # The numbers of segments removed here held nothing acknowledged, and may be used
        # again: a fifo's next segment must follow its last one (a gap is refused as damage).
        head_seg, head_off = self._head
        self._last_number = max([head_seg if head_off > self._base.get(head_seg, 0) else head_seg - 1,
                                 self._cut[2], *self._segs])

    def _load_state(self, have_segments: bool) -> dict | None:
        """Load the head and cut from the newest slot that checks; the counts a clean
        close recorded in it (see :meth:`close`), or None if it was not written by one."""
        path = self.directory / STATE_FILE
        try:
            self._state_fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            if have_segments:
                raise CorruptDataError(
                    f"{path} is missing but segment files exist, so where the queue's head is is unknown; "
                    "restore the bucket from a backup, or delete its segment files to empty it"
                ) from None
            self._create_state(path)
            return None
        raw = os.pread(self._state_fd, 2 * SLOT_SIZE, 0)
        slots = [_parse_slot(raw[i * SLOT_SIZE:(i + 1) * SLOT_SIZE]) for i in range(2)]
        valid = [s for s in slots if s is not None]
        if have_segments and len(raw) < 2 * SLOT_SIZE and len(valid) < 2:
            # The file is made whole (both slots) once, and never changes size: a short one
            # was cut, and the slot it lost may be the newer one (an older head: popped
            # entries would come back).
            raise CorruptDataError(
                f"{path} is {len(raw)} bytes, not {2 * SLOT_SIZE}: the file was cut short and one of its two "
                "slots is lost, so where the queue's head is is unknown. Restore the bucket from a backup or a "
                "dump (hoarddb restore), or drop it and create it again")
        if not valid:
            if have_segments:
                raise CorruptDataError(
                    f"{path} has no valid slot, so where the queue's head is is unknown; "
                    "restore the bucket from a backup, or delete its files to empty it"
                )
            os.close(self._state_fd)
            self._state_fd = None
            self._create_state(path)  # a crash while the bucket was being created
            return None
        state = max(valid, key=lambda s: s["seq"])
        closed = state.get("closed")
        closed = closed if isinstance(closed, dict) else None
        for i, s in enumerate(slots):
            if s is not None or not (closed is not None or raw[i * SLOT_SIZE:(i + 1) * SLOT_SIZE].strip(b"\0")):
                continue
            self._slot_damaged = i
            if closed is None:
                log.warning(
                    "%s: slot %d does not check (an update that did not finish, or damage); "
                    "the state comes from slot %d (seq %d)", path, i, 1 - i, state["seq"],
                )
            else:
                # A clean close writes its state into both slots (see close), so the slot that
                # does not check held the same state, or an update after it that did not finish
                # (the first update after an open is on disk before any other file changes):
                # either way the state in the other slot is whole, and nothing is lost.
                log.warning(
                    "%s: slot %d does not check (damaged); slot %d holds the whole state of the last clean close "
                    "(seq %d), which is used, and is written into slot %d again once the bucket opened",
                    path, i, 1 - i, state["seq"], i,
                )
        self._seq = state["seq"]
        self._head = (int(state["head_segment"]), int(state["head_offset"]))
        self._popped = int(state.get("popped", 0))
        self._cut = (int(state.get("cut_segment", 0)), int(state.get("cut_offset", 0)), int(state.get("cut_above", 0)))
        queue, tagged_from = state.get("queue"), state.get("tagged_from")
        if isinstance(queue, int) and isinstance(tagged_from, int):  # (else: written before identities)
            self._queue, self._tagged_from, self._identity_durable = queue, tagged_from, True
        return closed

    def _check_closed_counts(self, closed: dict, tail: tuple | None) -> None:
        """After a clean close: the segments on disk must be the ones the close counted.

        A segment file deleted, emptied, cut at an entry's end, or replaced by one of
        another size checks as whole entries on its own; only the counts tell.
        """
        found = self._totals()
        if all(closed.get(k) == v for k, v in found.items()):
            return
        if tail is not None:
            path, end, size = tail
            raise self._damaged(path, f"an entry at byte {end} fails its checksum ({size - end} bytes from there on "
                                "do not check), and the bucket was closed cleanly, so no write was cut short there")
        said = ", ".join(f"{k} {closed.get(k)}" for k in found)
        now = ", ".join(f"{k} {v}" for k, v in found.items())
        slot = "" if self._slot_damaged is None else (
            f" (or slot {self._slot_damaged} of {STATE_FILE}, which does not check, held the state of writes "
            "made after that close)")
        raise self._damaged(self.directory, f"the bucket was closed cleanly with {said} in its segment files, "
                            f"which now hold {now}: a segment file is missing, cut short, or was replaced{slot}")

    def _heal_slot(self, closed: dict) -> None:
        """After a clean close whose copy in one slot is damaged: write the state into that
        slot again, so both hold it whole (as the close left them). Failing is no error:
        the next update writes that slot anyway."""
        try:
            pwrite_all(self._state_fd, self._slot_bytes(self._seq + 1, closed), (self._seq + 1) % 2 * SLOT_SIZE)
            _datasync(self._state_fd)
            self._seq += 1
            self._identity_durable = True
        except OSError as exc:
            log.warning("%s: could not rewrite the damaged state slot (%s); the next update writes it",
                        self.directory / STATE_FILE, exc)

    def _damaged(self, path: Path, what: str) -> CorruptDataError:
        """The error for damage the opener found in ``path`` (it repairs nothing then)."""
        return CorruptDataError(
            f"{path}: {what}. This is damage, not what a crash leaves, so the bucket is not opened and nothing "
            "was changed. Restore the bucket from a backup or a dump (hoarddb restore), or drop it and create "
            "it again")

    def _create_state(self, path: Path) -> None:
        self._state_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._seq = -1
        self._queue, self._tagged_from = new_queue_id(), 1  # every segment of a new log carries its identity
        self._write_state()  # seq 0 into slot 0, the full 1024 bytes so later updates never grow the file
        self._sync_dir()

    # -- state slots ------------------------------------------------------------------------

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
                _datasync(self._state_fd)
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
        try:
            os.ftruncate(fd, size)
            _datasync(fd)  # repairs are made durable even with sync off: they are rare
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

    # -- entries ------------------------------------------------------------------------------

    def _read_run(self, number: int, start: int, end: int, n: int) -> tuple[list[bytes], int]:
        """Up to ``n`` payloads of whole entries from ``start`` (before ``end``) of one segment, checked."""
        fd = self._fd(number)
        out: list[bytes] = []
        pos = start
        buf, base = b"", start
        while len(out) < n and pos < end:
            guess = min(max((n - len(out)) * _READ_GUESS, 4096), _WALK_CHUNK)
            rel = pos - base
            if rel + HEADER_SIZE > len(buf):
                buf, base, rel = os.pread(fd, min(guess, end - pos), pos), pos, 0
                if len(buf) < HEADER_SIZE:
                    raise self._corrupt(number, pos, "the file is shorter than its entries")
            length = HEADER.unpack_from(buf, rel)[0] & framing.LENGTH_MASK
            total = HEADER_SIZE + length
            if length < MIN_PAYLOAD or length > MAX_PAYLOAD or pos + total > end:
                raise self._corrupt(number, pos, f"an entry header gives {length} bytes")
            if rel + total > len(buf):
                buf, base, rel = os.pread(fd, min(max(total, guess), end - pos), pos), pos, 0
            header, payload = buf[rel:rel + HEADER_SIZE], buf[rel + HEADER_SIZE:rel + total]
            if not framing.check(header, payload):
                raise self._corrupt(number, pos, "the entry fails its checksum")
            out.append(payload)
            pos += total
        return out, pos

    def _corrupt(self, number: int, offset: int, what: str) -> CorruptDataError:
        return CorruptDataError(
            f"{self._path(number)} at byte {offset}: {what}; the bucket's data is damaged there. "
            "Restore the bucket from a backup"
        )

    def _entry_offsets(self, number: int) -> tuple[array, int]:
        """The offsets of ``number``'s entries, and the index of the first not yet taken."""
        offsets = self._offsets.get(number)
        if offsets is None:
            head_seg, head_off = self._head
            start = head_off if number == head_seg else self._base[number]
            offsets = self._walk(number, start, self._sizes[number])
            self._trim_offsets()
            self._offsets[number] = offsets
        lo = bisect.bisect_left(offsets, self._head[1]) if number == self._head[0] else 0
        return offsets, lo

    def _trim_offsets(self) -> None:
        """Forget the offsets of older segments until at most a few besides the tail's are kept."""
        tail = self._segs[-1] if self._segs else None
        others = [n for n in self._offsets if n != tail]
        for n in others[:max(0, len(others) - _CACHED_OFFSETS + 1)]:
            del self._offsets[n]

    def _walk(self, number: int, start: int, end: int) -> array:
        """Offsets of the entries in ``[start, end)``, by their headers alone (they checked on open)."""
        fd = self._fd(number)
        offsets = array("q")
        pos = start
        buf, base = b"", start
        while pos < end:
            rel = pos - base
            if rel + HEADER_SIZE > len(buf):
                buf, base, rel = os.pread(fd, min(_WALK_CHUNK, end - pos), pos), pos, 0
                if len(buf) < HEADER_SIZE:
                    raise self._corrupt(number, pos, "the file is shorter than its entries")
            length = HEADER.unpack_from(buf, rel)[0] & framing.LENGTH_MASK
            if length < MIN_PAYLOAD or length > MAX_PAYLOAD:
                raise self._corrupt(number, pos, f"an entry header gives {length} bytes")
            offsets.append(pos)
            pos += HEADER_SIZE + length
        if pos != end:
            raise self._corrupt(number, pos, "the last entry runs past the segment's end")
        return offsets

    def _read_forward(self, index: int, offset: int, n: int) -> tuple[list[bytes], list[tuple[int, int]], tuple[int, int]]:
        """Up to ``n`` payloads from segment ``self._segs[index]`` at ``offset`` on, oldest first.

        Also answers how many were read from each segment and the position after the last.
        """
        out: list[bytes] = []
        taken: list[tuple[int, int]] = []
        while True:
            number = self._segs[index]
            end = self._sizes[number]
            if offset < end and len(out) < n:
                got, offset = self._read_run(number, offset, end, n - len(out))
                out.extend(got)
                taken.append((number, len(got)))
            if len(out) >= n or index + 1 >= len(self._segs):
                return out, taken, (number, offset)
            index += 1
            offset = self._base[self._segs[index]]

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
                        self._padded.pop(number)
                    elif number == last_number and pad_end > at + len(data):
                        pad_end = self._pad(fd, at + len(data), pad_end)
                    if self.sync:
                        _datasync(fd)
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
        self._padded.pop(number)
        if self.sync:
            _datasync(fd)
        else:
            self._dirty.add(number)

    def _pad(self, fd: int, end: int, pad_end: int) -> int:
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
                    self._padded.pop(number, None)
                    if self.sync:
                        _datasync(fd)
            return True
        except OSError:
            return False

    def read_head(self, n: int) -> list[bytes]:
        """Up to ``n`` payloads from the head, oldest first, without taking them."""
        with self._lock:
            self._check_open()
            if not self._length:
                return []
            return self._read_forward(0, self._head[1], n)[0]

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

    def read_tail(self, n: int) -> list[bytes]:
        """Up to ``n`` payloads from the tail, newest first, without taking them."""
        with self._lock:
            self._check_open()
            return self._read_tail(n)

    def _read_tail(self, n: int) -> list[bytes]:
        out: list[bytes] = []
        index = len(self._segs) - 1
        while len(out) < n and index >= 0:
            number = self._segs[index]
            if self._counts[number]:
                offsets, lo = self._entry_offsets(number)
                k = min(n - len(out), len(offsets) - lo)
                got, _ = self._read_run(number, offsets[len(offsets) - k], self._sizes[number], k)
                got.reverse()
                out.extend(got)
            index -= 1
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
                for seg in doomed:
                    os.unlink(self._path(seg))
                if shorter:
                    if self.sync:
                        _datasync(self._fd(keep))
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
            _datasync(fd)

    def read_range(self, after: int, limit: int) -> list[bytes]:
        """Up to ``limit`` payloads in storage order (oldest first), skipping the first ``after``."""
        with self._lock:
            self._check_open()
            return self._read_range(after, limit)

    def read_page(self, position: int, limit: int) -> tuple[list[bytes], int]:
        """Up to ``limit`` payloads from entry number ``position`` on, and the number of the first.

        Entries are numbered from the first ever pushed (``popped`` + place in the log), so
        a position keeps meaning the same entry while the head moves: a dump can page
        through a queue that is being popped.
        """
        with self._lock:
            self._check_open()
            position = max(position, self._popped)
            return self._read_range(position - self._popped, limit), position

    def _read_range(self, after: int, limit: int) -> list[bytes]:
        if after >= self._length or limit < 1:
            return []
        index = 0
        while after >= self._counts[self._segs[index]]:
            after -= self._counts[self._segs[index]]
            index += 1
        number = self._segs[index]
        if after == 0:
            start = self._head[1] if number == self._head[0] else self._base[number]
        else:
            offsets, lo = self._entry_offsets(number)
            start = offsets[lo + after]
        return self._read_forward(index, start, limit)[0]

    def flush(self) -> None:
        """Make every change so far durable: what each write does itself when ``sync`` is on.

        Segments first, then the state, then the directory, so a crash inside leaves
        states the opener already knows (see the module's docstring).
        """
        # What is dirty now is taken under the lock, and synced outside it, so appends and
        # pops go on during the fsync (they are the next group's); duplicated descriptors
        # stay valid even if a pop unlinks and closes a segment meanwhile.
        with self._lock:
            self._check_open()
            taken = self._take_dirty()
        try:
            self._sync_taken(*taken)
        except OSError as exc:
            with self._lock:
                raise self._fail(exc, self.directory) from None

    def _take_dirty(self) -> tuple[list[int], int | None, bool]:
        """What is unflushed, taken (holding the lock): duplicated descriptors of the dirty
        segments and of the state (or None), and whether the directory is."""
        fds = [os.dup(self._fd(n)) for n in sorted(n for n in self._dirty if n in self._sizes)]
        state = os.dup(self._state_fd) if self._dirty_state else None
        sync_dir = self._dirty_dir
        self._dirty.clear()
        self._dirty_state = self._dirty_dir = False
        return fds, state, sync_dir

    def _sync_taken(self, fds: list[int], state: int | None, sync_dir: bool) -> None:
        """Flush what :meth:`_take_dirty` took, in the order the opener relies on, and close the descriptors."""
        try:
            for fd in fds:
                _datasync(fd)
            if state is not None:
                _datasync(state)
            if sync_dir:
                fsync_directory(self.directory)
        finally:
            for fd in fds + ([state] if state is not None else []):
                os.close(fd)

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
                    self._sync_taken(*self._take_dirty())
                    totals = self._totals()
                    for _copy in range(2):  # one slot, then (once that is on disk) the other
                        self._write_state(durable=False, closed=totals)
                        _datasync(self._state_fd)
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


def _end_batch_in_file(path: Path, end: int, start: int) -> None:
    """:meth:`SegmentLog._end_batch_at` for the opener: clear MORE on the entry ending at ``end``
    (the file's entries start at ``start``), durably."""
    last = None
    with open(path, "rb") as f:
        for off, payload in framing.scan(f, start, end):
            if off + HEADER_SIZE + len(payload) == end:
                last = (off, payload)
    if last is None:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        if HEADER.unpack(os.pread(fd, HEADER_SIZE, last[0]))[0] & framing.MORE:
            pwrite_all(fd, framing.frame(last[1])[:HEADER_SIZE], last[0])
            _datasync(fd)
    finally:
        os.close(fd)


def _zeros_from(path: Path, start: int, end: int) -> bool:
    """Whether bytes ``[start, end)`` of the file are all zeros."""
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        while start < end:
            chunk = f.read(min(_WALK_CHUNK, end - start))
            if not chunk or chunk.count(0) != len(chunk):
                return False
            start += len(chunk)
    return True


def _parse_slot(raw: bytes) -> dict | None:
    """The state document in one slot, or None when the slot does not check."""
    if len(raw) < HEADER_SIZE:
        return None
    length = HEADER.unpack_from(raw)[0] & framing.LENGTH_MASK
    if length < MIN_PAYLOAD or length > len(raw) - HEADER_SIZE:
        return None
    if not framing.check(raw[:HEADER_SIZE], raw[HEADER_SIZE:HEADER_SIZE + length]):
        return None
    try:
        doc = decode(raw[HEADER_SIZE:HEADER_SIZE + length])
    except Exception:
        return None
    for key in ("seq", "head_segment", "head_offset"):
        if not isinstance(doc.get(key), int):
            return None
    return doc


# -- checking a closed log, reading only (hoarddb check) ------------------------------------


def _read_state(directory: Path) -> tuple[bytes | None, list[dict | None]]:
    """The raw bytes of ``state.bson`` (None when missing) and its two slots (None: does not check)."""
    try:
        with open(Path(directory) / STATE_FILE, "rb") as f:
            raw = f.read(2 * SLOT_SIZE)
    except FileNotFoundError:
        return None, [None, None]
    return raw, [_parse_slot(raw[i * SLOT_SIZE:(i + 1) * SLOT_SIZE]) for i in range(2)]


def closed_cleanly(directory: Path) -> bool:
    """Whether the log in ``directory`` was last closed cleanly (:meth:`SegmentLog.close`),
    so that opening it repairs nothing; reads only."""
    _raw, slots = _read_state(directory)
    valid = [s for s in slots if s is not None]
    return bool(valid) and isinstance(max(valid, key=lambda s: s["seq"]).get("closed"), dict)


def verify(directory: Path, suffix: str) -> list[tuple[str, str]]:
    """What is wrong with the closed log in ``directory``, as ``(file name, what)`` pairs; reads only.

    Every entry from the head on is read and must pass its crc and decode as BSON; the
    state must have a valid slot, and the files what the clean close counted (the
    opener's own checks after a clean close, without its repairs: nothing is written).
    """
    directory = Path(directory)
    problems: list[tuple[str, str]] = []
    pattern = re.compile(r"seg_(\d+)\." + re.escape(suffix) + r"$")
    numbers = sorted(int(m.group(1)) for name in os.listdir(directory) if (m := pattern.match(name)))
    raw, slots = _read_state(directory)
    valid = [s for s in slots if s is not None]
    if raw is None:
        if numbers:
            problems.append((STATE_FILE, "is missing, so where the queue's head is is unknown"))
        return problems
    if not valid:
        if numbers:
            problems.append((STATE_FILE, "has no slot that checks, so where the queue's head is is unknown"))
        return problems
    state = max(valid, key=lambda s: s["seq"])
    closed = state.get("closed") if isinstance(state.get("closed"), dict) else None
    if len(raw) < 2 * SLOT_SIZE:
        problems.append((STATE_FILE, f"is {len(raw)} bytes, not {2 * SLOT_SIZE}: the file was cut short"))
    for i, s in enumerate(slots):
        if s is None and closed is not None:
            problems.append((STATE_FILE, f"slot {i} does not check; slot {1 - i} holds the whole state of the last "
                                         "clean close, which the next open uses and writes into it again"))
        elif s is None and raw[i * SLOT_SIZE:(i + 1) * SLOT_SIZE].strip(b"\0"):
            problems.append((STATE_FILE, f"slot {i} does not check (its other slot, the state in use, does)"))
    queue, tagged_from = state.get("queue"), state.get("tagged_from")
    if not (isinstance(queue, int) and isinstance(tagged_from, int)):
        queue = tagged_from = None  # written before identities: no segment carries one
    head_seg, head_off = int(state["head_segment"]), int(state["head_offset"])
    cut_seg, cut_above = int(state.get("cut_segment", 0)), int(state.get("cut_above", 0))
    for n in numbers:
        if cut_seg < n <= cut_above:
            problems.append((segment_name(n, suffix), "a finished pop had removed this segment file, and it is "
                                                      "there again (a file restored or copied into the bucket)"))
    live = [n for n in numbers if n >= head_seg and not cut_seg < n <= cut_above]
    if live and live[0] != head_seg:
        problems.append((segment_name(head_seg, suffix), f"is missing: it holds the head of the queue, and "
                                                         f"{len(live)} later segment file(s) are there"))
        head_off = 0
    if suffix == "fifo" and live and live != list(range(live[0], live[-1] + 1)):
        missing = next(n for n in range(live[0], live[-1] + 1) if n not in live)
        problems.append((segment_name(missing, suffix), f"is missing between {segment_name(live[0], suffix)} "
                                                        f"and {segment_name(live[-1], suffix)}"))
    entries = total = 0
    for i, n in enumerate(live):
        last = i == len(live) - 1
        path = directory / segment_name(n, suffix)
        size = os.path.getsize(path)
        base, wrong, _crash = check_identity(path, n, queue, tagged_from)
        if wrong is not None:
            problems.append((path.name, wrong))
            continue
        start = max(head_off, base) if n == head_seg else base
        if start > size:
            problems.append((path.name, f"the queue's head is at byte {start}, past the file's end ({size} bytes)"))
            continue
        if size <= base and not last:
            problems.append((path.name, "is empty, and it is not the last segment"))
        end = start
        with open(path, "rb", buffering=_WALK_CHUNK) as f:
            for off, payload in framing.scan(f, start, whole_batches=last):
                try:
                    decode(payload)
                except Exception as exc:  # a crc that checks over bytes that are not BSON
                    problems.append((path.name, f"the entry at byte {off} is not a BSON document ({exc})"))
                entries += 1
                end = off + HEADER_SIZE + len(payload)
        total += end
        if end < size and not (last and _zeros_from(path, end, size)):
            problems.append((path.name, f"the entry at byte {end} fails its checksum ({size - end} bytes from "
                                        "there on do not check)"))
    closed = state.get("closed")
    if isinstance(closed, dict):
        found = {"entries": entries, "segments": len(live), "last": live[-1] if live else 0,
                 "bytes": total}
        last = closed.get("last")
        if isinstance(last, int) and last and last not in live and last > (live[-1] if live else 0):
            problems.append((segment_name(last, suffix), "is missing: the clean close counted it as the last "
                                                         "segment"))
        if any(closed.get(k) != v for k, v in found.items()):
            said = ", ".join(f"{k} {closed.get(k)}" for k in found)
            now = ", ".join(f"{k} {v}" for k, v in found.items())
            problems.append((STATE_FILE, f"the clean close counted {said} in the segment files, which now hold "
                                         f"{now}: a segment file is missing, cut short, or was replaced"))
    return problems
