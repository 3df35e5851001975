"""Opening a segment log: what the opener repairs of what a crash left, and refuses as damage no crash explains.

:class:`SegmentRecovery` is a mixin of :class:`hoarddb.storage.segment.SegmentLog`: its
methods run once, when the log opens, and set the log's own fields (segments, sizes,
counts, head, identity), so they are the log's methods, kept here so that a reader of
the log's appends and takes need not hold them (and a reader of the repairs need not
hold those). The formats they read are drawn in :mod:`hoarddb.storage.segment_format`
and :mod:`hoarddb.storage.segment`; :func:`closed_cleanly` says, reading only, whether
the opener has anything to repair (``hoarddb check``, whose walk of the files without the
repairs is :mod:`hoarddb.storage.segment_check`).

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
segment after it, durably, then reads it as the last (:meth:`SegmentRecovery._cut_after`), so
what is left is a prefix of the log, batches whole. Likewise the segments pushed after a
lifo cut whose doomed segments are still there. A missing segment is read past, as
before: a fifo pop's unlinks may reach the disk before its state, and the segments after
them hold flushed entries (docs/dev/segments.md).
"""

from __future__ import annotations

import logging
import os
import re
from array import array
from pathlib import Path

from ..errors import CorruptDataError
from . import framing, segment_format
from .framing import HEADER, HEADER_SIZE
from .oserrors import fsync_directory, pwrite_all
from .segment_format import (_WALK_CHUNK, SEGMENT_HEADER_SIZE, SLOT_SIZE, STATE_FILE, _header_base,
                             _parse_slot, check_identity, new_queue_id, segment_header, segment_name)

log = logging.getLogger("hoarddb.segment")


class SegmentRecovery:
    """SegmentRecovery is the opening half of a SegmentLog: read the state and the segment
    files, repair what a crash left, refuse damage (see the module's docstring)."""

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
                    segment_format.datasync(fd)  # (repairs are made durable even with sync off)
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
            segment_format.datasync(self._state_fd)
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
            segment_format.datasync(fd)
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


# -- reading the state only (hoarddb check) ------------------------------------


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
