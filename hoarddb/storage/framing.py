"""The framing of one entry in an append-only file: an 8-byte header, then the payload.

Segment files (fifo/lifo) and a blob bucket's ``_index.bson`` are sequences of entries:

    +-------------------+-------------------+---------------------------+
    | length: uint32 LE | crc32: uint32 LE  | payload: `length` bytes    |
    +-------------------+-------------------+---------------------------+
      bytes 0..3          bytes 4..7          (raw BSON for hoardDB)

``crc32`` covers the four length bytes and the payload, so a torn header, a torn
payload, zeros left by a crash in the middle of an append, and a flipped bit are all
found: :func:`scan` stops at the first entry that does not check, and everything from
there on is the torn tail that the opener cuts off (``os.truncate``) and logs.
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO, Iterator

HEADER = struct.Struct("<II")
HEADER_SIZE = HEADER.size  # 8
MIN_PAYLOAD = 5  # the smallest BSON document: int32 length + terminating NUL
MAX_PAYLOAD = 16 * 1024 * 1024 + 16 * 1024  # one BSON document at the 16 MiB limit, with slack


def frame(payload: bytes) -> bytes:
    """The bytes of one entry: header then payload."""
    length = len(payload)
    crc = zlib.crc32(payload, zlib.crc32(length.to_bytes(4, "little")))
    return HEADER.pack(length, crc) + payload


def check(header: bytes, payload: bytes) -> bool:
    """Whether a header and the payload after it form a whole, uncorrupted entry."""
    if len(header) != HEADER_SIZE:
        return False
    length, crc = HEADER.unpack(header)
    if length != len(payload):
        return False
    return zlib.crc32(payload, zlib.crc32(length.to_bytes(4, "little"))) == crc


def scan(f: BinaryIO, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, payload)`` for each whole entry from ``start``.

    Stops silently at the end of the file or at the first entry that does not check;
    the caller compares the last good offset with the file size to find a torn tail.
    """
    f.seek(start)
    offset = start
    while end is None or offset < end:
        header = f.read(HEADER_SIZE)
        if len(header) < HEADER_SIZE:
            return
        length, _ = HEADER.unpack(header)
        if length < MIN_PAYLOAD or length > MAX_PAYLOAD:
            return
        payload = f.read(length)
        if not check(header, payload):
            return
        yield offset, payload
        offset += HEADER_SIZE + length


def valid_end(f: BinaryIO, start: int = 0) -> int:
    """The offset just past the last whole entry: where a torn tail begins."""
    end = start
    for offset, payload in scan(f, start):
        end = offset + HEADER_SIZE + len(payload)
    return end
