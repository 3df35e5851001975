"""Reading a segment log's entries without taking them, through a small cache of entry offsets.

:class:`SegmentReads` is a mixin of :class:`hoarddb.storage.segment.SegmentLog`: the
reads share the log's lock, files and counts, so they are its methods, kept here so
that a reader of the log's writes need not hold them. Every entry read is checked (its
crc32); one that does not check is CorruptDataError naming the file and the byte, never
returned or skipped.
"""

from __future__ import annotations

import bisect
import os
from array import array

from ..errors import CorruptDataError
from . import framing
from .framing import HEADER, HEADER_SIZE, MAX_PAYLOAD, MIN_PAYLOAD
from .segment_format import _WALK_CHUNK

#: Reads of entries go in chunks of about this many bytes per wanted entry (4 KiB to 1 MiB).
_READ_GUESS = 512
#: How many segments' entry offsets stay in memory besides the tail's.
_CACHED_OFFSETS = 2


class SegmentReads:
    """SegmentReads reads entries from the head, the tail or a position, oldest or newest first."""

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

    def read_head(self, n: int) -> list[bytes]:
        """Up to ``n`` payloads from the head, oldest first, without taking them."""
        with self._lock:
            self._check_open()
            if not self._length:
                return []
            return self._read_forward(0, self._head[1], n)[0]

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
