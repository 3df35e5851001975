"""The heap store type: a priority queue, highest priority first, first in first out among equals.

:class:`HeapVerbs` is what a heap does, once, for a heap bucket (:class:`HeapStore`) and a
document's heap store field (:class:`HeapField`, the same keys under the field's keyspace
of its bucket's environment, :mod:`hoarddb.stores.keyspace`). In a heap bucket's LMDB
environment:

    b"D" + ~encode_key(priority) + seq (uint64 big-endian)  ->  BSON of the element

``~`` inverts every byte of the order-preserving priority encoding, so LMDB's ascending
key order is descending priority; ``seq`` (kept in ``b"Mseq"``) breaks ties in push
order. An in-memory heap of these keys (rebuilt from the keys on open) gives the next
element in O(1) for peek and pop without a cursor seek; the element itself is read from
LMDB. Priorities are numbers of any BSON kind (int, int64, double, decimal) compared as
values; NaN is refused.

Workers may consume a heap with claim/ack (:mod:`hoarddb.stores.claims`). A claimed
element keeps its ready key; its claim record sits beside it under the same suffix,

    b"L" + ~encode_key(priority) + seq  ->  claim header (token, deliveries, expires)

and claiming moves the element from ready to claimed in one transaction: the record is
put (and the key leaves the in-memory heap) in one commit, so a crash leaves either no
claim or the whole claim. On open the heap is rebuilt from the ready keys that have no
claim record. ``ack`` deletes both keys in one commit. ``b"Mcount"`` counts every
element, claimed or not; ``length`` answers the ready ones. ``export`` (dumps) holds
every element, claimed ones too.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import Mapping
from typing import Any

from bson.decimal128 import Decimal128

from ..errors import BadValueError, NotADocumentError
from ..values.codec import DECODE_ERRORS, decode
from ..values.keys import encode_key
from . import claims
from .base import REBUILD, KVStore, Problem, Reply, check_limit, directory_bytes, encode_document, kv_data_bytes, scan
from .keyspace import KeyLog, Keyspace
from .claims import CLAIM, CLAIM_OPTIONS, HEADER, ClaimTable, ClaimVerbs, load_records, validate_claim_options

SEQ_KEY = b"Mseq"
_INVERT = bytes(255 - i for i in range(256))


class HeapVerbs:
    """HeapVerbs is what a heap does, over its storage: ``pop`` takes the element with the
    highest ``priority``, ties in push order; ``list`` reads in that order. A heap bucket
    (:class:`HeapStore`) and a heap store field (:class:`HeapField`) give the storage:

        _add(prepared)       store ``[(inverted priority key, BSON)]`` in one write
        _take(n)             remove and return the top ``n`` (BSON), in pop order
        _look(n, one)        the top ``n`` decoded, not removed; and answer fields to add
        _ordered(skip, n)    ``n`` elements decoded, in pop order, after the first ``skip``
    """

    def push(self, doc: Mapping) -> None:
        """Add one element with its priority."""
        self.batch_push([doc], _single=True)

    def batch_push(self, docs: list, _single: bool = False) -> int:
        """Add every element in one write, or none; return how many."""
        self._add([prepare_element(d, "element" if _single else f"element {i} of the batch")
                   for i, d in enumerate(docs)])
        return len(docs)

    def pop(self, limit: int | None = None):
        """Remove and return the top element (None when none is); with a limit, up to that many in one write."""
        n = 1 if limit is None else check_limit(limit, self.options.max_pop, "pop")
        docs = [decode(raw) for raw in self._take(n)]
        if limit is None:
            return docs[0] if docs else None
        return docs

    def peek(self, limit: int | None = None):
        """The element pop would return, without removing it (None when none is); with a limit, the next N."""
        n = 1 if limit is None else check_limit(limit, self.options.max_peek, "peek")
        docs, fields = self._look(n, limit is None)
        answer = docs if limit is not None else (docs[0] if docs else None)
        return Reply(answer, **fields) if fields else answer

    def list(self, after: int = 0, limit: int = 100) -> list[dict]:
        """Elements in pop order (the heap's storage order), skipping the first ``after``."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise BadValueError(f"list's after is how many elements to skip, an integer ≥ 0; got {after!r}")
        check_limit(limit, self.options.max_peek, "list")
        return self._ordered(after, limit)


class HeapField(HeapVerbs):
    """HeapField is a document's heap store field: the heap's verbs over a keyspace of its
    bucket's LMDB environment, each element under its inverted priority and a sequence
    number (:class:`~hoarddb.stores.keyspace.KeyLog`), so key order is pop order."""

    def __init__(self, space: Keyspace, options):
        self.log, self.options = KeyLog(space), options

    def _add(self, prepared: list[tuple[bytes, bytes]]) -> None:
        self.log.append([data for _, data in prepared], [pkey for pkey, _ in prepared])

    def _take(self, n: int) -> list[bytes]:
        return self.log.take_head(n)

    def _look(self, n: int, one: bool) -> tuple[list, dict]:
        return [decode(p) for p in self.log.read_head(n)], {}

    def _ordered(self, skip: int, limit: int) -> list[dict]:
        return [decode(p) for p in self.log.read_range(skip, limit)]

    def length(self) -> int:
        return len(self.log)


class HeapStore(HeapVerbs, ClaimVerbs, KVStore):
    """HeapStore pops the element with the highest ``priority``; ties leave in push order. Workers may claim and ack."""

    type_name = "heap"
    bucket_options: dict[str, str] = dict(CLAIM_OPTIONS)
    NAMESPACES = KVStore.NAMESPACES + CLAIM

    @classmethod
    def check_kv(cls, txn, declaration, directory, problems) -> None:
        """Every element decodes and sits under its own priority, with a sequence number
        the counter (``b"Mseq"``) has passed; the count is theirs, claimed ones included;
        every claim record is whole and holds an element."""
        super().check_kv(txn, declaration, directory, problems)
        raw = txn.get(SEQ_KEY)
        last = int.from_bytes(raw, "big") if raw else 0
        count = 0
        for key, raw in scan(txn, cls.DOC):
            count += 1
            shown = repr(bytes(key[1:])[:40])
            try:
                pkey, _data = prepare_element(decode(raw), "the element")
            except DECODE_ERRORS as exc:
                problems.append(Problem(cls.KV_FILE, f"the element under key {shown} does not decode ({exc})"))
                continue
            except (BadValueError, NotADocumentError) as exc:
                problems.append(Problem(cls.KV_FILE, f"the element under key {shown}: {exc.message}"))
                continue
            if len(key) < 10 or key[1:-8] != pkey:
                problems.append(Problem(cls.KV_FILE, f"the element under key {shown} is not under its priority"))
            if int.from_bytes(key[-8:], "big") > last:
                problems.append(Problem(cls.KV_FILE, f"the element under key {shown} has a sequence number past the "
                                                     f"counter's ({last})", REBUILD))
        cls.check_count(txn, count, problems)
        for key, raw in scan(txn, CLAIM):
            shown = repr(bytes(key[1:])[:40])
            if len(raw) != HEADER.size:
                problems.append(Problem(cls.KV_FILE, f"the claim record of element {shown} is {len(raw)} bytes, not "
                                                     f"{HEADER.size}"))
            if txn.get(cls.DOC + bytes(key[1:])) is None:
                problems.append(Problem(cls.KV_FILE, f"a claim record names element {shown}, which is not there",
                                        REBUILD))

    @classmethod
    def validate_options(cls, bucket_options: Mapping[str, Any]) -> dict:
        """The bucket options: ``max_deliveries`` with ``dead_letter``, or neither."""
        checked = dict(bucket_options)
        validate_claim_options(checked)
        return checked

    def __init__(self, directory, declaration, options):
        super().__init__(directory, declaration, options)
        bucket_options = self.validate_options((declaration or {}).get("options") or {})
        self._bucket_name = (declaration or {}).get("name") or self.directory.name
        # What is kept in memory (the heap of ready keys, the sequence, the claim table) is
        # guarded by the mutex. Two locks, one order: the store's write lock (KVStore._wlock),
        # then the mutex. A server's write group holds the write lock from its first write to
        # the bucket to its commit, and its verbs take the mutex inside it; a write outside a
        # group therefore takes both in the same order (_writing), or each would wait for the
        # other. Reads take the mutex alone, and never the write lock after it.
        self._mutex = threading.RLock()
        self._writing = self._claim_lock = _Both(self._wlock, self._mutex)
        self._max_deliveries = bucket_options.get("max_deliveries")
        self._load()

    def _load(self) -> None:
        """Read the sequence, the ready elements' keys (the in-memory heap) and the claims."""
        with self.kv.read() as txn:
            raw = txn.get(SEQ_KEY)
            self._seq = int.from_bytes(raw, "big") if raw else 0
            records = load_records(txn)
            claimed = {key for key, _ in records}
            cursor = txn.cursor()
            keys = []
            if cursor.set_range(self.DOC):
                for key in cursor.iternext(values=False):
                    if not key.startswith(self.DOC):
                        break
                    if key[1:] not in claimed:
                        keys.append(key)
        self._heap = keys  # already ascending, so already a valid heap
        self._claims = ClaimTable(self._max_deliveries)
        self._claims.load(records)

    def reload(self) -> None:
        """The count, and also the heap and the claims, read again from the last commit
        (a failed group's pushes, pops and claims ran in memory and were not kept)."""
        with self._writing:
            super().reload()
            self._load()

    # -- where ClaimVerbs finds things ----------------------------------------------------

    def _claims_table(self, create: bool) -> ClaimTable:
        return self._claims

    def _claims_write(self, fn):
        def counted(txn):
            result, removed = fn(txn)
            return result, -removed

        return self._write(counted)

    def _claims_read(self):
        return self.kv.read()

    def _claim_counts(self) -> tuple[int, int]:
        """``(ready again, held)``, as ClaimVerbs counts them, under the mutex alone: a read
        (length and stats hold the mutex already, and must not take the write lock after it)."""
        with self._mutex:
            self._claims.advance(claims.clock())
            return len(self._claims.ready), self._claims.held

    def _element_key(self, key: bytes) -> bytes:
        return self.DOC + key

    def _fresh(self, n: int) -> list[tuple[bytes, None]]:
        """Take the top ``n`` keys off the in-memory heap (``_fresh_failed`` puts them back)."""
        keys = [heapq.heappop(self._heap) for _ in range(min(max(n, 0), len(self._heap)))]
        return [(key[len(self.DOC):], None) for key in keys]

    def _take_fresh(self, txn, fresh) -> None:
        """Nothing more to write: the claim record is the move from ready to claimed."""

    def _took_fresh(self, fresh) -> None:
        """Nothing more to do: ``_fresh`` took them off the heap already."""

    def _fresh_failed(self, fresh) -> None:
        for key, _ in fresh:  # nothing was committed: they are ready again
            heapq.heappush(self._heap, self.DOC + key)

    # -- the heap's storage (HeapVerbs) ----------------------------------------------------

    def _add(self, prepared: list[tuple[bytes, bytes]]) -> None:
        with self._writing:
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

    def _take(self, n: int) -> list[bytes]:
        """Elements whose lease ran out come first (in priority order), then the top of the
        heap; claimed elements are never popped."""
        with self._writing:
            table = self._claims
            table.advance(claims.clock())
            again = table.ready[:n]
            keys = [heapq.heappop(self._heap) for _ in range(min(n - len(again), len(self._heap)))]

            def fn(txn):
                docs = [txn.get(self.DOC + k) for k in again] + [txn.get(key) for key in keys]
                for k in again:
                    txn.delete(CLAIM + k)
                    txn.delete(self.DOC + k)
                for key in keys:
                    txn.delete(key)
                return docs, -(len(again) + len(keys))

            try:
                raws = self._write(fn) if again or keys else []
            except BaseException:
                for key in keys:  # nothing was removed: put them back
                    heapq.heappush(self._heap, key)
                raise
            for k in again:
                table.drop(k)
        return raws

    def _look(self, n: int, one: bool) -> tuple[list, dict]:
        """The next ``n`` ready elements, and ``claimed``: how many elements claims hold."""
        with self._mutex:
            self._claims.advance(claims.clock())
            again = self._claims.ready[:n]
            with self.kv.read() as txn:
                docs = [decode(txn.get(self.DOC + k)) for k in again]
                if len(docs) < n:
                    top = txn.get(self._heap[0]) if self._heap else None
                    if one and (top is not None or not self._heap):
                        docs += [decode(top)] if top is not None else []
                    else:  # (also when the top push is not committed yet: a server's write group)
                        docs += self._ordered_in(txn, 0, n - len(docs))
            held = self._claims.held
        return docs, {"claimed": held}

    def load(self, docs: list) -> dict:
        """Restore elements with their priorities (as batch_push, for a dump's restore): ``{loaded}``."""
        return {"loaded": self.batch_push(docs)}

    def length(self):
        """How many elements are ready, with answer fields ``ready`` and ``claimed`` (held by claims)."""
        with self._mutex:  # the count and the claims of one moment (an ack changes both under it)
            _again, held = self._claim_counts()
            ready = self._count - held
        return Reply(ready, ready=ready, claimed=held)

    def stats(self) -> dict:
        """``{"entries": ready, "claimed": held by claims, "bytes": bytes on disk, "data_bytes": LMDB pages
        its entries fill}``."""
        with self._mutex:
            _again, held = self._claim_counts()
            ready = self._count - held
        return {"entries": ready, "claimed": held, "bytes": directory_bytes(self.directory),
                "data_bytes": kv_data_bytes(self.kv)}

    def _ordered(self, skip: int, limit: int) -> list[dict]:
        with self._mutex, self.kv.read() as txn:
            return self._ordered_in(txn, skip, limit)

    def _ordered_in(self, txn, skip: int, limit: int) -> list[dict]:
        """Up to ``limit`` elements without a claim record, in key order, skipping ``skip``."""
        out = []
        records = self._claims.records
        cursor = txn.cursor()
        if cursor.set_range(self.DOC):
            for key, raw in cursor:
                if not key.startswith(self.DOC):
                    break
                if key[1:] in records:
                    continue
                if skip:
                    skip -= 1
                    continue
                out.append(decode(raw))
                if len(out) >= limit:
                    break
        return out


class _Both:
    """Two locks taken as one, in the order given, and released in reverse (``with``)."""

    __slots__ = ("first", "second")

    def __init__(self, first, second):
        self.first, self.second = first, second

    def __enter__(self) -> None:
        self.first.acquire()
        try:
            self.second.acquire()
        except BaseException:
            self.first.release()
            raise

    def __exit__(self, *exc) -> None:
        self.second.release()
        self.first.release()


def prepare_element(doc: Any, what: str) -> tuple[bytes, bytes]:
    """``(inverted priority key, BSON)`` of a heap element, in a heap bucket or a heap store field.

    The priority is a number of any BSON kind (int, int64, double, decimal); a missing
    priority, any other kind, a boolean or NaN is refused (BAD_VALUE).
    """
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
