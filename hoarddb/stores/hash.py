"""The hash store type: documents by key (``_id_``), with find, update, delete and count by filter.

In the bucket's LMDB environment (see :class:`~hoarddb.stores.base.KVStore`):

    b"D" + encode_key(_id_)  ->  BSON of the whole document, ``_id_`` first

The key is the document's ``_id_`` encoded order-preservingly (hoarddb.values.keys),
so 30, 30.0 and int64(30) are one key, as they are one value. Each write verb is one
LMDB transaction: a batch or a multi-document update is all or nothing.
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping

from bson.regex import Regex

from ..errors import BadValueError, DuplicateKeyError, NotADocumentError
from ..ids import uuid7
from ..values.codec import decode
from ..values.filter import compile_filter
from ..values.keys import encode_key
from ..values.update import apply_update, validate_update
from .base import KVStore, check_limit, encode_document

MAX_KEY_BYTES = 480  # LMDB keys are at most 511 bytes, with room for the namespace


class HashStore(KVStore):
    """HashStore keeps whole documents by their ``_id_``; an insert never overwrites."""

    type_name = "hash"
    verbs = frozenset({"insert", "batch_insert", "put", "get", "find", "count", "update", "delete", "length", "list"})
    bucket_options: dict[str, str] = {}

    # -- keys --------------------------------------------------------------------------

    def _key(self, value: Any) -> bytes:
        if value is None or isinstance(value, (list, tuple, Mapping, Regex)):
            raise BadValueError(
                f"a document key (_id_) must be a string, number, ObjectId, UUID, date or binary; got {value!r:.60}"
            )
        key = self.DOC + encode_key(value)
        if len(key) > MAX_KEY_BYTES:
            raise BadValueError(f"a document key (_id_) is at most {MAX_KEY_BYTES} bytes once encoded; this one is {len(key)}")
        return key

    def _prepare(self, doc: Any, what: str = "document") -> tuple[bytes, Any, bytes]:
        """``(lmdb key, _id_, bson)`` of a document to insert, with a generated UUIDv7 _id_ if absent."""
        if not isinstance(doc, Mapping):
            encode_document(doc, what)  # raises NotADocumentError with the message
        if "_id_" in doc:
            ident = doc["_id_"]
            doc = {"_id_": ident, **{k: v for k, v in doc.items() if k != "_id_"}}
        else:
            ident = uuid7()
            doc = {"_id_": ident, **doc}
        return self._key(ident), ident, encode_document(doc, what)

    def _duplicate(self, ident: Any, where: str = "") -> DuplicateKeyError:
        return DuplicateKeyError(
            f"Duplicate key for bucket {self.declaration['name']!r}: _id_ = {_show(ident)} is already used{where}. "
            "Use put to replace that document, update to change it, or choose another _id_.",
            key=ident,
        )

    # -- writes --------------------------------------------------------------------

    def insert(self, doc: Mapping) -> Any:
        """Insert one document; return its ``_id_``. An ``_id_`` in use is refused (DUPLICATE_KEY)."""
        key, ident, data = self._prepare(doc)

        def fn(txn):
            if not txn.put(key, data, overwrite=False):
                raise self._duplicate(ident)
            self._set_count(txn, self._count + 1)

        self.kv.write(fn)
        self._count += 1
        return ident

    def batch_insert(self, docs: list) -> list:
        """Insert every document in one write, or none of them; return their ``_id_`` values in order."""
        prepared, seen = [], {}
        for i, doc in enumerate(docs):
            key, ident, data = self._prepare(doc, f"document {i} of the batch")
            if key in seen:
                raise self._duplicate(ident, f" by document {seen[key]} of the same batch (position {i}); nothing was written")
            seen[key] = i
            prepared.append((key, ident, data))

        def fn(txn):
            for i, (key, ident, data) in enumerate(prepared):
                if not txn.put(key, data, overwrite=False):
                    raise self._duplicate(ident, f" (document {i} of the batch); nothing was written")
            self._set_count(txn, self._count + len(prepared))

        self.kv.write(fn)
        self._count += len(prepared)
        return [ident for _, ident, _ in prepared]

    def put(self, doc: Mapping) -> Any:
        """Store a whole document under its ``_id_``, replacing the one there; return the ``_id_``."""
        if isinstance(doc, Mapping) and "_id_" not in doc:
            raise BadValueError("put stores a document under its _id_, and this one has none; add _id_, or use insert")
        key, ident, data = self._prepare(doc)

        def fn(txn):
            existed = txn.get(key) is not None
            txn.put(key, data)
            if not existed:
                self._set_count(txn, self._count + 1)
            return existed

        existed = self.kv.write(fn)
        if not existed:
            self._count += 1
        return ident

    def update(self, filter: Mapping, update: Mapping) -> dict:
        """Apply update operators to every matching document in one write: ``{matched, modified}``."""
        validate_update(update)
        matcher = compile_filter(filter)

        def fn(txn):
            matched = modified = 0
            for key, raw in list(self._candidates(txn, filter)):
                doc = decode(raw)
                if not matcher(doc):
                    continue
                matched += 1
                new = apply_update(doc, update)
                data = encode_document(new, f"document {_show(doc.get('_id_'))} after the update")
                if data != raw:
                    txn.put(key, data)
                    modified += 1
            return {"matched": matched, "modified": modified}

        return self.kv.write(fn)

    def delete(self, target: Any) -> dict:
        """Delete the documents matching a filter (or the one with this key): ``{deleted}``."""
        filter = target if isinstance(target, Mapping) else {"_id_": target}
        matcher = compile_filter(filter)

        def fn(txn):
            doomed = [key for key, raw in self._candidates(txn, filter) if matcher(decode(raw))]
            for key in doomed:
                txn.delete(key)
            if doomed:
                self._set_count(txn, self._count - len(doomed))
            return len(doomed)

        deleted = self.kv.write(fn)
        self._count -= deleted
        return {"deleted": deleted}

    # -- reads ---------------------------------------------------------------------------

    def get(self, key: Any) -> dict | None:
        """The document with this ``_id_`` (also given as ``{_id_: key}``), or None."""
        if isinstance(key, Mapping):
            if set(key) != {"_id_"}:
                raise BadValueError("get takes a key, or {_id_: key}; to match other fields use find")
            key = key["_id_"]
        with self.kv.read() as txn:
            raw = txn.get(self._key(key))
        return decode(raw) if raw is not None else None

    def find(self, filter: Mapping | None = None, limit: int | None = None) -> list[dict]:
        """Every document matching the filter, in key order (a full scan unless it pins ``_id_``)."""
        filter = filter or {}
        matcher = compile_filter(filter)
        if limit is not None:
            check_limit(limit, 1 << 62, "find")
        out = []
        with self.kv.read() as txn:
            for _key, raw in self._candidates(txn, filter):
                doc = decode(raw)
                if matcher(doc):
                    out.append(doc)
                    if limit is not None and len(out) >= limit:
                        break
        return out

    def count(self, filter: Mapping | None = None) -> int:
        """How many documents match the filter (all of them, in O(1), for an empty filter)."""
        if not filter:
            return self._count
        matcher = compile_filter(filter)
        with self.kv.read() as txn:
            return sum(1 for _k, raw in self._candidates(txn, filter) if matcher(decode(raw)))

    def list(self, after: Any = None, limit: int = 100) -> list[dict]:
        """Documents in key order, starting after the key ``after``."""
        check_limit(limit, self.options.max_peek, "list")
        out = []
        with self.kv.read() as txn:
            cursor = txn.cursor()
            start = self._key(after) if after is not None else self.DOC
            if not cursor.set_range(start):
                return out
            for key, raw in cursor:
                if not key.startswith(self.DOC):
                    break
                if after is not None and key == start:
                    continue
                out.append(decode(raw))
                if len(out) >= limit:
                    break
        return out

    def _candidates(self, txn, filter: Mapping):
        """``(key, bson)`` pairs that may match: the one document a plain ``_id_`` pins, else all."""
        ident = filter.get("_id_", _MISSING) if isinstance(filter, Mapping) else _MISSING
        if ident is not _MISSING and not (isinstance(ident, Mapping) and any(k.startswith("$") for k in ident)) \
                and not isinstance(ident, (list, Mapping)) and ident is not None:
            key = self._key(ident)
            raw = txn.get(key)
            return [(key, raw)] if raw is not None else []
        return _scan(txn, self.DOC)


_MISSING = object()


def _scan(txn, prefix: bytes):
    cursor = txn.cursor()
    if not cursor.set_range(prefix):
        return
    for key, raw in cursor:
        if not key.startswith(prefix):
            return
        yield key, raw


def _show(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, datetime.datetime):
        return f'ISODate("{value.isoformat()}")'
    return repr(value)
