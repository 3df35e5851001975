"""Blob data in chunks: bytes or a binary file object, read a piece at a time, never whole.

Shared by the blob store (writing a put), its store-field twin, and the clients
(uploading a put over the wire), so all three accept and refuse the same things.
"""

from __future__ import annotations

from typing import Any, Iterator

from .errors import BadValueError

#: How much of a blob is read, hashed, written or sent at a time.
CHUNK_SIZE = 1024 * 1024


def chunks(data: Any, size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """The bytes of ``data`` (bytes, bytearray, memoryview, or a binary file object), ``size`` at a time."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        if not view.c_contiguous:
            view = memoryview(view.tobytes())
        view = view.cast("B")
        for start in range(0, len(view), size):
            yield view[start:start + size]
        return
    while True:
        chunk = data.read(size)
        if chunk is None:
            raise BadValueError("put data is a non-blocking stream with no data ready; give a blocking file object")
        if isinstance(chunk, str):
            raise BadValueError("put data is a file opened in text mode (read gave str); open it in binary mode ('rb')")
        if not chunk:
            return
        yield chunk
