"""The heap store type: a priority queue, highest priority first, first in first out among equals.

In the bucket's LMDB environment:

    b"D" + ~encode_key(priority) + seq (uint64 big-endian)  ->  BSON of the element

``~`` inverts every byte of the order-preserving priority encoding, so LMDB's ascending
key order is descending priority; ``seq`` (kept in ``b"Mseq"``) breaks ties in push
order. An in-memory heap of these keys (rebuilt from the keys on open) gives the next
element in O(1) for peek and pop without a cursor seek; the element itself is read from
LMDB. Priorities are numbers of any BSON kind (int, int64, double, decimal) compared as
values; NaN is refused.
"""

from __future__ import annotations

import heapq
import math
import threading
from typing import Any, Mapping

from bson.decimal128 import Decimal128

from ..errors import BadValueError, NotADocumentError
from ..values.codec import decode
from ..values.keys import encode_key
from .base import KVStore, check_limit, encode_document

SEQ_KEY = b"Mseq"
_INVERT = bytes(255 - i for i in range(256))


class HeapStore(KVStore):
    """HeapStore pops the element with the highest ``priority``; ties leave in push order."""

    type_name = "heap"
    verbs = frozenset({"push", "batch_push", "pop", "peek", "length", "list"})
    bucket_options: dict[str, str] = {}

    def __init__(self, directory, declaration, options):
        super().__init__(directory, declaration, options)
        self._mutex = threading.Lock()
        with self.kv.read() as txn:
            raw = txn.get(SEQ_KEY)
            self._seq = int.from_bytes(raw, "big") if raw else 0
            cursor = txn.cursor()
            keys = []
            if cursor.set_range(self.DOC):
                for key in cursor.iternext(values=False):
                    if not key.startswith(self.DOC):
                        break
                    keys.append(key)
        self._heap = keys  # already ascending, so already a valid heap

    def _prepare(self, doc: Any, what: str) -> tuple[bytes, bytes]:
        if not isinstance(doc, Mapping):
            raise NotADocumentError(f"{what} must be a document with a priority, such as {{priority: 10, Msg: \"Disk full\"}}")
        if "priority" not in doc:
            raise BadValueError(f"{what} needs a numeric priority, such as {{priority: 10, ...}}")
        p = doc["priority"]
        if isinstance(p, bool) or not isinstance(p, (int, float, Decimal128)):
            raise BadValueError(f"{what}: priority must be a number (integer or double), got {type(p).__name__}: {p!r:.40}")
        if (isinstance(p, float) and math.isnan(p)) or (isinstance(p, Decimal128) and p.to_decimal().is_nan()):
            raise BadValueError(f"{what}: priority must be a number, not NaN")
        return encode_key(p).translate(_INVERT), encode_document(doc, what)

    # -- writes ------------------------------------------------------------------------

    def push(self, doc: Mapping) -> None:
        """Add one element with its priority."""
        self.batch_push([doc], _single=True)

    def batch_push(self, docs: list, _single: bool = False) -> int:
        """Add every element in one write, or none; return how many."""
        prepared = [self._prepare(d, "element" if _single else f"element {i} of the batch") for i, d in enumerate(docs)]
        with self._mutex:
            keys = []

            def fn(txn):
                keys.clear()
                seq = self._seq
                for pkey, data in prepared:
                    seq += 1
                    key = self.DOC + pkey + seq.to_bytes(8, "big")
                    txn.put(key, data)
                    keys.append(key)
                txn.put(SEQ_KEY, seq.to_bytes(8, "big"))
                return seq, len(prepared)

            self._seq = self._write(fn)
            for key in keys:
                heapq.heappush(self._heap, key)
        return len(prepared)

    def load(self, docs: list) -> dict:
        """Restore elements with their priorities (as batch_push, for a dump's restore): ``{loaded}``."""
        return {"loaded": self.batch_push(docs)}

    def pop(self, limit: int | None = None):
        """Remove and return the highest-priority element (None when empty); with a limit, up to that many in one write."""
        n = 1 if limit is None else check_limit(limit, self.options.max_pop, "pop")
        with self._mutex:
            keys = heapq.nsmallest(n, self._heap) if n > 1 else self._heap[:1]

            def fn(txn):
                docs = [txn.get(key) for key in keys]
                for key in keys:
                    txn.delete(key)
                return docs, -len(keys)

            raws = self._write(fn) if keys else []
            for _ in keys:
                heapq.heappop(self._heap)
        docs = [decode(raw) for raw in raws]
        if limit is None:
            return docs[0] if docs else None
        return docs

    # -- reads ---------------------------------------------------------------------------

    def peek(self, limit: int | None = None):
        """The highest-priority element without removing it (None when empty); with a limit, the next N in pop order."""
        if limit is None:
            with self._mutex:
                top = self._heap[0] if self._heap else None
                if top is None:
                    return None
                with self.kv.read() as txn:
                    return decode(txn.get(top))
        check_limit(limit, self.options.max_peek, "peek")
        return self._ordered(0, limit)

    def list(self, after: int = 0, limit: int = 100) -> list[dict]:
        """Elements in pop order (the heap's storage order), skipping the first ``after``."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise BadValueError(f"list's after is how many elements to skip, an integer ≥ 0; got {after!r}")
        check_limit(limit, self.options.max_peek, "list")
        return self._ordered(after, limit)

    def _ordered(self, skip: int, limit: int) -> list[dict]:
        out = []
        with self.kv.read() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(self.DOC):
                return out
            for key, raw in cursor:
                if not key.startswith(self.DOC):
                    break
                if skip:
                    skip -= 1
                    continue
                out.append(decode(raw))
                if len(out) >= limit:
                    break
        return out
