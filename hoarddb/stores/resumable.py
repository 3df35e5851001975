"""Reads of a bucket's LMDB keys that hold no read transaction between chunks, so a cursor can wait between batches.

A cursor (hoarddb/cursors.py) may sit idle for minutes between two batches. Were it to
keep its LMDB read transaction meanwhile, each idle cursor would hold one of LMDB's
reader slots (``max_readers``, a fixed number per environment) and keep every page it
saw from being reused, and a growing map (storage/kv.py's ``_grow``) ends every open
transaction anyway. So these generators read a chunk of entries (at most ``CHUNK``
entries or ``CHUNK_BYTES`` bytes) in a fresh read transaction, end it, hand the chunk
out, and resume after the last key they handed out in the next transaction.

Each chunk is read by a function of its own: py-lmdb keeps a read transaction's reader
slot until the transaction object is freed (a committed one may be renewed), so no
transaction may stay a local variable of a generator suspended between chunks.

What that means for a reader, as for MongoDB's cursors: a long read is not one snapshot.
Each entry is seen at most once and in key order; an entry written behind the position
is not seen, one written ahead of it is; one deleted ahead of it is not seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

#: The most entries, and bytes of values, one chunk reads in one read transaction.
CHUNK = 64
CHUNK_BYTES = 256 * 1024


def scan(kv, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of every key under ``prefix`` (from ``start`` on, when given), in key order."""
    at = start if start is not None else prefix
    while True:
        chunk, full = _forward(kv, at, lambda key: key.startswith(prefix))
        yield from chunk
        if not full:
            return
        at = chunk[-1][0] + b"\x00"  # the smallest key after the last one handed out


def walk(kv, lower: bytes, upper: bytes, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of the keys in ``[lower, upper)``, ascending (or descending with ``reverse``)."""
    if not reverse:
        at = lower
        while True:
            chunk, full = _forward(kv, at, lambda key: key < upper)
            yield from chunk
            if not full:
                return
            at = chunk[-1][0] + b"\x00"
    below = upper  # exclusive
    while True:
        chunk, full = _backward(kv, lower, below)
        yield from chunk
        if not full:
            return
        below = chunk[-1][0]


def fetch(kv, prefix: bytes, keys: Iterable[bytes]) -> Iterator[bytes]:
    """The values of ``prefix + key`` for each of ``keys`` in turn, skipping keys that hold nothing
    (a document deleted since its index entry was read)."""
    todo = iter(keys)
    while True:
        chunk, full = _values(kv, prefix, todo)
        yield from chunk
        if not full:
            return


def fetch_walked(kv, prefix: bytes, walked: list) -> Iterator[tuple[bool, bytes, bytes | None]]:
    """``(first of its run, key, value or None)`` for each ``(first, key)`` of ``walked`` (an
    index read in a sort's order, planner.Plan.walk), the values read in chunks."""
    for at in range(0, len(walked), CHUNK):
        yield from _walked_values(kv, prefix, walked[at:at + CHUNK])


def _walked_values(kv, prefix: bytes, part: list) -> list:
    with kv.read() as txn:
        return [(first, key, txn.get(prefix + key)) for first, key in part]


def _forward(kv, at: bytes, within) -> tuple[list, bool]:
    """The entries from ``at`` on while ``within(key)``, one chunk of them; and whether it is full."""
    chunk: list = []
    size = 0
    with kv.read() as txn:
        cursor = txn.cursor()
        if cursor.set_range(at):
            for key, value in cursor:
                if not within(key):
                    break
                chunk.append((key, value))
                size += len(value)
                if len(chunk) >= CHUNK or size >= CHUNK_BYTES:
                    return chunk, True
    return chunk, False


def _backward(kv, lower: bytes, below: bytes) -> tuple[list, bool]:
    """The entries under ``below`` down to ``lower``, descending, one chunk of them; and whether it is full."""
    chunk: list = []
    size = 0
    with kv.read() as txn:
        cursor = txn.cursor()
        ok = cursor.prev() if cursor.set_range(below) else cursor.last()
        while ok:
            key = cursor.key()
            if key < lower:
                break
            if key < below:
                value = cursor.value()
                chunk.append((key, value))
                size += len(value)
                if len(chunk) >= CHUNK or size >= CHUNK_BYTES:
                    return chunk, True
            ok = cursor.prev()
    return chunk, False


def _values(kv, prefix: bytes, todo: Iterator[bytes]) -> tuple[list, bool]:
    """The values of the next keys of ``todo`` that hold one, one chunk of them; and whether it is full."""
    chunk: list = []
    size = 0
    with kv.read() as txn:
        for key in todo:
            raw = txn.get(prefix + key)
            if raw is not None:
                chunk.append(raw)
                size += len(raw)
                if len(chunk) >= CHUNK or size >= CHUNK_BYTES:
                    return chunk, True
    return chunk, False
