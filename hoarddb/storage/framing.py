"""The framing of one entry in an append-only file: an 8-byte header, then the payload.

Segment files (fifo/lifo) and a blob bucket's ``_index.bson`` are sequences of entries:

    +-------------------+-------------------+---------------------------+
    | length: uint32 LE | crc32: uint32 LE  | payload: `length` bytes    |
    +-------------------+-------------------+---------------------------+
      bytes 0..3          bytes 4..7          (raw BSON for hoardDB)

    length word: bit 31 = MORE (another entry of the same batch follows),
                 bits 0..30 = the payload's length

A batch written in one append (``batch_push``) sets MORE on every entry but its last, so
a reader that wants whole batches only (``scan(..., whole_batches=True)``) drops a batch
whose last entry never made it to disk: a crash halfway through a batch leaves none of it.

``crc32`` covers the four length bytes and the payload, so a torn header, a torn
payload, zeros left by a crash in the middle of an append, and a flipped bit are all
found: :func:`scan` stops at the first entry that does not check, and everything from
there on is the torn tail that the opener cuts off (``os.truncate``) and logs. (A
segment's opener keeps a remainder that is only zeros: a fifo log preallocates its last
segment with zeros, see hoarddb/storage/segment.py.)
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO, Iterator

HEADER = struct.Struct("<II")
HEADER_SIZE = HEADER.size  # 8
MIN_PAYLOAD = 5  # the smallest BSON document: int32 length + terminating NUL
MAX_PAYLOAD = 16 * 1024 * 1024 + 16 * 1024  # one BSON document at the 16 MiB limit, with slack


MORE = 0x8000_0000
LENGTH_MASK = 0x7FFF_FFFF


def frame(payload: bytes, more: bool = False) -> bytes:
    """The bytes of one entry: header then payload (``more``: another entry of its batch follows)."""
    word = len(payload) | (MORE if more else 0)
    crc = zlib.crc32(payload, zlib.crc32(word.to_bytes(4, "little")))
    return HEADER.pack(word, crc) + payload


def frame_batch(payloads: list[bytes]) -> list[bytes]:
    """The entries of one batch: MORE on each but the last."""
    last = len(payloads) - 1
    return [frame(p, i < last) for i, p in enumerate(payloads)]


def length_of(word: int) -> int:
    """The payload length a header's first word gives."""
    return word & LENGTH_MASK


def check(header: bytes, payload: bytes) -> bool:
    """Whether a header and the payload after it form a whole, uncorrupted entry."""
    if len(header) != HEADER_SIZE:
        return False
    word, crc = HEADER.unpack(header)
    if word & LENGTH_MASK != len(payload):
        return False
    return zlib.crc32(payload, zlib.crc32(header[:4])) == crc


def scan(f: BinaryIO, start: int = 0, end: int | None = None,
         whole_batches: bool = False) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, payload)`` for each whole entry from ``start``.

    Stops silently at the end of the file or at the first entry that does not check;
    the caller compares the last good offset with the file size to find a torn tail.
    With ``whole_batches``, the entries of a batch are yielded only once its last entry
    checked, so a torn batch is part of the torn tail.
    """
    f.seek(start)
    offset = start
    pending: list[tuple[int, bytes]] = []
    while end is None or offset < end:
        header = f.read(HEADER_SIZE)
        if len(header) < HEADER_SIZE:
            return
        word, _ = HEADER.unpack(header)
        length = word & LENGTH_MASK
        if length < MIN_PAYLOAD or length > MAX_PAYLOAD:
            return
        payload = f.read(length)
        if not check(header, payload):
            return
        if whole_batches and word & MORE:
            pending.append((offset, payload))
        else:
            yield from pending
            pending.clear()
            yield offset, payload
        offset += HEADER_SIZE + length


def valid_end(f: BinaryIO, start: int = 0) -> int:
    """The offset just past the last whole entry: where a torn tail begins."""
    end = start
    for offset, payload in scan(f, start):
        end = offset + HEADER_SIZE + len(payload)
    return end
