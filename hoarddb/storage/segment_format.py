"""The bytes of a fifo or lifo bucket's files: segment names and identities, and the state file's slots.

A segment file's identity is drawn at :func:`segment_header`, which makes it. The log
that writes the files is :mod:`hoarddb.storage.segment` (appends and takes, and what a
crash in each leaves) with :mod:`hoarddb.storage.segment_state` (the state file's slots,
drawn there); what the opener does with what a crash left is
:mod:`hoarddb.storage.segment_recovery`. This module is what all of them read and write
by, and the one ``datasync`` they call.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

from ..values.codec import decode
from . import framing
from .framing import HEADER, HEADER_SIZE, MIN_PAYLOAD

STATE_FILE = "state.bson"
#: Bytes of one state slot; a state document is about 150 bytes of BSON.
SLOT_SIZE = 512
#: Reads that walk a segment's entries go in chunks of at most this many bytes.
_WALK_CHUNK = 1 << 20

#: The identity a segment file begins with (see segment_header): its first 8 bytes, which as a
#: frame's length word would give more than MAX_PAYLOAD, so no file of entries begins with them.
SEGMENT_MAGIC = b"hoardseg"
_SEGMENT_HEADER = struct.Struct("<8sQQI4x")
#: Bytes of a segment file's identity; its entries start after them (a file written before the
#: identity has none, and its entries start at byte 0).
SEGMENT_HEADER_SIZE = _SEGMENT_HEADER.size  # 32

# fdatasync writes the data and the metadata needed to read it back (the file size),
# which is all a segment append, a truncation or a slot write needs; it skips mtime.
# Every module of the log calls it as segment_format.datasync, so that a test (or a
# benchmark) that replaces it here replaces every fdatasync of the log's files.
datasync = getattr(os, "fdatasync", os.fsync)


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
