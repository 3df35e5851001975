"""The storage seam of a store kept as keys under a prefix of an LMDB environment, and the log of elements over it.

A store's semantics (what a fifo pops, how a heap breaks ties, what a keyed store lists)
are written once, in its type's module, over whatever holds its elements. A bucket's
fifo holds them in segment files (:class:`~hoarddb.storage.segment.SegmentLog`); a
document's fifo store field holds them as keys in its bucket's LMDB environment. This
module is the second kind of home: a :class:`Keyspace` runs a function in one read or
write transaction and hands it a :class:`Keys` view, which sees only the keys under the
keyspace's prefix (as a py-lmdb cursor sees one database), and its count record:

    prefix + element key   ->  element (BSON, or a blob's metadata)
    counter key            ->  count u64 BE, last seq u64 BE     (read before, written after)

A Keyspace says nothing of what the prefix is: a store field's is its document's key and
field number (:mod:`hoarddb.stores.fields`), and a store one level deeper (the store of
an element of a hash field) is the same store class over a longer prefix. A view sees
every key under its prefix, so a deeper level's keys must not fall under a scan of its
parent's elements: they have a prefix of their own (a leading namespace byte and a level
byte, see :mod:`hoarddb.stores.fields`), not the parent's prefix extended. What a write must check besides (that the document
exists, the L2 limits) is the Keyspace's own business, in :meth:`Keyspace.write`.

:class:`KeyLog` is a queue's storage over a keyspace, with the methods of SegmentLog that
the queue verbs use, so that :class:`~hoarddb.stores.fifo.QueueVerbs` runs over either;
a heap uses it too, its element keys led by the inverted priority.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Iterator

#: A count record: how many elements the keyspace holds, and the last sequence number given.
COUNTER = struct.Struct(">QQ")


class Keys:
    """Keys is one transaction seen through a keyspace's prefix: the element keys it is
    given and returns are the part after the prefix. ``count`` and ``seq`` are the count
    record's, read when the transaction began; a write changes them, and its keyspace
    stores them before the commit."""

    __slots__ = ("txn", "prefix", "count", "seq")

    def __init__(self, txn, prefix: bytes, count: int = 0, seq: int = 0):
        self.txn, self.prefix, self.count, self.seq = txn, prefix, count, seq

    def get(self, key: bytes) -> bytes | None:
        return self.txn.get(self.prefix + key)

    def put(self, key: bytes, value: bytes) -> bool:
        """Store ``value`` under ``key``; True when the key is new (counted)."""
        new = self.txn.get(self.prefix + key) is None
        self.txn.put(self.prefix + key, value)
        self.count += new
        return new

    def delete(self, key: bytes) -> bool:
        """Delete ``key``; True when it was there (counted)."""
        gone = self.txn.delete(self.prefix + key)
        self.count -= bool(gone)
        return bool(gone)

    def append(self, value: bytes, lead: bytes = b"") -> None:
        """Store ``value`` under ``lead`` + the next sequence number (8 bytes, big-endian)."""
        self.seq += 1
        self.txn.put(self.prefix + lead + self.seq.to_bytes(8, "big"), value)
        self.count += 1

    def items(self, *, reverse: bool = False, limit: int, skip: int = 0,
              after: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(element key, value)`` in key order (or reversed), from after ``after``, skipping ``skip``."""
        prefix, cursor, n = self.prefix, self.txn.cursor(), 0
        if not reverse:
            first = prefix + after if after is not None else prefix
            if not cursor.set_range(first):
                return
            for key, value in cursor:
                if not key.startswith(prefix):
                    return
                if after is not None and key == first:
                    continue
                if skip:
                    skip -= 1
                    continue
                yield key[len(prefix):], value
                n += 1
                if n >= limit:
                    return
        else:
            ok = cursor.prev() if cursor.set_range(prefix + b"\xff" * 16) else cursor.last()
            while ok:
                key = cursor.key()
                if not key.startswith(prefix):
                    return
                yield key[len(prefix):], cursor.value()
                n += 1
                if n >= limit:
                    return
                ok = cursor.prev()


class Keyspace:
    """Keyspace is where a store keeps its elements when they are keys of an LMDB
    environment: a prefix, and the two calls a store's verbs make of it.

    Subclasses give the transactions (:mod:`hoarddb.stores.fields`: the owning bucket's,
    checking that the document exists and the limits).
    """

    #: The keys' common prefix, and the store's name in messages (``Property["p1"].Expenses``).
    prefix: bytes = b""
    where: str = ""

    def read(self, fn: Callable[[Keys], Any]) -> Any:
        """``fn(keys)`` in one read transaction; its result."""
        raise NotImplementedError

    def write(self, fn: Callable[[Keys], Any]) -> Any:
        """``fn(keys)`` in one write transaction, all of it or nothing; its result."""
        raise NotImplementedError

    # A keyed store whose elements own stores of their own (a deeper level, see
    # hoarddb.stores.fields) asks its keyspace about them; a keyspace without them says none.

    def owns_stores(self) -> bool:
        """Whether this store's elements own stores."""
        return False

    def drop_element(self, keys: Keys, ek: bytes, key: Any) -> None:
        """Delete the stores element ``ek`` owns, in ``keys``' transaction (before the element goes)."""

    def element_stores(self, keys: Keys, ek: bytes) -> list[dict]:
        """``[{name, type, length}]`` of the stores element ``ek`` owns."""
        return []


class KeyLog:
    """KeyLog is a queue's elements over a keyspace, with the verbs' side of SegmentLog:
    ``append`` at the tail, ``take_head``/``take_tail`` and ``read_head``/``read_tail``,
    ``read_range`` in storage order, ``len``. Each call is one transaction.

    Element keys are a sequence number (u64 BE), led by ``lead`` when given (a heap's
    inverted priority), so key order is storage order: push order, or a heap's pop order.
    """

    __slots__ = ("space",)

    def __init__(self, space: Keyspace):
        self.space = space

    def append(self, payloads: list[bytes], leads: list[bytes] | None = None) -> None:
        def fn(keys: Keys) -> None:
            for i, payload in enumerate(payloads):
                keys.append(payload, leads[i] if leads else b"")

        self.space.write(fn)

    def take_head(self, n: int) -> list[bytes]:
        return self._take(n, reverse=False)

    def take_tail(self, n: int) -> list[bytes]:
        return self._take(n, reverse=True)

    def read_head(self, n: int) -> list[bytes]:
        return self.space.read(lambda keys: [v for _, v in keys.items(limit=n)])

    def read_tail(self, n: int) -> list[bytes]:
        return self.space.read(lambda keys: [v for _, v in keys.items(limit=n, reverse=True)])

    def read_range(self, skip: int, limit: int) -> list[bytes]:
        return self.space.read(lambda keys: [v for _, v in keys.items(limit=limit, skip=skip)])

    def __len__(self) -> int:
        return self.space.read(lambda keys: keys.count)

    def _take(self, n: int, reverse: bool) -> list[bytes]:
        def fn(keys: Keys) -> list[bytes]:
            items = list(keys.items(limit=n, reverse=reverse))
            for key, _ in items:
                keys.delete(key)
            return [value for _, value in items]

        return self.space.write(fn)
