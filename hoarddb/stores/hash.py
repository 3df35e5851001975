"""The hash store type: documents by key (``_id_``), with find, search, update, delete and count by filter.

In the bucket's LMDB environment (see :class:`~hoarddb.stores.base.KVStore`):

    b"D" + encode_key(_id_)  ->  BSON of the whole document, ``_id_`` first
    b"I" + index id + ...    ->  index entries (hoarddb.indexes.maintenance)

The key is the document's ``_id_`` encoded order-preservingly (hoarddb.values.keys),
so 30, 30.0 and int64(30) are one key, as they are one value. Each write verb is one
LMDB transaction covering the documents and their index entries: a batch, or a
multi-document update, is all or nothing, and a crash leaves all of it or none.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from bson.decimal128 import Decimal128
from bson.regex import Regex

from ..errors import BadValueError
from ..errors import DuplicateKeyError, HoardError, LimitExceededError, TooManyElementsError
from ..ids import uuid7
from ..indexes.declaration import format_for
from ..indexes.maintenance import LMDB_MAX_KEY, PREFIX, IndexSet
from ..indexes.planner import FULL_SCAN, Shapes, not_ready, plan
from ..indexes import timerange
from bson.raw_bson import RawBSONDocument

from ..values.codec import DECODE_ERRORS, decode, raw_get, raw_with
from ..values.filter import compile_filter
from ..values.keys import decode_key, encode_key, key_end
from ..values.literal import literal
from ..values.paths import MISSING, resolve, split_path
from ..values.pipeline import Limits, compile_pipeline
from ..values.projection import compile_projection
from ..values.sort import compile_sort
from ..values.update import compile_update, upsert_document
from . import resumable
from .base import REBUILD, KVStore, Problem, Reply, answer_too_large, check_limit, encode_document
from .fields import NAMESPACES as FIELD_NAMESPACES
from .fields import FieldStores, check_fields

log = logging.getLogger("hoarddb.indexes")
MAX_KEY_BYTES = 480  # LMDB keys are at most 511 bytes, with room for the namespace
SWEEP_BATCH = 2000
#: Documents an index rebuild reads and indexes per write transaction (see build_indexes).
BUILD_BATCH = 1000
_DATE_TAG = encode_key(datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc))[:1]
#: Where a TTL index's expiring numbers begin: -inf (NaN sorts first among numbers, and never expires).
_NUMBER_FROM = encode_key(float("-inf"))


class HashStore(KVStore):
    """HashStore keeps whole documents by their ``_id_``; an insert never overwrites."""

    type_name = "hash"
    bucket_options: dict[str, str] = {
        "timestamps": "true: hoardDB keeps $createdAt and $updatedAt in each document (readable, never written by a client)",
        "immutable": "fields a write cannot change once a document holds them, such as [\"PublishedAt\"]",
    }
    NAMESPACES = KVStore.NAMESPACES + PREFIX + FIELD_NAMESPACES

    @classmethod
    def check_kv(cls, txn, declaration, directory, problems) -> None:
        """Every document decodes and sits under its own ``_id_``; the count is theirs; every
        entry of each ready or conflicted index (unique, compound, TTL; a conflicted one's
        claims too) points to a document that holds its values, and every document has all
        of its entries, no two holding one unique value; each time-range index's keys in its
        live windows are those its documents make (entries, counts, rankings); the store fields check
        (:func:`~hoarddb.stores.fields.check_fields`). An index being built, or declared by a
        newer hoardDB, is not checked: the next open writes it again, or this one cannot read it."""
        super().check_kv(txn, declaration, directory, problems)
        indexes = IndexSet(declaration.get("indexes") or [], declaration.get("name", ""))
        checked = [ix for ix in indexes.indexes if ix.state in ("ready", "conflicted")]
        count = _check_documents(txn, indexes, checked, problems)
        cls.check_count(txn, count, problems)
        _check_entries(txn, indexes, checked, problems)
        if indexes.timeranges:
            now = timerange.now_ms()
            for tr in indexes.timeranges:
                if tr.state == "ready":
                    docs = _decoded(txn, cls.DOC)
                    for what in tr.check(txn, docs, now, indexes.bucket):
                        problems.append(Problem(HashStore.KV_FILE, what, REBUILD))
        check_fields(txn, declaration, directory, lambda dk: txn.get(cls.DOC + dk) is not None, problems)

    def __init__(self, directory, declaration, options):
        super().__init__(directory, declaration, options)
        self.name = declaration["name"]
        self.indexes = IndexSet(declaration.get("indexes") or [], self.name)
        self.shapes = Shapes(self.indexes.indexes)
        self.fields = FieldStores(self, declaration, options)
        bucket_options = declaration.get("options") or {}
        #: Whether the bucket keeps $createdAt and $updatedAt (hoarddb.indexes.timerange), and
        #: the fields it declares immutable: a write then takes the slower path (_kept).
        self.timestamps: bool = bool(bucket_options.get("timestamps"))
        self.immutable: list = list(bucket_options.get("immutable") or [])
        self.keeps: bool = self.timestamps or bool(self.immutable)

    @classmethod
    def validate_options(cls, bucket_options):
        return timerange.check_options(bucket_options)

    # -- store fields ------------------------------------------------------------------

    def doc_key(self, key: Any) -> bytes:
        """The encoded key a document's store fields hang from."""
        return self._doc_key(key)

    def document_exists(self, txn, dk: bytes) -> bool:
        return txn.get(self.DOC + dk) is not None

    def _remove(self, txn, key: bytes, doc: dict, unlink: list) -> None:
        """Delete one document, its index entries and its store fields (refused if they are too many)."""
        dk = key[len(self.DOC):]
        if self.fields:
            self.fields.check_cascade(txn, dk, doc.get("_id_"))
            unlink.extend(self.fields.delete_all(txn, dk))
        self.indexes.apply(txn, dk, doc, None)
        txn.delete(key)

    # -- keys --------------------------------------------------------------------------

    def _doc_key(self, value: Any) -> bytes:
        """The encoded ``_id_`` (without the namespace byte)."""
        if type(value) is str and len(value) < 400:
            return encode_key(value)
        if value is None or isinstance(value, (list, tuple, Mapping, Regex)):
            raise BadValueError(
                f"a document key (_id_) must be a string, number, ObjectId, UUID, date or binary; got {value!r:.60}"
            )
        key = encode_key(value)
        if len(key) + 1 > MAX_KEY_BYTES:
            raise BadValueError(f"a document key (_id_) is at most {MAX_KEY_BYTES} bytes once encoded; this one is {len(key)}")
        return key

    def _prepare(self, doc: Any, position: int | None = None, need_id: bool = False) -> tuple[bytes, Any, Any, bytes]:
        """``(encoded _id_, _id_, document, bson)``, with a generated UUIDv7 ``_id_`` if absent.

        ``need_id`` (put) refuses a document without an ``_id_`` instead. A
        ``RawBSONDocument`` (what a loader reads from a file) is stored as its bytes,
        without decoding or encoding it again; an ``_id_`` it lacks is added in front.
        """
        try:
            if type(doc) is RawBSONDocument:
                raw = doc.raw
                ident = raw_get(raw, "_id_", _MISSING)
                if ident is _MISSING and need_id:
                    raise BadValueError(_NO_ID)
                if ident is _MISSING:
                    ident = uuid7()
                    raw = raw_with(raw, "_id_", ident)
                    doc = RawBSONDocument(raw, doc.codec_options)
                return self._doc_key(ident), ident, doc, encode_document(doc)
            if type(doc) is not dict and not isinstance(doc, Mapping):
                encode_document(doc)  # raises NotADocumentError with the message
            if need_id and "_id_" not in doc:
                raise BadValueError(_NO_ID)
            if "_id_" in doc:
                ident = doc["_id_"]
                if type(doc) is not dict or next(iter(doc)) != "_id_":
                    doc = {"_id_": ident, **{k: v for k, v in doc.items() if k != "_id_"}}
            else:
                ident = uuid7()
                doc = {"_id_": ident, **doc}
            # (a short string, the common key, encoded here: _doc_key's first case)
            dk = encode_key(ident) if type(ident) is str and len(ident) < 400 else self._doc_key(ident)
            return dk, ident, doc, encode_document(doc)
        except HoardError as exc:
            if position is None:
                raise
            raise type(exc)(f"document at position {position} of the batch: {exc.message}", **exc.details) from None

    def _duplicate(self, ident: Any, where: str = "") -> DuplicateKeyError:
        return DuplicateKeyError(
            f"Duplicate key for bucket {self.name!r}: _id_ = {literal(ident)} is already used{where}. "
            "Use put to replace that document, update to change it, or choose another _id_.",
            key=ident,
        )

    # -- writes --------------------------------------------------------------------

    def insert(self, doc: Mapping) -> Any:
        """Insert one document; return its ``_id_``. An ``_id_`` or unique value in use is refused (DUPLICATE_KEY)."""
        self.indexes.check_writable()
        dk, ident, doc, data = self._prepare_kept(doc)
        self._write(lambda txn: (None, self._write_one(txn, dk, ident, doc, data, False)))
        return ident

    def batch_insert(self, docs: list) -> list:
        """Insert every document in one write, or none of them; return their ``_id_`` values in order."""
        return self._write_many(docs, replace=False)

    def put(self, doc: Mapping) -> Any:
        """Store a whole document under its ``_id_``, replacing the one there; return the ``_id_``."""
        self.indexes.check_writable()
        dk, ident, doc, data = self._prepare_kept(doc, need_id=True)
        self._write(lambda txn: (None, self._write_one(txn, dk, ident, doc, data, True)))
        return ident

    def batch_put(self, docs: list) -> list:
        """put for many documents in one write, all or none (unique indexes are checked); their ``_id_`` values."""
        return self._write_many(docs, replace=True)

    def _write_many(self, docs: list, replace: bool) -> list:
        """batch_insert (``replace`` False) or batch_put: every document in one write."""
        self.indexes.check_writable()
        prepared = [self._prepare_kept(doc, i, need_id=replace) for i, doc in enumerate(docs)]

        def fn(txn):
            added = 0
            for i, (dk, ident, doc, data) in enumerate(prepared):
                try:
                    added += self._write_one(txn, dk, ident, doc, data, replace)
                except DuplicateKeyError as exc:  # name the batch document only when refusing
                    where = f" (batch document {literal(ident)} at position {i}; nothing of the batch was written)"
                    message = exc.message.replace(" is already used.", f" is already used{where}.", 1) \
                        if " is already used." in exc.message else exc.message + where
                    raise DuplicateKeyError(message, **exc.details) from None
            return None, added

        self._write(fn)
        return [ident for _, ident, _, _ in prepared]

    def _write_one(self, txn, dk: bytes, ident: Any, doc: Any, data: bytes, replace: bool) -> int:
        """Write one prepared document (:meth:`_prepare`) and its index entries in ``txn``: an
        insert (``replace`` False) refuses an ``_id_`` in use, a put replaces that document.
        1 if the document is new, else 0."""
        key = self.DOC + dk
        if self.keeps:
            doc, data = self._kept(txn, key, ident, doc, data, replace)
        indexed = self.indexes.writes
        if not replace:
            if not txn.put(key, data, overwrite=False):
                raise self._duplicate(ident)
            if indexed:
                self.indexes.apply(txn, dk, None, doc)
            return 1
        raw = txn.get(key) if indexed else None
        if indexed:
            self.indexes.apply(txn, dk, decode(raw) if raw is not None else None, doc)
        existed = raw is not None if indexed else not txn.put(key, data, overwrite=False)
        if indexed or existed:
            txn.put(key, data)
        return 0 if existed else 1

    def _kept(self, txn, key: bytes, ident: Any, doc: Any, data: bytes, replace: bool) -> tuple[Any, bytes]:
        """A document about to be written, with its timestamps kept (timestamps: true) and its
        immutable fields checked against the document it replaces."""
        raw = txn.get(key) if replace else None
        old = decode(raw) if raw is not None else None
        if self.immutable:
            timerange.check_immutable(self.immutable, old, doc, ident)
        if not self.timestamps:
            return doc, data
        now = timerange.now_date()
        created = updated = now
        if old is not None:
            clean, kept = timerange.without_kept(old)
            created = kept.get(timerange.CREATED, now)
            if encode_document(clean) == data:  # the same document again: not a change
                updated = kept.get(timerange.UPDATED, now)
        return timerange.stamped(doc, data, created, updated)

    def _prepare_kept(self, doc: Any, position: int | None = None, need_id: bool = False):
        """:meth:`_prepare`, refusing a document that carries the timestamps hoardDB keeps."""
        if self.timestamps and isinstance(doc, Mapping):
            try:
                timerange.refuse_kept(doc)
            except HoardError as exc:
                if position is None:
                    raise
                raise type(exc)(f"document at position {position} of the batch: {exc.message}") from None
        return self._prepare(doc, position, need_id)

    def load(self, docs: list) -> dict:
        """Restore documents as a dump holds them: each is put (replacing one with its ``_id_``).

        Unlike insert, a value a unique index already has does not refuse the load: the
        document is written, the index keeps the first holder and becomes ``conflicted``
        (naming both), as indexes.md says of a restore. ``{loaded, conflicts}``.
        """
        self.indexes.check_writable()
        if self.timestamps:  # a dump's documents carry their timestamps: kept as they are
            split = [timerange.without_kept(doc) if isinstance(doc, Mapping) else (doc, {}) for doc in docs]
            docs = [clean for clean, _times in split]
            kept = [times for _clean, times in split]
        prepared = [self._prepare(doc, i) for i, doc in enumerate(docs)]
        if self.timestamps:
            now = timerange.now_date()
            prepared = [(dk, ident, *timerange.stamped(doc, data, times.get(timerange.CREATED, now),
                                                       times.get(timerange.UPDATED, now)))
                        for (dk, ident, doc, data), times in zip(prepared, kept)]
        conflicts: dict = {}

        def fn(txn):
            added = 0
            for dk, _ident, doc, data in prepared:
                raw = txn.get(self.DOC + dk)
                old = decode(raw) if raw is not None else None
                self.indexes.apply(txn, dk, old, doc, conflicts=conflicts)
                txn.put(self.DOC + dk, data)
                added += old is None
            return None, added

        self._write(fn)
        for ix in self.indexes.indexes:
            if ix.name in conflicts and ix.state == "ready":
                ix.state = "conflicted"
                ix.decl = dict(ix.decl, state="conflicted", conflict=conflicts[ix.name])
                log.error("bucket %s: unique index %s is conflicted after a load: %s",
                          self.name, ix.name, conflicts[ix.name])
        return {"loaded": len(prepared), "conflicts": [{"index": k, **v} for k, v in conflicts.items()]}

    def update(self, filter: Mapping, update: Mapping, upsert: bool = False, multi: bool = True,
               arrayFilters: list | None = None) -> dict:  # noqa: N803 - MongoDB's name
        """Apply update operators to the matching documents, in key order, in one write: ``{matched, modified}``.

        ``multi`` (true unless given): every matching document; ``multi: false``: only the
        first in key order. ``upsert``: when nothing matches, insert the document the
        filter's equality fields and the update make (``$setOnInsert`` applies then only),
        answering ``{matched: 0, modified: 0, upserted: <its _id_>}``. ``arrayFilters``:
        the filters of ``$[<identifier>]`` paths; ``a.$`` is the element the filter matched.

        Each document's index entries move before the next document is updated, so a
        multi-update that moves one document off a unique value and then another onto
        it is accepted; the other order is refused, and nothing is written. An upsert or a
        positional update that would give a unique index a value in use is refused
        (DUPLICATE_KEY), and nothing is written.
        """
        compiled, matcher = check_update(filter, update, upsert, multi, arrayFilters)
        self.indexes.check_writable()

        def fn(txn):
            matched = modified = 0
            found = ((key, raw, decode(raw)) for key, raw in self._candidates(txn, filter))
            targets = list(itertools.islice(((k, r, d) for k, r, d in found if matcher(d)), None if multi else 1))
            for key, raw, doc in targets:
                matched += 1
                if self._rewrite(txn, key, raw, doc, compiled.apply(doc, query=filter)):
                    modified += 1
            if matched == 0 and upsert:
                ident = self._upsert(txn, filter, compiled)
                return {"matched": 0, "modified": 0, "upserted": ident}, 1
            return {"matched": matched, "modified": modified}, 0

        return self._write(fn)

    def _rewrite(self, txn, key: bytes, raw, doc: dict, new: dict) -> bool:
        """Write ``new`` over ``doc`` (under ``key``, stored as ``raw``) with its index entries; whether it changed."""
        if self.keeps:
            return self._rewrite_kept(txn, key, raw, doc, new)
        data = encode_document(new, f"document {literal(doc.get('_id_'))} after the update")
        if data == raw:
            return False
        self.indexes.apply(txn, key[1:], doc, new)
        txn.put(key, data)
        return True

    def _rewrite_kept(self, txn, key: bytes, raw, doc: dict, new: dict) -> bool:
        """:meth:`_rewrite` on a bucket that keeps timestamps or immutable fields: an update
        that changes nothing keeps ``$updatedAt``; one that does sets it to now."""
        ident = doc.get("_id_")
        if self.immutable:
            timerange.check_immutable(self.immutable, doc, new, ident)
        what = f"document {literal(ident)} after the update"
        if not self.timestamps:
            data = encode_document(new, what)
            if data == raw:
                return False
        else:
            new, _ = timerange.without_kept(new)
            data = encode_document(new, what)
            if data == encode_document(timerange.without_kept(doc)[0], what):
                return False
            now = timerange.now_date()
            new, data = timerange.stamped(new, data, doc.get(timerange.CREATED, now), now)
        self.indexes.apply(txn, key[1:], doc, new)
        txn.put(key, data)
        return True

    def _upsert(self, txn, filter: Mapping, compiled) -> Any:
        """Insert what an upsert makes of ``filter`` and the update; its ``_id_`` (DUPLICATE_KEY as insert)."""
        dk, ident, doc, data = self._prepare(upsert_document(filter, compiled))
        self._write_one(txn, dk, ident, doc, data, False)
        return ident

    def find_and_modify(self, filter: Mapping | None = None, update: Mapping | None = None, remove: bool = False,
                        new: bool = False, upsert: bool = False, sort: Any = None, projection: Any = None,
                        arrayFilters: list | None = None) -> Any:  # noqa: N803 - MongoDB's name
        """Update or remove one document and return it, in one atomic read-modify-write.

        The document is the first match in key order, or in ``sort``'s order. With
        ``update``, it returns the document as it was (or as it became, with ``new: true``);
        with ``upsert: true`` and no match, it inserts as update's upsert does and returns
        None (or the new document, with ``new``). With ``remove: true``, it deletes the
        document and returns it. None when nothing matched. ``projection`` shapes the
        document returned. Counters and job claims are built on it: no other write comes
        between the read and the write.
        """
        filter = filter or {}
        compiled, matcher, order, shape = check_find_and_modify(filter, update, remove, new, upsert, sort, projection,
                                                                arrayFilters)
        self.indexes.check_writable()
        unlink: list = []

        def fn(txn):
            unlink.clear()
            found = ((key, raw, decode(raw)) for key, raw in self._candidates(txn, filter))
            found = ((key, raw, doc) for key, raw, doc in found if matcher(doc))
            if order is None:
                target = next(found, None)
            else:
                target = min(found, key=lambda t: order(t[2]), default=None)
            if target is None:
                if compiled is not None and upsert:
                    ident = self._upsert(txn, filter, compiled)
                    return (self._get_in(txn, ident) if new else None), 1
                return None, 0
            key, raw, doc = target
            if compiled is None:
                self._remove(txn, key, doc, unlink)
                return doc, -1
            changed = compiled.apply(doc, query=filter)
            self._rewrite(txn, key, raw, doc, changed)
            if new and self.timestamps:  # as stored, with the timestamps kept
                return decode(txn.get(key)), 0
            return (decode(encode_document(changed)) if new else doc), 0

        result = self._write(fn)
        self.fields.unlink(unlink)
        if result is not None and shape is not None:
            result = shape(result)
        return result

    def _get_in(self, txn, ident: Any) -> dict | None:
        raw = txn.get(self.DOC + self._doc_key(ident))
        return decode(raw) if raw is not None else None

    def delete(self, target: Any) -> dict:
        """Delete the documents matching a filter (or the one with this key): ``{deleted}``."""
        filter = target if isinstance(target, Mapping) else {"_id_": target}
        matcher = compile_filter(filter)
        self.indexes.check_writable()

        unlink: list = []

        def fn(txn):
            unlink.clear()
            doomed = []
            for key, raw in list(self._candidates(txn, filter)):
                doc = decode(raw)
                if matcher(doc):
                    doomed.append((key, doc))
            for key, doc in doomed:
                self._remove(txn, key, doc, unlink)
            return len(doomed), -len(doomed)

        deleted = self._write(fn)
        self.fields.unlink(unlink)
        return {"deleted": deleted}

    # -- reads ---------------------------------------------------------------------------

    def get(self, key: Any) -> dict | None:
        """The document with this ``_id_`` (also given as ``{_id_: key}``), or None."""
        if type(key) is not str and isinstance(key, Mapping):
            if set(key) != {"_id_"}:
                raise BadValueError("get takes a key, or {_id_: key}; to match other fields use find")
            key = key["_id_"]
        with self.kv.read() as txn:
            raw = txn.get(self.DOC + self._doc_key(key))
        if raw is None:
            return None
        if self.fields.fields:
            return Reply(decode(raw), store_fields=self.fields.sizes(key))
        return decode(raw)

    def exists(self, key: Any) -> bool:
        """Whether a document with this ``_id_`` (also given as ``{_id_: key}``) exists; nothing is decoded."""
        if type(key) is not str and isinstance(key, Mapping):
            if set(key) != {"_id_"}:
                raise BadValueError("exists takes a key, or {_id_: key}; to match other fields use count")
            key = key["_id_"]
        with self.kv.read() as txn:
            return txn.get(self.DOC + self._doc_key(key)) is not None

    def find(self, filter: Mapping | None = None, limit: int | None = None, sort: Any = None, skip: int = 0,
             projection: Mapping | None = None, stream: bool = False) -> Reply:
        """The documents matching the filter, in key order (or ``sort``'s); a full scan unless the filter pins ``_id_``.

        ``sort`` orders by several keys in MongoDB's order of types (``{Date: -1}``);
        ``skip`` passes over that many matches first, ``limit`` returns at most that many,
        ``projection`` keeps (``{name: 1}``) or drops (``{notes: 0}``) fields, ``_id_``
        kept unless excluded. A sort holds the matches in memory (only ``skip + limit``
        of them with a limit), refused past ``stage_memory_bytes``. With ``stream``, the
        result is an iterator that reads as it goes (a cursor's; see stores/resumable.py).
        """
        filter = filter or {}
        reading = self._reading(filter, limit, sort, skip, projection, "find")
        if stream:
            return Reply(reading.stream(raw for _key, raw in self._candidates(None, filter)), index_used=FULL_SCAN)
        with self.kv.read() as txn:
            out = reading.collect(raw for _key, raw in self._candidates(txn, filter))
        return Reply(out, index_used=FULL_SCAN)

    def _reading(self, filter, limit, sort, skip, projection, verb: str) -> "_Reading":
        if limit is not None:
            check_limit(limit, 1 << 62, verb)
        if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
            raise BadValueError(f"{verb} skip must be a whole number >= 0, got {skip!r:.40}")
        return _Reading(compile_filter(filter), limit, sort, skip, projection, self.options, verb)

    def matches_at_most(self, filter: Any, n: int) -> bool:
        """Whether ``search(filter)`` reads at most ``n`` documents, known cheaply: a flat
        equality filter on a ready index with at most ``n`` entries under its values
        (counted on keys alone). False when it cannot tell."""
        shape = self.shapes.of(filter)
        if shape is None or shape.index is None or shape.index.state != "ready":
            return False
        if shape.whole:
            return True
        enc = shape.index.encoders
        prefix = shape.index.prefix + b"".join([enc[i](filter[f]) for i, f in enumerate(shape.fields)])
        with self.kv.read() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(prefix):
                return True
            for seen, key in enumerate(cursor.iternext(values=False)):
                if not key.startswith(prefix):
                    return True
                if seen >= n:
                    return False
        return True

    def search(self, filter: Mapping | None = None, limit: int | None = None, explain: Any = False, sort: Any = None,
               skip: int = 0, projection: Mapping | None = None, stream: bool = False) -> Reply:
        """Like find, through the index that fits the filter best (see hoarddb.indexes.planner).

        The result is the documents find returns, in the same (key) order; the answer
        names the index in ``index_used`` and, with ``explain: true``, says which indexes
        were considered, why each lost, and how many keys and documents were examined.
        """
        filter = filter or {}
        stream = stream and not explain  # (an explain answers whole: it counts what it read)
        if sort is not None or skip or projection is not None:
            return self._search(filter, limit, explain, sort, skip, projection, stream)
        shape = self.shapes.of(filter)
        if shape is None or shape.index is None:
            return self._search(filter, limit, explain, stream=stream)
        # A flat filter of plain values on an index: planned once for its field names
        # (planner.Shapes); its values make the key prefix, and an exact shape's entries
        # prove the match (no second check of the document).
        ix = shape.index
        if len(shape.fields) == 1:
            prefix = ix.prefix + ix.encoders[0](filter[shape.fields[0]])
        else:
            prefix = ix.prefix + b"".join([ix.encoders[i](filter[f]) for i, f in enumerate(shape.fields)])
        matcher = None if shape.exact else compile_filter(filter)
        if limit is not None:
            check_limit(limit, 1 << 62, "search")
        if explain is not False and explain is not True:
            raise BadValueError(f"search's explain is true or false, got {explain!r}")
        if ix.state != "ready":
            raise not_ready(ix)
        if stream:  # a cursor's: the entries read now, the documents in chunks as it goes
            docs = (decode(raw) for raw in resumable.fetch(self.kv, self.DOC, self._shape_keys(shape, prefix)))
            if matcher is not None:
                docs = (doc for doc in docs if matcher(doc))
            return Reply(itertools.islice(docs, limit) if limit is not None else docs, index_used=ix.name)
        out: list = []
        if shape.whole:  # unique, every field given: one entry at most, read by its key
            txn = self.kv.read()
            try:
                dk = txn.get(prefix)
                raw = txn.get(self.DOC + dk) if dk is not None else None
            finally:
                txn.abort()
            keys_examined = 0 if dk is None else 1
            docs_examined = 0
            if raw is not None:
                docs_examined = 1
                doc = decode(raw)
                if matcher is None or matcher(doc):
                    out.append(doc)
        else:
            keys_examined = 0
            with self.kv.read() as txn:
                cursor = txn.cursor()
                if shape.in_order:  # entries after the prefix are the document keys, in key order
                    n = len(prefix)
                    doc_keys = []
                    if cursor.set_range(prefix):
                        for key in cursor.iternext(values=False):
                            if not key.startswith(prefix):
                                break
                            doc_keys.append(key[n:])
                    keys_examined = len(doc_keys)
                else:
                    found = set()
                    if cursor.set_range(prefix):
                        for key, value in cursor:
                            if not key.startswith(prefix):
                                break
                            keys_examined += 1
                            found.add(ix.doc_key_of(key, value))
                    doc_keys = sorted(found)  # in key order, as find answers
                doc_ns = self.DOC
                raws = (raw for raw in (txn.get(doc_ns + dk) for dk in doc_keys) if raw is not None)
                docs_examined = _matching(raws, matcher, limit, out, self.options.max_answer_bytes, "search")
        if explain:
            return Reply(out, index_used=ix.name, explain={
                "index_used": ix.name, "considered": shape.explained(), "served": shape.served(),
                "keys_examined": keys_examined, "docs_examined": docs_examined, "returned": len(out),
            })
        return Reply(out, index_used=ix.name)

    def _shape_keys(self, shape, prefix: bytes) -> list:
        """The document keys of the index entries under ``prefix`` (search's flat-filter path), in
        key order, read in one transaction (a cursor's: the documents are fetched as it goes)."""
        ix = shape.index
        with self.kv.read() as txn:
            if shape.whole:
                dk = txn.get(prefix)
                return [] if dk is None else [dk]
            cursor = txn.cursor()
            if not cursor.set_range(prefix):
                return []
            if shape.in_order:
                n = len(prefix)
                keys = []
                for key in cursor.iternext(values=False):
                    if not key.startswith(prefix):
                        break
                    keys.append(key[n:])
                return keys
            found = set()
            for key, value in cursor:
                if not key.startswith(prefix):
                    break
                found.add(ix.doc_key_of(key, value))
            return sorted(found)

    def _search(self, filter: Mapping, limit: int | None, explain: Any, sort: Any = None, skip: int = 0,
                projection: Mapping | None = None, stream: bool = False) -> Reply:
        """search for any filter: compiled and planned for this call, every document checked."""
        reading = self._reading(filter, limit, sort, skip, projection, "search")
        if not isinstance(explain, bool):
            raise BadValueError(f"search's explain is true or false, got {explain!r}")
        p = plan(filter, self.indexes.indexes, sort)
        if stream:  # a cursor's: the index's entries are read now, the documents as the cursor goes
            return self._streamed(filter, sort, p, reading)
        with self.kv.read() as txn:
            if p.ordered(txn):
                counted = {"keys": 0, "docs": 0}
                ties = reading.order if p.order.ties else None
                out = reading.collect_sorted(self._in_order(txn, p, reading.matcher, ties, counted))
                reading.examined = counted["docs"]
            else:
                raws, counted = self._planned(txn, filter, p)
                out = reading.collect(raws)
        extras = {"index_used": p.index_used}
        if explain:
            extras["explain"] = {
                "index_used": p.index_used, "considered": p.considered, "served": p.served(),
                "keys_examined": counted["keys"], "docs_examined": reading.examined, "returned": len(out),
            }
            if sort is not None:
                extras["explain"]["sort"] = "index" if p.order is not None else "memory"
                if p.order is None:
                    extras["explain"]["sort_in_memory"] = p.unsorted
        return Reply(out, **extras)

    def _in_order(self, txn, p, matcher, ties, counted: dict):
        """The documents ``matcher`` matches, in the order of the sort ``p`` serves, read in
        the order of its index (planner.Plan.walk): lazily, so a limit stops the read. The rest
        of the sort, if any, is ``ties`` (a pipeline sorting in memory, within its limits), run
        over each run of documents equal on the sort's first key as it is read. Counts index
        entries and documents read in ``counted["keys"]`` and ``counted["docs"]``."""
        matched = self._matched_in_order(txn, p, matcher, counted)
        if ties is None:
            return (doc for doc in matched if doc is not _RUN)
        return _sorted_runs(matched, ties)

    def _streamed(self, filter: Mapping, sort: Any, p, reading: "_Reading") -> Reply:
        """search's answer for a cursor: the plan's index entries read now in one transaction (in
        the sort's order when the index serves it), the documents fetched in chunks as it goes."""
        walked = self._walked(p) if sort is not None else None
        if walked is None:
            if sort is not None:  # sorted in memory: through the filter's own best index
                p = plan(filter, self.indexes.indexes)
            return Reply(reading.stream(self._planned(None, filter, p)[0]), index_used=p.index_used)
        docs = self._fetched_in_order(walked, p.sorted_field, reading.matcher, reading.order if p.order.ties else None)
        return Reply(reading.stream_sorted(docs), index_used=p.index_used)

    def _walked(self, p) -> list | None:
        """The plan's ``(first of its run, document key)`` in its sort's order, read whole in one
        transaction (a cursor's), or None when the index order is not the sort's."""
        with self.kv.read() as txn:
            return list(p.walk(txn, {"keys": 0, "docs": 0})) if p.ordered(txn) else None

    def _fetched_in_order(self, walked: list, field: str, matcher, ties):
        """_in_order for a cursor: the documents of ``walked`` (_walked) that ``matcher`` matches,
        read in chunks as they are asked for, each run put through ``ties`` when given."""
        def matched():  # _matched_in_order's, the documents read in chunks
            multikey: set = set()
            for first, dk, raw in resumable.fetch_walked(self.kv, self.DOC, walked):
                if first:
                    yield _RUN
                if dk in multikey or raw is None:
                    continue
                doc = decode(raw)
                if isinstance(doc.get(field), (list, tuple)):
                    multikey.add(dk)
                if matcher(doc):
                    yield doc
        return _sorted_runs(matched(), ties) if ties is not None else (d for d in matched() if d is not _RUN)

    def _matched_in_order(self, txn, p, matcher, counted: dict):
        """The documents ``matcher`` matches in ``p``'s index order, and ``_RUN`` where a run begins."""
        doc_ns = self.DOC
        field = p.sorted_field
        multikey: set = set()  # documents read whose sorted field holds an array: an entry per element
        for first, dk in p.walk(txn, counted):
            if first:
                yield _RUN
            if dk in multikey:  # met again at a later element: it sorted at the first
                continue
            raw = txn.get(doc_ns + dk)
            if raw is None:
                continue
            counted["docs"] += 1
            doc = decode(raw)
            if isinstance(doc.get(field), (list, tuple)):
                multikey.add(dk)
            if matcher(doc):
                yield doc

    def _planned(self, txn, filter: Mapping, p) -> tuple:
        """``(raw documents that may match, {keys: index entries read})`` as plan ``p`` reads them, in key order."""
        counted = {"keys": 0}
        if p.index is None:
            return (raw for _key, raw in self._candidates(txn, filter)), counted
        # the key ranges of the plan: its equality prefixes (several when the filter pins arrays,
        # planner.lookups), or a range of the next field within them
        if txn is None:  # a cursor's: the entries in one read, the documents in chunks as it goes
            with self.kv.read() as entries:
                doc_keys, counted["keys"] = p.read(entries)
            return resumable.fetch(self.kv, self.DOC, sorted(doc_keys)), counted
        doc_keys, counted["keys"] = p.read(txn)
        # in key order, as find answers
        return (raw for raw in (txn.get(self.DOC + dk) for dk in sorted(doc_keys)) if raw is not None), counted

    def window(self, index: str, newest: Any = None, oldest: Any = None, byStart: Any = None,  # noqa: N803
               top: int | None = None, counts: Any = None) -> dict:
        """One window of a time-range index, read from its counts without reading a document:
        ``{index, start, end, count}``, with ``field`` and ``top`` (the ``top`` values of the
        field after the timestamp with the most documents) or ``counts`` (every value's) when
        asked. The window is ``newest``, ``oldest`` (the oldest still open) or ``byStart``
        (hoarddb.indexes.timerange)."""
        found = next((tr for tr in self.indexes.timeranges if tr.name == index), None)
        if found is None:
            names = [tr.name for tr in self.indexes.timeranges]
            if any(ix.name == index for ix in self.indexes.indexes):
                raise BadValueError(f"index {index!r} of bucket {self.name!r} is not a time-range index; "
                                    f"window reads {', '.join(map(repr, names)) if names else 'none here'}")
            raise BadValueError(f"bucket {self.name!r} has no time-range index {index!r}; it has "
                                f"{', '.join(map(repr, names)) if names else 'none'}")
        if found.state != "ready":
            raise BadValueError(
                f"index {index!r} was declared by a newer version of hoardDB and cannot be read here")
        if counts not in (None, True, False):
            raise BadValueError(f"counts is true (every value's count) or false, got {counts!r}")
        start = found.select(timerange.now_ms(), newest, oldest, byStart)
        with self.kv.read() as txn:
            return found.read(txn, start, top, bool(counts))

    def distinct(self, field: str, filter: Mapping | None = None) -> list:
        """The distinct values of ``field`` (a dotted path) in the documents matching ``filter``, in
        MongoDB's order of values. An array contributes its elements (and an array inside it
        as a value); a document without the field contributes nothing."""
        parts = split_path(field, what="distinct field")
        matcher = compile_filter(filter or {})
        seen: dict = {}
        room = self.options.max_answer_bytes
        taken = 0
        with self.kv.read() as txn:
            for _key, raw in self._candidates(txn, filter or {}):
                doc = decode(raw)
                if not matcher(doc):
                    continue
                for value in resolve(doc, parts):
                    if value is MISSING or isinstance(value, (list, tuple)) and _is_leaf_array(doc, parts, value):
                        continue
                    k = encode_key(value)
                    if k not in seen:
                        seen[k] = value
                        taken += len(k)
                        if room is not None and taken > room:
                            raise answer_too_large(taken, room, "distinct")
        return [seen[k] for k in sorted(seen)]

    def documents(self, max_bytes: int | None = None) -> list:
        """Every document, in key order, read in one read transaction (what a ``$lookup`` from
        another bucket joins against); LIMIT_EXCEEDED past ``max_bytes`` of BSON."""
        out = []
        taken = 0
        with self.kv.read() as txn:
            for _key, raw in _scan(txn, self.DOC):
                taken += len(raw)
                if max_bytes is not None and taken > max_bytes:
                    raise LimitExceededError(
                        f"$lookup from bucket {self.name!r} holds more than its memory limit of {max_bytes} bytes "
                        "(stage_memory_bytes); it refuses rather than spill to disk")
                out.append(decode(raw))
        return out

    def aggregate(self, pipeline: list, explain: Any = False, buckets: Any = None, stream: bool = False) -> Reply:
        """The documents ``pipeline`` makes of the bucket's documents (MongoDB's stages; see
        hoarddb.values.pipeline). A leading ``$match`` is served by an index where one fits
        (``index_used`` says which), and by the ``_id_`` it pins; ``$group`` and ``$sort``
        are bounded by ``stage_memory_bytes``/``stage_max_documents`` (LIMIT_EXCEEDED past them).
        ``buckets(name)`` gives the documents of another hash bucket of the database, for
        ``$lookup`` (the engine passes it); each bucket is read once per aggregation."""
        if not isinstance(explain, bool):
            raise BadValueError(f"aggregate's explain is true or false, got {explain!r}")
        lookup = None
        if buckets is not None:
            read: dict = {}

            def lookup(name):
                if name not in read:
                    read[name] = buckets(name)
                return read[name]
        compiled = compile_pipeline(pipeline, limits=Limits(self.options.stage_memory_bytes,
                                                            self.options.stage_max_documents), lookup=lookup)
        first = compiled.leading_match
        lead_sort = compiled.leading_sort
        if stream and not explain and lead_sort is not None:  # a cursor's, with a $sort an index may serve
            p = plan(first or {}, self.indexes.indexes, lead_sort)
            if p.index is not None and p.index.state != "ready":
                p = plan(first or {}, [], lead_sort)
            walked = self._walked(p)
            if walked is not None:  # the documents come in the $sort's order: the stage is left out
                ties = compile_pipeline([{"$sort": lead_sort}], limits=Limits(
                    self.options.stage_memory_bytes, self.options.stage_max_documents)) if p.order.ties else None
                docs = self._fetched_in_order(walked, p.sorted_field, compile_filter(first or {}), ties)
                return Reply(compiled.run(docs, sorted=True), index_used=p.index_used)
        if stream and not explain:  # a cursor's: the documents are read, and the stages run, as it goes
            p = plan(first, self.indexes.indexes) if first is not None else None
            if p is not None and p.index is not None and p.index.state != "ready":
                p = plan(first, [])
            raws = self._planned(None, first, p)[0] if p is not None else (
                raw for _key, raw in self._candidates(None, {}))
            return Reply(compiled.run(decode(raw) for raw in raws),
                         index_used=p.index_used if p is not None else FULL_SCAN)
        room = self.options.max_answer_bytes
        out: list = []
        taken = 0
        sorted_by_index = False
        with self.kv.read() as txn:
            examined = [0]
            if first is not None or lead_sort is not None:
                p = plan(first or {}, self.indexes.indexes, lead_sort)
                if p.index is not None and p.index.state != "ready":
                    p = plan(first or {}, [], lead_sort)
                index_used = p.index_used
            if lead_sort is not None and p.ordered(txn):
                # the documents come in the $sort's order from the index: the stage is left out
                sorted_by_index = True
                counted = {"keys": 0, "docs": 0}
                ties = compile_pipeline([{"$sort": lead_sort}], limits=Limits(
                    self.options.stage_memory_bytes, self.options.stage_max_documents)) if p.order.ties else None
                source = self._in_order(txn, p, compile_filter(first or {}), ties, counted)
                examined = None
            elif first is not None:
                raws, counted = self._planned(txn, first, p)
            else:
                raws, counted = (raw for _key, raw in self._candidates(txn, {})), {"keys": 0}
                index_used = FULL_SCAN
            if examined is not None:
                def docs():
                    for raw in raws:
                        examined[0] += 1
                        yield decode(raw)
                source = docs()
            for doc in compiled.run(source, sorted=sorted_by_index):
                out.append(doc)
                if room is not None:
                    taken += len(encode_document(doc, "a document of the aggregation"))
                    if taken > room:
                        raise answer_too_large(taken, room, "aggregate")
        extras = {"index_used": index_used}
        if explain:
            extras["explain"] = {"index_used": index_used, "keys_examined": counted["keys"],
                                 "docs_examined": counted["docs"] if examined is None else examined[0],
                                 "returned": len(out)}
            if lead_sort is not None:
                extras["explain"]["sort"] = "index" if sorted_by_index else "memory"
                if not sorted_by_index:
                    extras["explain"]["sort_in_memory"] = p.unsorted
        return Reply(out, **extras)

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
            start = self.DOC + self._doc_key(after) if after is not None else self.DOC
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
        """``(key, bson)`` pairs that may match: the one document a plain ``_id_`` pins, else all.
        With ``txn`` None (a cursor's read), read in chunks of fresh transactions (stores/resumable.py)."""
        ident = filter.get("_id_", _MISSING) if isinstance(filter, Mapping) else _MISSING
        if ident is not _MISSING and ident is not None and not isinstance(ident, (list, Mapping, Regex)):
            key = self.DOC + self._doc_key(ident)
            if txn is None:
                with self.kv.read() as one:
                    raw = one.get(key)
            else:
                raw = txn.get(key)
            return [(key, raw)] if raw is not None else []
        return _scan(txn, self.DOC) if txn is not None else resumable.scan(self.kv, self.DOC)

    # -- index life cycle ----------------------------------------------------------

    def open_indexes(self) -> None:
        """Mark ``building`` the indexes that need a rebuild (an older format, or conflicted);
        the engine's index builder rebuilds them in the background (:meth:`build_indexes`).

        Until then a write leaves their entries alone, and search refuses them.
        """
        for ix in self.indexes.indexes:
            if ix.state in ("building", "conflicted"):
                ix.state = "building"
                ix.frontier = None
                ix.progress = (0, self._count)

    def build_indexes(self, stop, persist=None) -> list[dict] | None:
        """Rebuild every ``building`` index from the documents; the new declarations, or None
        if there was none (or ``stop``, a threading.Event, was set: the next open starts over).

        ``persist(declarations)`` is called first with each index to rebuild declared
        ``building``, so that an interrupted rebuild (of a conflicted index, whose format is
        current) is never taken for a finished one: not by the next open, which rebuilds it
        again, nor by ``hoarddb check``, which leaves a building index alone.

        First the old entries go, then the documents are read in key order, ``BUILD_BATCH``
        at a time, each batch one write transaction that writes their entries and moves the
        index's frontier past them (under the store's write lock, so that no write runs
        between the commit and the move). Writes in between keep the entries of the
        documents behind the frontier, and leave the others to the batches to come. A
        unique index that finds one value in two documents becomes ``conflicted``, naming
        both; nothing is deleted.
        """
        todo = [ix for ix in self.indexes.indexes if ix.state == "building"]
        if not todo:
            return None
        if persist is not None and any(ix.decl.get("state", "ready") != "building" for ix in todo):
            for ix in todo:
                ix.decl = dict(ix.decl, state="building")
            persist([ix.decl for ix in self.indexes.all])
        for ix in todo:
            log.warning("bucket %s: rebuilding index %s from the documents", self.name, ix.name)
            ix.progress = (0, self._count)
            while True:  # the old entries go (writes meanwhile leave this index alone: no frontier yet)
                if stop.is_set():
                    return None
                if self._write(lambda txn, ix=ix: (self.indexes.clear(txn, ix), 0)) < 10_000:
                    break
            with self._wlock:
                ix.claims = False
                ix.frontier = b""
            conflict = None
            while True:
                if stop.is_set():
                    return None
                with self._wlock:
                    start = ix.frontier

                    def batch(txn, ix=ix, start=start):
                        docs = _docs_after(txn, self.DOC, start, BUILD_BATCH)
                        return (docs[-1][0] if docs else None, len(docs), self.indexes.build(txn, ix, docs)), 0

                    last, n, found = self._write(batch)
                    conflict = conflict or found
                    done = n < BUILD_BATCH
                    if last is not None:
                        ix.frontier = last
                    ix.progress = (ix.progress[0] + n, max(self._count, ix.progress[0] + n))
                    if done:  # every document has its entries: from now on, every write keeps them
                        decl = dict(ix.decl, format=format_for(ix.decl), state="conflicted" if conflict else "ready")
                        decl.pop("conflict", None)
                        if conflict:
                            decl["conflict"] = conflict
                            log.error("bucket %s: unique index %s is conflicted: %s", self.name, ix.name, conflict)
                        ix.decl, ix.state, ix.frontier = decl, decl["state"], None
                        break
            log.warning("bucket %s: index %s is %s (%d documents)", self.name, ix.name, ix.state, ix.progress[0])
        return [ix.decl for ix in self.indexes.all]

    def declarations(self) -> list[dict]:
        """The index declarations as they should be persisted (a load may have conflicted one)."""
        return [ix.decl for ix in self.indexes.all]

    def index_states(self) -> list[dict]:
        """Each index's declaration with its state as this version sees it (and, while it is
        building, ``progress``: ``{documents, of}``)."""
        return [dict(ix.decl, state=ix.state, **({"progress": {"documents": ix.progress[0], "of": ix.progress[1]}}
                                                 if ix.state == "building" else {}))
                for ix in self.indexes.all]

    # -- TTL -----------------------------------------------------------------------------

    def sweep(self, now: float, deadline: float) -> dict:
        """Delete documents whose TTL has passed, until done or ``deadline`` (time.monotonic()).

        Every expiry is checked again inside the deleting transaction, so a document
        refreshed since it was found stays. Returns ``{expired, skipped, backlog, exhausted}``.
        """
        result = {"expired": 0, "skipped": 0, "backlog": 0, "exhausted": False}
        try:
            self._sweep_indexes(now, deadline, result)
        finally:
            result.pop("_skipped_keys", None)
        return result

    def _sweep_indexes(self, now: float, deadline: float, result: dict) -> None:
        for ix in self.indexes.indexes:
            if ix.ttl is None or ix.state != "ready":
                continue
            cutoff = now - ix.ttl
            cutoff_date = datetime.datetime.fromtimestamp(cutoff, datetime.timezone.utc)
            # Numbers from -inf (NaN sorts below it and never expires), dates from the first.
            ranges = [[ix.prefix + _NUMBER_FROM, ix.prefix + encode_key(cutoff) + b"\xff"],
                      [ix.prefix + _DATE_TAG, ix.prefix + encode_key(cutoff_date) + b"\xff"]]
            while True:
                if time.monotonic() >= deadline:
                    result["exhausted"] = True
                    result["backlog"] += self._count_range(ranges)
                    break
                unlink: list = []
                done, expired, resume = self._write(
                    lambda txn: self._sweep_batch(txn, ix, ranges, now, result, unlink))
                self.fields.unlink(unlink)
                result["expired"] += expired
                # The next batch starts after the last entry this one read: entries that
                # stay (an array's element, a refreshed or skipped document) are read once
                # a pass, however many there are.
                for bounds, lower in zip(ranges, resume):
                    bounds[0] = lower
                if done:
                    break

    def _sweep_batch(self, txn, ix, ranges, now: float, result: dict, unlink: list) -> tuple[tuple, int]:
        """One write of a sweep: ``((done, expired, where each range goes on), -expired)``.
        It may run again from the start (a map grown midway), so it changes nothing of the
        caller's but ``unlink`` and the set of skipped documents."""
        entries = []
        skipped = result.setdefault("_skipped_keys", set())  # documents this pass cannot expire
        cursor = txn.cursor()
        resume = []
        for lower, upper in ranges:
            if cursor.set_range(lower):
                for key, value in cursor:
                    if key >= upper or len(entries) >= SWEEP_BATCH:
                        break
                    lower = key + b"\x00"  # the smallest key after this one
                    dk = ix.doc_key_of(key, value)
                    if dk not in skipped:
                        entries.append(dk)
            resume.append(lower)
        expired = 0
        unlink.clear()
        for dk in dict.fromkeys(entries):
            raw = txn.get(self.DOC + dk)
            if raw is None:
                continue
            doc = decode(raw)
            at = expires_at(doc.get(ix.fields[0]), ix.ttl)
            if at is None or at > now:
                continue  # refreshed, or never expires: leave it
            try:
                self._remove(txn, self.DOC + dk, doc, unlink)
            except TooManyElementsError as exc:
                if dk not in skipped:
                    skipped.add(dk)
                    result["skipped"] += 1
                    log.warning("TTL: bucket %s: expired document %s is not deleted: %s", self.name,
                                literal(doc.get("_id_")), exc.message)
                continue
            expired += 1
        return (len(entries) < SWEEP_BATCH, expired, resume), -expired

    def _count_range(self, ranges, cap: int = 1_000_000) -> int:
        n = 0
        with self.kv.read() as txn:
            cursor = txn.cursor()
            for lower, upper in ranges:
                if cursor.set_range(lower):
                    for key in cursor.iternext(values=False):
                        if key >= upper or n >= cap:
                            break
                        n += 1
        return n


def expires_at(value: Any, ttl: float) -> float | None:
    """When a document whose TTL field holds ``value`` expires (Unix seconds), or None for never.

    A date, or a number of seconds since 1970, expires ``ttl`` seconds after that time;
    anything else (missing, null, string, boolean, array, NaN) never expires.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.timestamp() + ttl
    if isinstance(value, Decimal128):
        value = float(value.to_decimal())
    if isinstance(value, (int, float)):
        value = float(value)
        return None if math.isnan(value) else value + ttl
    return None


class _Reading:
    """What a find or search does with the documents it reads: match, sort, skip, limit, project,
    and refuse an answer past ``max_answer_bytes`` as soon as it knows."""

    def __init__(self, matcher, limit, sort, skip, projection, options, verb: str):
        self.matcher, self.limit, self.skip, self.verb = matcher, limit, skip, verb
        self.room = options.max_answer_bytes
        self.shape = compile_projection(projection, expressions=False) if projection is not None else None
        self.order = None
        if sort is not None:
            stages = [{"$sort": sort}] + ([{"$limit": skip + limit}] if limit is not None else [])
            self.order = compile_pipeline(stages, limits=Limits(options.stage_memory_bytes, options.stage_max_documents))
        self.examined = 0

    def stream(self, raws):
        """The documents of the answer one by one, as ``raws`` are read (a cursor's: no answer limit)."""
        matched = self._matched(raws)
        if self.order is not None:
            matched = self.order.run(matched)
        stop = None if self.limit is None else self.skip + self.limit
        shape = self.shape
        for doc in itertools.islice(matched, self.skip, stop):
            yield doc if shape is None else shape(doc)

    def collect(self, raws) -> list:
        out: list = []
        if self.order is None and self.shape is None and not self.skip:
            self.examined = _matching(raws, self.matcher, self.limit, out, self.room, self.verb)
            return out
        matched = self._matched(raws)
        if self.order is not None:
            matched = self.order.run(matched)
        return self.collect_sorted(matched)

    def stream_sorted(self, matched):
        """collect_sorted one document at a time (a cursor's: no answer limit)."""
        shape = self.shape
        for doc in itertools.islice(matched, self.skip, None if self.limit is None else self.skip + self.limit):
            yield doc if shape is None else shape(doc)

    def collect_sorted(self, matched) -> list:
        """The answer from matching documents already in order: skip, limit, project."""
        out: list = []
        taken = 0
        for doc in itertools.islice(matched, self.skip, None if self.limit is None else self.skip + self.limit):
            if self.shape is not None:
                doc = self.shape(doc)
            out.append(doc)
            if self.room is not None:
                taken += len(encode_document(doc, "a document of the answer"))
                if taken > self.room:
                    raise answer_too_large(taken, self.room, self.verb)
        return out

    def _matched(self, raws):
        for raw in raws:
            self.examined += 1
            doc = decode(raw)
            if self.matcher(doc):
                yield doc


#: Where a run of documents equal on a sort's first key begins (HashStore._matched_in_order).
_RUN = object()


def _sorted_runs(items, ties):
    """The documents of ``items`` with each run (between two ``_RUN``) put through ``ties``, a
    pipeline that sorts it; a run is read only when the one before it is done."""
    items = iter(items)
    ended = False

    def one_run():
        nonlocal ended
        for item in items:
            if item is _RUN:
                return
            yield item
        ended = True
    while not ended:
        yield from ties.run(one_run())


def _is_leaf_array(doc, parts, value) -> bool:
    """Whether ``value`` is an array the path ends on (its elements count, not it), rather than an
    element of such an array that is itself an array (a value of its own)."""
    return any(v is value for v in _path_ends(doc, parts))


def _path_ends(doc, parts):
    """The values a path ends on, arrays not expanded (paths.resolve with leaf_arrays=False)."""
    return resolve(doc, parts, leaf_arrays=False)


def _matching(raws, matcher, limit: int | None, out: list, room: int | None, verb: str) -> int:
    """Append to ``out`` the decoded documents of ``raws`` that match (all of them when
    ``matcher`` is None), up to ``limit``; how many were read. DocumentTooLargeError once
    they pass ``room`` bytes (``Options.max_answer_bytes``, a server's message limit)."""
    examined = 0
    taken = 0
    for raw in raws:
        examined += 1
        doc = decode(raw)
        if matcher is None or matcher(doc):
            out.append(doc)
            if room is not None:
                taken += len(raw)
                if taken > room:
                    raise answer_too_large(taken, room, verb)
            if limit is not None and len(out) >= limit:
                break
    return examined


def check_update(filter: Any, update: Any, upsert: Any, multi: Any, arrayFilters: Any) -> tuple:  # noqa: N803
    """An update's arguments checked as :meth:`HashStore.update` checks them: ``(compiled update, matcher)``
    (also what a cluster checks before it looks for the one document to update: hoarddb/cluster/pick.py)."""
    _check_flag(upsert, "upsert")
    _check_flag(multi, "multi")
    return compile_update(update, arrayFilters), compile_filter(filter)


def check_find_and_modify(filter: Any, update: Any, remove: Any, new: Any, upsert: Any, sort: Any, projection: Any,
                          arrayFilters: Any) -> tuple:  # noqa: N803
    """find_and_modify's arguments checked as :meth:`HashStore.find_and_modify` checks them: ``(compiled update or
    None with remove, matcher, sort order or None, projection or None)``."""
    _check_flag(remove, "remove")
    _check_flag(new, "new")
    _check_flag(upsert, "upsert")
    if remove and update is not None:
        raise BadValueError("find_and_modify takes an update or remove: true, not both")
    if not remove and update is None:
        raise BadValueError("find_and_modify needs an update (such as {'$inc': {'n': 1}}) or remove: true")
    if remove and (new or upsert):
        raise BadValueError("find_and_modify with remove: true takes neither new nor upsert")
    compiled = None if remove else compile_update(update, arrayFilters)
    matcher = compile_filter(filter)
    order = compile_sort(sort) if sort is not None else None
    shape = compile_projection(projection) if projection is not None else None
    return compiled, matcher, order, shape


def _check_flag(value: Any, name: str) -> None:
    if not isinstance(value, bool):
        raise BadValueError(f"{name} is true or false, got {value!r:.40}")


_MISSING = object()
_NO_ID = "put stores a document under its _id_, and this one has none; add _id_, or use insert"


def _scan(txn, prefix: bytes):
    cursor = txn.cursor()
    if not cursor.set_range(prefix):
        return
    for key, raw in cursor:
        if not key.startswith(prefix):
            return
        yield key, raw


def _decoded(txn, prefix: bytes):
    """``(encoded _id_, document)`` of every document that decodes (the others are reported apart)."""
    for key, raw in _scan(txn, prefix):
        try:
            yield bytes(key[len(prefix):]), decode(raw)
        except DECODE_ERRORS:
            continue


def _docs_after(txn, prefix: bytes, after: bytes, n: int) -> list[tuple[bytes, dict]]:
    """``(encoded _id_, document)`` of the first ``n`` documents whose key is above ``after``."""
    cursor = txn.cursor()
    out: list = []
    if not cursor.set_range(prefix + after + b"\x00" if after else prefix):
        return out
    for key, raw in cursor:
        if not key.startswith(prefix) or len(out) >= n:
            break
        out.append((bytes(key[len(prefix):]), decode(raw)))
    return out


# -- checking (hoarddb check) ----------------------------------------------------------------


def _check_documents(txn, indexes: IndexSet, checked: list, problems: list) -> int:
    """Every document decodes, sits under its own ``_id_``, and has every entry of each
    checked index (in a unique one: its own, or a claim beside the holder's); how many there are."""
    count = 0
    for key, raw in _scan(txn, HashStore.DOC):
        count += 1
        dk = bytes(key[1:])
        try:
            doc = decode(raw)
        except DECODE_ERRORS as exc:
            problems.append(Problem(HashStore.KV_FILE,
                                    f"the document under key {_shown_key(dk)} does not decode ({exc})"))
            continue
        ident = doc.get("_id_", _MISSING)
        if ident is _MISSING:
            problems.append(Problem(HashStore.KV_FILE, f"the document under key {_shown_key(dk)} has no _id_"))
            continue
        if encode_key(ident) != dk:
            problems.append(Problem(HashStore.KV_FILE, f"document {literal(ident)} is stored under the key of "
                                                       f"another _id_, {_shown_key(dk)}"))
        for ix in checked:
            try:
                entries = indexes.entries(ix, doc, dk)
            except HoardError as exc:
                problems.append(Problem(HashStore.KV_FILE, f'document {literal(ident)} cannot be in index "{ix.name}": '
                                                           f"{exc.message}", REBUILD))
                continue
            for ekey, (value, values) in entries.items():
                shown = ", ".join(f"{f} = {literal(v)}" for f, v in zip(ix.fields, values))
                held = txn.get(ekey)
                if held is None:
                    problems.append(Problem(HashStore.KV_FILE, f'index "{ix.name}" has no entry for document '
                                                               f"{literal(ident)} ({shown})", REBUILD))
                elif ix.unique and bytes(held) != dk:
                    claim = ekey + dk
                    if not ix.claims:
                        problems.append(Problem(
                            HashStore.KV_FILE, f"documents {literal(ident)} and {_shown_key(held)} both hold {shown}, "
                            f'which unique index "{ix.name}" allows one document', "change or delete one of them"))
                    elif len(claim) <= LMDB_MAX_KEY and txn.get(claim) is None:
                        problems.append(Problem(HashStore.KV_FILE, f'conflicted unique index "{ix.name}" has no claim '
                                                                   f"for document {literal(ident)} ({shown})", REBUILD))
                elif not ix.unique and bytes(held) != value:
                    problems.append(Problem(HashStore.KV_FILE, f'index "{ix.name}" has an entry for document '
                                                               f"{literal(ident)} ({shown}) holding "
                                                               f"{bytes(held)[:40]!r}, not nothing", REBUILD))
    return count


def _check_entries(txn, indexes: IndexSet, checked: list, problems: list) -> None:
    """Every index entry (and claim) points to a document that has it; entries of no declared index are stray."""
    by_id = {ix.id: ix for ix in indexes.all}
    stray: dict[int, int] = {}
    for key, value in _scan(txn, PREFIX):
        ix = by_id.get(key[1]) if len(key) > 1 else None
        if ix is None:
            stray[key[1] if len(key) > 1 else -1] = stray.get(key[1] if len(key) > 1 else -1, 0) + 1
            continue
        if ix not in checked:
            continue
        key, value = bytes(key), bytes(value)
        try:
            pos = ix.values_end(key)
            entry, rest = key[:pos], key[pos:]
            if rest and key_end(rest, 0) != len(rest):
                raise BadValueError("more than one document key after the values")
        except BadValueError as exc:
            problems.append(Problem(HashStore.KV_FILE, f'index "{ix.name}" has an entry that does not parse '
                                                       f"({exc.message}): {key[:40]!r}", REBUILD))
            continue
        if ix.unique and not rest:  # an entry: its value is the holder
            owner, what = value, "entry"
        elif ix.unique:  # a claim: entry key + the claimant
            owner, what = rest, "claim"
            if not ix.claims:
                problems.append(Problem(HashStore.KV_FILE, f'unique index "{ix.name}" is not conflicted, yet holds a '
                                                           f"claim for document {_shown_key(rest)}", REBUILD))
                continue
            holder = txn.get(entry)
            if holder is None or bytes(holder) == rest:
                problems.append(Problem(HashStore.KV_FILE, f'conflicted unique index "{ix.name}" holds a claim for '
                                                           f"document {_shown_key(rest)} on a value no other document "
                                                           "holds", REBUILD))
        else:
            owner, what = rest, "entry"
            if not rest:
                problems.append(Problem(HashStore.KV_FILE, f'index "{ix.name}" has an entry without a document key: '
                                                           f"{key[:40]!r}", REBUILD))
                continue
        raw = txn.get(HashStore.DOC + owner)
        if raw is None:
            problems.append(Problem(HashStore.KV_FILE, f'index "{ix.name}" has an {what} for document '
                                                       f"{_shown_key(owner)}, which does not exist", REBUILD))
            continue
        try:
            has = indexes.entries(ix, decode(raw), owner)
        except (HoardError, *DECODE_ERRORS):
            continue  # said of the document already
        if (entry if ix.unique else key) not in has:
            values = ", ".join(literal(v) for v in _decoded_values(ix, entry[len(ix.prefix):]))
            problems.append(Problem(HashStore.KV_FILE, f'index "{ix.name}" has an {what} for document '
                                                       f"{_shown_key(owner)} with the value(s) {values}, which the "
                                                       "document does not hold", REBUILD))
    for index_id, n in stray.items():
        problems.append(Problem(HashStore.KV_FILE, f"{n} index entries of index id {index_id}, which the bucket does "
                                                   "not declare", REBUILD))


def _shown_key(dk) -> str:
    """An encoded document key as a literal (its bytes when it does not decode)."""
    try:
        return literal(decode_key(bytes(dk)))
    except Exception:
        return repr(bytes(dk)[:40])


def _decoded_values(ix, encoded: bytes) -> list:
    try:
        return ix.decoded_values(encoded)
    except Exception:
        return [encoded[:40]]
