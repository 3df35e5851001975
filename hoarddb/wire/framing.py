"""Cutting a byte stream into BSON documents: each one begins with its own length.

A message on the wire is exactly one BSON document, nothing before or after it:

    +-----------------+----------------------------------------------+------+
    | length  int32LE | elements ...                                 | 0x00 |
    +-----------------+----------------------------------------------+------+
     <------------------------------ length bytes -------------------------->

so the stream needs no framing of its own. A length under 5, over the limit, or a
document whose last byte is not 0x00 cannot be resynchronised from: the reader raises
:class:`ProtocolError` and the connection is closed.
"""

from __future__ import annotations

import struct

from bson.errors import BSONError

from ..errors import DocumentTooLargeError, ProtocolError
from ..values.codec import decode, decode_all, encode_checked
from .messages import MAX_MESSAGE_SIZE

_LENGTH = struct.Struct("<i")
MIN_DOCUMENT = 5  # int32 length + the terminating 0x00


class FrameReader:
    """FrameReader buffers bytes and hands out whole BSON documents, in order.

    ``feed(data)`` then ``next_frame()`` until it returns None. Memory held is at most
    one partial message plus what was fed and not yet taken: once everything fed has been
    taken the buffer is let go (a 16 MiB message is not kept until the next one arrives).
    """

    def __init__(self, max_size: int = MAX_MESSAGE_SIZE, limit_note: str = ""):
        self.max_size = max_size
        #: Said after the limit when a message is over it (why the limit is what it is now).
        self.limit_note = limit_note
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> None:
        """Append bytes received from the peer."""
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet handed out."""
        return len(self._buf) - self._pos

    def pending_length(self) -> int | None:
        """The declared length of the message being received, once its 4 bytes are in."""
        if self.buffered < 4:
            return None
        return _LENGTH.unpack_from(self._buf, self._pos)[0]

    def next_frame(self) -> bytes | None:
        """The next whole document's bytes, or None until more arrive; ProtocolError on a bad length."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        length = _LENGTH.unpack_from(buf, pos)[0]
        if length < MIN_DOCUMENT or length > self.max_size:
            raise ProtocolError(_bad_length(length, self.max_size, bytes(self._buf[self._pos:self._pos + 8]),
                                            self.limit_note), length=length)
        end = pos + length
        if len(buf) < end:
            return None
        if buf[end - 1] != 0:
            raise ProtocolError(f"a message of {length} bytes does not end with 0x00: not a BSON document")
        frame = bytes(buf[pos:end])
        self._taken(end)
        return frame


    def next_frames(self) -> bytes:
        """Every whole document buffered, as one byte string (b"" until one is in): many
        documents decode in one call (``decode_all``). A bad length after good documents
        is raised by the next call."""
        buf, start = self._buf, self._pos
        pos, size = start, len(buf)
        while size - pos >= 4:
            length = _LENGTH.unpack_from(buf, pos)[0]
            if length < MIN_DOCUMENT or length > self.max_size or (pos + length <= size and buf[pos + length - 1] != 0):
                if pos == start:
                    self.next_frame()  # raises the ProtocolError that says what is wrong
                break
            if pos + length > size:
                break
            pos += length
        frames = bytes(buf[start:pos])
        self._taken(pos)
        return frames

    def _taken(self, end: int) -> None:
        """Everything up to ``end`` was handed out; all of it: the buffer is emptied (and freed)."""
        if end == len(self._buf):
            self._buf.clear()
            self._pos = 0
        else:
            self._pos = end


def split_frames(data: bytes) -> list[bytes]:
    """The documents of concatenated whole frames (as :meth:`FrameReader.next_frames` gives)."""
    out, pos = [], 0
    while pos < len(data):
        end = pos + _LENGTH.unpack_from(data, pos)[0]
        out.append(data[pos:end])
        pos = end
    return out


def decode_frames(data: bytes) -> list[dict]:
    """The documents of concatenated whole frames, in one call; ProtocolError if one is not BSON."""
    try:
        return decode_all(data)
    except (BSONError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{len(data)} bytes of messages are not valid BSON: {exc}") from None


def decode_frame(frame: bytes) -> dict:
    """The document of one frame; ProtocolError when its bytes are not valid BSON."""
    try:
        return decode(frame)
    except (BSONError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"a message of {len(frame)} bytes is not valid BSON: {exc}") from None


def encode_message(doc: dict, max_size: int = MAX_MESSAGE_SIZE) -> bytes:
    """The BSON bytes of one message; DocumentTooLargeError over ``max_size``, BadValueError if unencodable."""
    data = encode_checked(doc, "a message")
    if len(data) > max_size:
        raise DocumentTooLargeError(
            f"a message of {len(data)} bytes is over the {max_size}-byte limit of one message; "
            "keep documents under 16 MiB, and read or write large blobs with stream() and put(file)",
            size=len(data))
    return data


def _bad_length(length: int, limit: int, head: bytes, note: str = "") -> str:
    if head[:1] in (b"\x15", b"\x16") and head[1:2] == b"\x03":
        return ("received a TLS record where a BSON message was expected: the peer speaks TLS; "
                "connect with TLS (leave out -insecure), or start the server without --insecure")
    if head[:4] in (b"GET ", b"POST", b"HEAD", b"PUT ") or head[:4].isascii() and head[:4].isalpha():
        return (f"received text ({head!r}) where a BSON message was expected: this port speaks the "
                "hoardDB protocol (the metrics are on --metrics-port)")
    if length < MIN_DOCUMENT:
        return f"a message declares {length} bytes; a BSON document has at least {MIN_DOCUMENT}"
    return f"a message declares {length} bytes, over the {limit}-byte limit of one message{note}"
