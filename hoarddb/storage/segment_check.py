"""Checking a fifo or lifo bucket's files, reading only: a closed log's (``hoarddb check DIR``) or an open one's, while it serves.

One check (:func:`check_log`) over one moment of the log, a :class:`LogView`, taken in
one of two ways:

* **closed** (:func:`closed_view`): the state file and the segment files as they are on
  disk; each segment is read to the file's end, and the counts a clean close recorded
  are compared with what the files hold.
* **open** (:meth:`SegmentCheck.view`, under the log's lock, which holds appends, pops
  and cuts only while it reads the 1 KiB of ``state.bson`` and lists the folder): the
  state's bytes, the segment files there, and where the log knows each segment's
  entries end. The entries are read after the lock is let go, while the queue serves,
  each segment up to that recorded end, so what is read is that moment of the log:

      seg_00003.fifo   seg_00004.fifo   seg_00005.fifo (the last)
      |head ... entries| entries ...... | entries ... end| appended after the view: not read
             ^ a pop moves the head, and unlinks a segment it leaves (whole)

  A fifo's entries never change once written: appends land after the recorded end, a
  pop writes only ``state.bson`` and unlinks segments it has left. A segment file that is
  gone when the check comes to it was popped meanwhile; it is skipped, and only if the
  log still counts it afterwards (:meth:`SegmentCheck.check_open` asks, under the lock)
  is it reported missing. A lifo's pops truncate its tail and may rewrite the header of
  the entry that becomes its last, so entries read while one ran may be half rewritten:
  when a lifo pop ran during the read and the read found something, the check is made
  again with the log held, and that answer is the report.

What is checked either way: the state has a slot that checks (and a damaged other slot
is said), no segment a finished cut removed is there again, the head's segment is there
and a fifo's numbering has no gap, every segment file names this queue and its own
number, and every entry from the head on passes its crc and decodes as BSON, up to where
the segment's entries end.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import StorageError
from ..values.codec import decode
from . import framing
from .framing import HEADER_SIZE
from .segment_format import _WALK_CHUNK, SLOT_SIZE, STATE_FILE, _parse_slot, check_identity, segment_name
from .segment_recovery import _read_state, _zeros_from


@dataclass(frozen=True)
class LogView:
    """LogView is one moment of a log as its check reads it: the bytes of ``state.bson``
    (None when there is none), the numbers of the segment files in the folder (ascending),
    and, for an open log, where the entries of each segment it holds end (``ends``; None
    for a closed log, whose segments are read to their files' ends)."""

    raw_state: bytes | None
    numbers: list[int]
    ends: dict[int, int] | None = None


def segment_numbers(directory: Path, suffix: str) -> list[int]:
    """The numbers of the segment files (``seg_NNNNN.<suffix>``) in ``directory``, ascending."""
    pattern = re.compile(r"seg_(\d+)\." + re.escape(suffix) + r"$")
    return sorted(int(m.group(1)) for name in os.listdir(directory) if (m := pattern.match(name)))


def closed_view(directory: Path, suffix: str) -> LogView:
    """The view of a closed log: its files as they are on disk."""
    directory = Path(directory)
    raw, _slots = _read_state(directory)
    return LogView(raw, segment_numbers(directory, suffix))


def verify(directory: Path, suffix: str) -> list[tuple[str, str]]:
    """What is wrong with the closed log in ``directory``, as ``(file name, what)`` pairs; reads only.

    The opener's own checks after a clean close, without its repairs: nothing is written.
    """
    return check_log(Path(directory), suffix, closed_view(directory, suffix))[0]


def check_log(directory: Path, suffix: str, view: LogView) -> tuple[list[tuple[str, str]], list[int]]:
    """What is wrong with the log in ``directory`` at the moment ``view`` took: ``(problems,
    vanished)``, the problems as ``(file name, what)`` pairs, and the numbers of segments
    whose files were gone when the check came to them (popped since the view, or damage:
    the caller tells which). See the module's docstring for what is checked."""
    problems: list[tuple[str, str]] = []
    vanished: list[int] = []
    raw, numbers, ends = view.raw_state, view.numbers, view.ends
    slots = [None, None] if raw is None else [_parse_slot(raw[i * SLOT_SIZE:(i + 1) * SLOT_SIZE]) for i in range(2)]
    valid = [s for s in slots if s is not None]
    if raw is None:
        if numbers:
            problems.append((STATE_FILE, "is missing, so where the queue's head is is unknown"))
        return problems, vanished
    if not valid:
        if numbers:
            problems.append((STATE_FILE, "has no slot that checks, so where the queue's head is is unknown"))
        return problems, vanished
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
    if ends is not None:
        said = {name for name, _ in problems}
        for n in sorted(set(ends) - set(live)):
            if segment_name(n, suffix) not in said:
                problems.append((segment_name(n, suffix), f"is missing, and the queue holds entries in it (up to "
                                                          f"byte {ends[n]})"))
    entries = total = 0
    for i, n in enumerate(live):
        path = directory / segment_name(n, suffix)
        if ends is not None and n not in ends:
            problems.append((path.name, "the queue does not hold this segment file: a file copied or restored into "
                                        "the bucket while it served"))
            continue
        try:
            found = _check_segment(path, n, i == len(live) - 1, head_off if n == head_seg else None,
                                   None if ends is None else ends[n], queue, tagged_from, problems)
        except FileNotFoundError:  # gone since the view: a pop took it (or damage, which the caller tells)
            vanished.append(n)
            continue
        if found is not None:
            entries += found[0]
            total += found[1]
    if closed is not None and ends is None:
        found = {"entries": entries, "segments": len(live), "last": live[-1] if live else 0, "bytes": total}
        last = closed.get("last")
        if isinstance(last, int) and last and last not in live and last > (live[-1] if live else 0):
            problems.append((segment_name(last, suffix), "is missing: the clean close counted it as the last "
                                                         "segment"))
        if any(closed.get(k) != v for k, v in found.items()):
            said = ", ".join(f"{k} {closed.get(k)}" for k in found)
            now = ", ".join(f"{k} {v}" for k, v in found.items())
            problems.append((STATE_FILE, f"the clean close counted {said} in the segment files, which now hold "
                                         f"{now}: a segment file is missing, cut short, or was replaced"))
    return problems, vanished


def _check_segment(path: Path, number: int, last: bool, head: int | None, recorded: int | None,
                   queue: int | None, tagged_from: int | None, problems: list) -> tuple[int, int] | None:
    """Check one segment file: its identity, then its entries from ``head`` (its first entry's
    offset when None) to ``recorded`` (an open log's end of its entries) or to the file's end
    (then zeros after a last segment's entries are its preallocation). ``(entries, where they
    end)``, or None when its identity is wrong; FileNotFoundError when the file is gone."""
    base, wrong, _crash = check_identity(path, number, queue, tagged_from)
    if wrong is not None:
        problems.append((path.name, wrong))
        return None
    start = base if head is None else max(head, base)
    with open(path, "rb", buffering=_WALK_CHUNK) as f:
        size = os.fstat(f.fileno()).st_size
        stop = size if recorded is None else recorded
        if start > stop:
            problems.append((path.name, f"the queue's head is at byte {start}, past the file's end ({size} bytes)"
                             if recorded is None else f"the queue's head is at byte {start}, past the end of its "
                             f"entries (byte {recorded})"))
            return None
        if stop <= base and not last:
            problems.append((path.name, "is empty, and it is not the last segment"))
        entries, end = 0, start
        for off, payload in framing.scan(f, start, None if recorded is None else recorded, whole_batches=last):
            try:
                decode(payload)
            except Exception as exc:  # a crc that checks over bytes that are not BSON
                problems.append((path.name, f"the entry at byte {off} is not a BSON document ({exc})"))
            entries += 1
            end = off + HEADER_SIZE + len(payload)
    if recorded is not None and size < recorded and end < recorded:
        problems.append((path.name, f"the file ends at byte {size}, and the queue's entries in it end at byte "
                                    f"{recorded}: it was cut short"))
    elif end > stop:
        problems.append((path.name, f"the entry at byte {off} runs past where the queue's entries in this file end "
                                    f"(byte {stop})"))
    elif end < stop and not (recorded is None and last and _zeros_from(path, end, size)):
        problems.append((path.name, f"the entry at byte {end} fails its checksum ({stop - end} bytes from there on "
                                    "do not check)"))
    return entries, end


class SegmentCheck:
    """SegmentCheck is the check of an open log, while it serves: a mixin of
    :class:`hoarddb.storage.segment.SegmentLog` (it reads the log's fields under its lock)."""

    def view(self) -> LogView:
        """The log as it is now (hold ``self._lock``): ``state.bson``'s bytes, the segment files
        in the folder, and where the entries of each segment the log holds end."""
        raw = os.pread(self._state_fd, 2 * SLOT_SIZE, 0)
        return LogView(raw, segment_numbers(self.directory, self.suffix), dict(self._sizes))

    def check_open(self) -> list[tuple[str, str]]:
        """What is wrong with the log's files as of one moment during the call, as ``(file
        name, what)`` pairs (:func:`verify`'s, for an open log); appends, pops and cuts go on
        meanwhile, held only while the moment is taken (see the module's docstring). A log
        that takes no more operations since a write failed halfway says so, as its problem."""
        try:
            with self._lock:
                self._check_open()
                view, rewrites = self.view(), self._rewrites
        except StorageError as exc:
            return [("", exc.message)]
        problems, vanished = check_log(self.directory, self.suffix, view)
        if not problems and not vanished:
            return problems
        with self._lock:
            self._check_open()
            if self._rewrites != rewrites or any(n in self._sizes for n in vanished):
                # A lifo pop rewrote entries the read may have met half done, or a segment
                # the log still holds is gone: the check again, with the log held still.
                problems, _ = check_log(self.directory, self.suffix, self.view())
        return problems
