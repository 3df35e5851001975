"""Store fields: the stores a document owns (``db.Property["p1"].Expenses``), kept in its bucket's KV.

A hash or btree bucket declares store fields (``Expenses lifoStore``); each document
then owns one store of that type per field. Their elements live in the owning bucket's
LMDB environment, beside the documents, so a write to a store field and the check that
its document exists are one transaction:

    b"F" + encode_key(doc key) + field no (1 byte) + element key  ->  element (BSON)
    b"C" + encode_key(doc key) + field no                         ->  count u64 BE, last seq u64 BE
    b"B" + blob id                                                ->  encode_key(doc key) + field no

The document key is the hash document's ``_id_`` (a btree bucket: the entry's sort key,
shared by entries with equal keys). The element key depends on the field's type:

    fifo, lifo   seq (u64 BE, from the counter)          push appends; pop takes the lowest / highest
    heap         ~encode_key(priority) + seq             highest priority first, ties in push order
    hash, btree  encode_key(key)                         put(key, doc) replaces; list in key order
    blob         encode_key(blob id) -> {name, type, size, sha256, created}; the bytes in
                 ``fields/<blob id>`` in the bucket directory, written (fsync) before the
                 metadata commits, and unlinked after the delete commits

A crash between a blob field's file and its metadata leaves a file no ``b"B"`` entry
names; the bucket deletes such files when it opens.

Limits (these are the spec's L2 sub-buckets): past ``l2_soft_limit`` elements a warning is
logged once per store; a write that would pass ``l2_hard_limit`` is refused. Deleting a
document deletes its stores in the same transaction, unless they hold more than
``max_cascade_delete`` elements: then the delete is refused, naming the command that
empties them (the TTL sweeper skips such a document).
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import struct
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Iterator

from ..errors import (BadValueError, CorruptDataError, DuplicateKeyError, L2LimitError, NotADocumentError,
                      NotFoundError, TooManyElementsError, VerbNotSupportedError)
from ..ids import uuid7
from ..storage import blobfiles
from ..storage.oserrors import storage_error
from ..values.codec import DECODE_ERRORS, decode, encode
from ..values.keys import decode_key, encode_key, key_end
from ..values.literal import literal
from .base import DAMAGE, REBUILD, Problem, check_limit, encode_document
from .base import scan as _scan

log = logging.getLogger("hoarddb.fields")

FIELD, COUNT, BLOB = b"F", b"C", b"B"
_COUNTER = struct.Struct(">QQ")
QUEUES = ("fifo", "lifo")
KEYED = ("hash", "btree")


class FieldStores:
    """FieldStores serves the verbs of every store field of one bucket's documents.

    ``owner`` is the hash or btree store of the bucket: it says whether a document
    exists (``owner.document_exists(txn, doc_key)``) and runs write transactions
    (``owner._write``) so its own counters and locks stay right.
    """

    def __init__(self, owner, declaration: dict, options):
        self.owner = owner
        self.bucket = declaration["name"]
        self.fields = {f["name"]: (i, f["type"]) for i, f in enumerate(declaration.get("store_fields") or [])}
        self.options = options
        self.blob_dir = Path(owner.directory) / "fields"
        self._warned: set[bytes] = set()
        if any(t == "blob" for _, t in self.fields.values()):
            self.blob_dir.mkdir(exist_ok=True)
            self._remove_orphan_files()

    def __bool__(self) -> bool:
        return bool(self.fields)

    # -- addressing ------------------------------------------------------------------------

    def field(self, name: str) -> tuple[int, str]:
        try:
            return self.fields[name]
        except KeyError:
            names = ", ".join(f"{n} ({t})" for n, (_, t) in self.fields.items()) or "none"
            raise BadValueError(
                f"bucket {self.bucket!r} has no store field {name!r}; its store fields: {names}"
            ) from None

    def call(self, key: Any, field: str, verb: str, positional: list, keywords: dict) -> Any:
        """Run ``verb`` on document ``key``'s store ``field``."""
        fno, ftype = self.field(field)
        handler = getattr(self, f"_{ftype}_{verb}", None) or getattr(self, f"_{_family(ftype)}_{verb}", None)
        if handler is None:
            raise refusal(self.bucket, field, ftype, verb)
        dk = self.owner.doc_key(key)
        where = f'{self.bucket}["{key}"].{field}' if isinstance(key, str) else f"{self.bucket}[{literal(key)}].{field}"
        try:
            return handler(_Field(self, dk, fno, ftype, where, key, field), *positional, **keywords)
        except DAMAGE as exc:
            raise self.owner.damaged(exc) from exc

    # -- cascade -----------------------------------------------------------------------

    def elements_of(self, txn, dk: bytes) -> int:
        """How many elements document ``dk``'s stores hold together."""
        total = 0
        prefix = COUNT + dk
        cursor = txn.cursor()
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not key.startswith(prefix) or len(key) != len(prefix) + 1:
                    break
                total += _COUNTER.unpack(value)[0]
        return total

    def check_cascade(self, txn, dk: bytes, doc_id: Any) -> None:
        """Refuse to delete a document whose stores hold more than max_cascade_delete elements."""
        n = self.elements_of(txn, dk) if self.fields else 0
        limit = self.options.max_cascade_delete
        if n > limit:
            doc = f"db.{self.bucket}[{literal(doc_id)}]"
            held = []  # the non-empty stores, largest first, each with the command that empties it
            for name, (fno, ftype) in self.fields.items():
                count = _counter(txn, COUNT + dk + bytes([fno]))[0]
                if count:
                    held.append((count, f"{name} ({count:,}, {ftype}): {doc}.{name}.{_EMPTYING[ftype]}"))
            held.sort(key=lambda c: -c[0])
            raise TooManyElementsError(
                f"document {literal(doc_id)} of bucket {self.bucket!r} owns {n:,} store-field elements, more than one "
                f"delete removes (max_cascade_delete = {limit:,}). Empty its store fields first, repeating until "
                f"they are small — {'; '.join(text for _, text in held)} — then delete the document; "
                "or raise max_cascade_delete.",
                document=doc_id, elements=n,
            )

    def delete_all(self, txn, dk: bytes) -> list[str]:
        """Delete every element of document ``dk``'s stores in ``txn``; the blob files to unlink after commit."""
        files = []
        for ns in (FIELD, COUNT):
            prefix = ns + dk
            cursor = txn.cursor()
            doomed = []
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not key.startswith(prefix):
                        break
                    doomed.append((key, value))
            for key, value in doomed:
                if ns == FIELD and len(key) > len(prefix) and self._type_of(key[len(prefix)]) == "blob":
                    blob_id = decode_key(key[len(prefix) + 1:])
                    txn.delete(BLOB + blob_id.encode())
                    files.append(blob_id)
                txn.delete(key)
        return files

    def unlink(self, blob_ids: list[str]) -> None:
        for blob_id in blob_ids:
            try:
                os.unlink(self.blob_dir / blob_id)
            except FileNotFoundError:
                pass

    def _type_of(self, fno: int) -> str | None:
        for i, t in self.fields.values():
            if i == fno:
                return t
        return None

    def sizes(self, key: Any) -> list[dict]:
        """``[{name, type, length}]`` of a document's store fields (for the shell's view of a document)."""
        dk = self.owner.doc_key(key)
        with self.owner.kv.read() as txn:
            return [{"name": n, "type": t, "length": _counter(txn, COUNT + dk + bytes([i]))[0]}
                    for n, (i, t) in self.fields.items()]

    def _remove_orphan_files(self) -> None:
        with self.owner.kv.read() as txn:
            for path in self.blob_dir.iterdir():
                name = path.name
                if name.startswith(blobfiles.TEMP_PREFIX) or txn.get(BLOB + name.encode()) is None:
                    log.warning("bucket %s: removing blob-field file %s that no document owns (a crash "
                                "between its write and its commit)", self.bucket, name)
                    path.unlink(missing_ok=True)

    # -- queues: fifo, lifo --------------------------------------------------------------

    def _queue_push(self, f: "_Field", doc: Any) -> None:
        self._queue_batch_push(f, [doc], _single=True)

    def _queue_batch_push(self, f: "_Field", docs: list, _single: bool = False) -> int:
        data = [encode_document(d, "element" if _single else f"element {i} of the batch") for i, d in enumerate(docs)]

        def fn(txn, c):
            count, seq = c
            for d in data:
                seq += 1
                txn.put(f.prefix + seq.to_bytes(8, "big"), d)
            return len(data), (count + len(data), seq)

        return f.write(fn, adds=len(data))

    def _queue_pop(self, f: "_Field", limit: int | None = None):
        n = 1 if limit is None else check_limit(limit, self.options.max_pop, "pop")

        def fn(txn, c):
            items = list(_elements(txn, f.prefix, reverse=f.type == "lifo", limit=n))
            for key, _ in items:
                txn.delete(key)
            return [decode(v) for _, v in items], (c[0] - len(items), c[1])

        got = f.write(fn)
        return (got[0] if got else None) if limit is None else got

    def _queue_peek(self, f: "_Field", limit: int | None = None):
        n = 1 if limit is None else check_limit(limit, self.options.max_peek, "peek")
        got = f.read(lambda txn: [decode(v) for _, v in _elements(txn, f.prefix, reverse=f.type == "lifo", limit=n)])
        return (got[0] if got else None) if limit is None else got

    def _queue_list(self, f: "_Field", after: Any = 0, limit: int = 100) -> list:
        skip = _skip(after)
        check_limit(limit, self.options.max_peek, "list")
        return f.read(lambda txn: [decode(v) for _, v in _elements(txn, f.prefix, limit=limit, skip=skip)])

    def _queue_length(self, f: "_Field") -> int:
        return f.read(lambda txn: _counter(txn, f.counter_key)[0])

    # -- heap --------------------------------------------------------------------------

    def _heap_push(self, f: "_Field", doc: Any) -> None:
        self._heap_batch_push(f, [doc], _single=True)

    def _heap_batch_push(self, f: "_Field", docs: list, _single: bool = False) -> int:
        from .heap import prepare_element  # the heap bucket's rules, so both refuse the same elements

        prepared = [prepare_element(d, "element" if _single else f"element {i} of the batch") for i, d in enumerate(docs)]

        def fn(txn, c):
            count, seq = c
            for pkey, data in prepared:
                seq += 1
                txn.put(f.prefix + pkey + seq.to_bytes(8, "big"), data)
            return len(prepared), (count + len(prepared), seq)

        return f.write(fn, adds=len(prepared))

    _heap_pop = _queue_pop
    _heap_peek = _queue_peek
    _heap_list = _queue_list
    _heap_length = _queue_length

    # -- keyed: hash, btree -----------------------------------------------------------

    def _keyed_put(self, f: "_Field", key: Any, doc: Any = None, **extra) -> Any:
        if extra:
            raise BadValueError(f"{f.where}.put takes (key, document); name and type are for blob fields")
        if doc is None:
            raise BadValueError(f"{f.where}.put takes a key and a document: put(\"<key>\", {{...}})")
        ek = _element_key(key, f)
        data = encode_document(doc, "the document")

        def fn(txn, c):
            existed = txn.get(f.prefix + ek) is not None
            txn.put(f.prefix + ek, data)
            return key, (c[0] + (not existed), c[1])

        return f.write(fn, adds=1)

    def _keyed_get(self, f: "_Field", key: Any) -> Any:
        ek = _element_key(key, f)
        raw = f.read(lambda txn: txn.get(f.prefix + ek))
        return decode(raw) if raw is not None else None

    def _keyed_delete(self, f: "_Field", key: Any) -> dict:
        ek = _element_key(key, f)

        def fn(txn, c):
            gone = txn.delete(f.prefix + ek)
            return {"deleted": int(gone)}, (c[0] - int(gone), c[1])

        return f.write(fn)

    def _keyed_list(self, f: "_Field", after: Any = None, limit: int = 100) -> list:
        check_limit(limit, self.options.max_peek, "list")
        start = None if after is None else _element_key(after, f)

        def read(txn):
            out = []
            for key, value in _elements(txn, f.prefix, start=start, limit=limit):
                out.append({"key": decode_key(key[len(f.prefix):]), "doc": decode(value)})
            return out

        return f.read(read)

    _keyed_length = _queue_length

    # -- blob ------------------------------------------------------------------------------

    def _blob_put(self, f: "_Field", data: Any, doc: Any = None, name: str | None = None, type: str | None = None) -> str:
        from .blob import _chunks, _kind, _put_arguments

        if doc is not None:  # put(data, {name, type})
            if not isinstance(doc, Mapping):
                raise BadValueError(f"{f.where}.put takes the bytes and an options document {{name, type}}, "
                                    f"such as put(data, {{name: \"lease.pdf\", type: \"application/pdf\"}}); "
                                    f"got {_kind(doc)}: {doc!r:.80}")
            extra = sorted(map(str, set(doc) - {"name", "type"}))
            if extra:
                raise BadValueError(f"{f.where}.put options have unknown field(s) {', '.join(extra)}; accepted: name, type")
            for field, given in (("name", name), ("type", type)):
                if field in doc and given is not None:
                    raise BadValueError(f"{f.where}.put got {field} twice: in the options and as an argument; give it once")
            name, type = doc.get("name", name), doc.get("type", type)
        data, name, type = _put_arguments(data, name, type)
        f.check_document()
        blob_id = uuid7()
        try:
            size, sha256 = blobfiles.write_blob(self.blob_dir, blob_id, _chunks(data), self.options.sync)
        except OSError as exc:  # (write_blob removed what it wrote)
            raise storage_error(f"{f.where}: writing a blob", exc) from None
        meta = {"_id_": blob_id, "name": name, "type": type, "size": size, "sha256": sha256,
                "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)}

        def fn(txn, c):
            txn.put(f.prefix + encode_key(blob_id), encode(meta))
            txn.put(BLOB + blob_id.encode(), f.prefix[1:])
            return blob_id, (c[0] + 1, c[1])

        try:
            return f.write(fn, adds=1)
        except BaseException:
            self.unlink([blob_id])
            raise

    def _blob_load(self, f: "_Field", docs: list) -> dict:
        """Restore blobs with their own ids (for a dump's restore): ``{_id_, data, name, type, sha256?, created?}``.

        A given ``sha256`` is checked against the bytes written; an id the store already
        has is refused. Every file is written (and fsynced) before the metadata of all of
        them commits in one write.
        """
        from .blob import _blob_id, _chunks, _put_arguments

        f.check_document()
        written, metas = [], []
        try:
            for i, doc in enumerate(docs):
                if not isinstance(doc, Mapping) or "_id_" not in doc or "data" not in doc:
                    raise BadValueError(f"{f.where}.load: blob {i} must be a document {{_id_, data, name, type}}")
                blob_id = _blob_id(doc["_id_"])
                if (self.blob_dir / blob_id).exists() or blob_id in written:  # ids are unique in a bucket
                    raise DuplicateKeyError(f"{f.where}.load: blob {blob_id} exists already in bucket {self.bucket!r}")
                data, name, type = _put_arguments(doc["data"], doc.get("name"), doc.get("type"))
                size, sha256 = blobfiles.write_blob(self.blob_dir, blob_id, _chunks(data), self.options.sync)
                written.append(blob_id)
                if doc.get("sha256") is not None and doc["sha256"] != sha256:
                    raise CorruptDataError(f"{f.where}.load: blob {blob_id} has sha256 {sha256}, but its dump "
                                           f"recorded {doc['sha256']}; the dump is damaged: load it from another copy")
                created = doc.get("created") or datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
                metas.append({"_id_": blob_id, "name": name, "type": type, "size": size, "sha256": sha256,
                              "created": created})

            def fn(txn, c):
                for meta in metas:
                    key = f.prefix + encode_key(meta["_id_"])
                    if txn.get(key) is not None or txn.get(BLOB + meta["_id_"].encode()) is not None:
                        raise DuplicateKeyError(f"{f.where}.load: blob {meta['_id_']} exists already")
                    txn.put(key, encode(meta))
                    txn.put(BLOB + meta["_id_"].encode(), f.prefix[1:])
                return {"loaded": len(metas)}, (c[0] + len(metas), c[1])

            return f.write(fn, adds=len(metas))
        except BaseException:
            self.unlink(written)
            raise

    def _blob_meta(self, f: "_Field", key: Any) -> dict:
        from .blob import _blob_id

        blob_id = _blob_id(key)
        raw = f.read(lambda txn: txn.get(f.prefix + encode_key(blob_id)))
        if raw is None:
            raise NotFoundError(f"{f.where} has no blob {blob_id}")
        return decode(raw)

    def _blob_info(self, f: "_Field", key: Any) -> dict:
        return self._blob_meta(f, key)

    def _blob_get(self, f: "_Field", key: Any) -> dict:
        meta = self._blob_meta(f, key)
        data = b"".join(self._verified(f, meta, 1 << 20))
        return {**meta, "data": data}

    def _blob_stream(self, f: "_Field", key: Any, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise BadValueError(f"stream chunk_size must be a positive integer (bytes), got {chunk_size!r}")
        return self._verified(f, self._blob_meta(f, key), chunk_size)

    def _verified(self, f: "_Field", meta: dict, chunk_size: int) -> Iterator[bytes]:
        path = self.blob_dir / meta["_id_"]
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            raise CorruptDataError(f"{f.where}: the file of blob {meta['_id_']} is missing; restore it from a backup "
                                   "or delete the blob") from None
        return _checked_chunks(fh, meta, chunk_size, f.where)

    def _blob_delete(self, f: "_Field", key: Any) -> dict:
        meta = self._blob_meta(f, key)

        def fn(txn, c):
            gone = txn.delete(f.prefix + encode_key(meta["_id_"]))
            txn.delete(BLOB + meta["_id_"].encode())
            return {"deleted": int(gone)}, (c[0] - int(gone), c[1])

        got = f.write(fn)
        self.unlink([meta["_id_"]])
        return got

    _blob_length = _queue_length

    def _blob_list(self, f: "_Field", after: Any = None, limit: int = 100) -> list:
        from .blob import _blob_id

        check_limit(limit, self.options.max_peek, "list")
        start = None if after is None else encode_key(_blob_id(after, "list after"))
        return f.read(lambda txn: [decode(v) for _, v in _elements(txn, f.prefix, start=start, limit=limit)])



class _Field:
    """One document's one store field during a call: its keys, and reads and writes that check the document."""

    def __init__(self, stores: FieldStores, dk: bytes, fno: int, ftype: str, where: str, key: Any, name: str):
        self.stores, self.dk, self.fno, self.type, self.where = stores, dk, fno, ftype, where
        self.key, self.name = key, name
        self.prefix = FIELD + dk + bytes([fno])
        self.counter_key = COUNT + dk + bytes([fno])

    def _require(self, txn) -> None:
        if not self.stores.owner.document_exists(txn, self.dk):
            raise NotFoundError(
                f"{self.where}: document {literal(self.key)} does not exist in bucket {self.stores.bucket!r}, and a "
                "store field exists only once its document does. Insert the document first."
            )

    def check_document(self) -> None:
        self.read(lambda txn: None)

    def read(self, fn):
        with self.stores.owner.kv.read() as txn:
            self._require(txn)
            return fn(txn)

    def write(self, fn, adds: int = 0):
        """Run ``fn(txn, (count, seq)) -> (result, (count, seq))`` in one write, with the limits checked."""
        opts = self.stores.options

        def body(txn):
            self._require(txn)
            before = _counter(txn, self.counter_key)
            result, after = fn(txn, before)
            if after[0] > opts.l2_hard_limit and after[0] > before[0]:
                raise L2LimitError(
                    f'bucket "{self.stores.bucket}.{self.name}" exceeded hard limit ({opts.l2_hard_limit:,} entries). '
                    "Suggestions: archive old entries, split into multiple L1 buckets, or increase the limit in config.",
                    document=self.key, field=self.name, limit=opts.l2_hard_limit,
                )
            txn.put(self.counter_key, _COUNTER.pack(*after))
            return (result, after[0]), 0

        result, count = self.stores.owner._write(body)
        if count > opts.l2_soft_limit and self.counter_key not in self.stores._warned:
            self.stores._warned.add(self.counter_key)
            log.warning('bucket "%s.%s" of document %s holds %d entries, past the soft limit of %d; '
                        "the hard limit is %d", self.stores.bucket, self.name, literal(self.key), count,
                        opts.l2_soft_limit, opts.l2_hard_limit)
        return result


def refusal(bucket: str, field: str, ftype: str, verb: str) -> VerbNotSupportedError:
    """Why a verb does not apply to a store field, and what to do instead (the case study's advice)."""
    where = f"{bucket}[key].{field} ({ftype} store field)"
    if verb in ("get", "delete") and ftype in ("fifo", "lifo", "heap"):
        why = (f"a {ftype} element has no key, so it cannot be read or deleted by one: use peek or list to read, "
               "pop to remove; keep a hashStore copy keyed by id for the record you correct or delete")
    elif verb == "update":
        why = ("no store field has an update verb: write the element again with put under the same key "
               "(a hash or btree store field), or push a new element to a queue")
    elif verb == "range" and ftype == "btree":
        why = ("a btree store field has no range verb: page with list({after: \"2026-03-01/\", limit: N}) in key "
               "order and stop when the key leaves your range, or keep the data in a btree bucket, whose range "
               "takes two bounds")
    elif verb in ("insert", "batch_insert", "find", "search", "count"):
        why = ("store fields are reached by their own verbs: put(key, doc)/get/delete/list on hash and btree "
               "fields, push/pop/peek/list on queues and heaps")
    else:
        from ..operations import field_verbs_for

        why = f"its verbs: {', '.join(field_verbs_for(ftype))}"
    return VerbNotSupportedError(f"{where} has no verb {verb!r}: {why}")


#: The command that empties a store field of each type, page by page (for TOO_MANY_ELEMENTS).
_EMPTYING = {
    "fifo": "pop({limit: 100})",
    "lifo": "pop({limit: 100})",
    "heap": "pop({limit: 100})",
    "hash": "delete(key) for each key of list({limit: 1000})",
    "btree": "delete(key) for each key of list({limit: 1000})",
    "blob": "delete(_id_) for each _id_ of list({limit: 1000})",
}


def _family(ftype: str) -> str:
    return {"fifo": "queue", "lifo": "queue", "hash": "keyed", "btree": "keyed"}.get(ftype, ftype)


def _counter(txn, key: bytes) -> tuple[int, int]:
    raw = txn.get(key)
    return _COUNTER.unpack(raw) if raw is not None else (0, 0)


def _element_key(key: Any, f: _Field) -> bytes:
    if key is None or isinstance(key, (list, dict)):
        raise BadValueError(f"{f.where}: a key is a string, number, date, ObjectId or UUID, got {key!r:.60}")
    ek = encode_key(key)
    if len(ek) + len(f.prefix) > 500:
        raise BadValueError(f"{f.where}: key is too long ({len(ek)} bytes once encoded)")
    return ek


def _skip(after: Any) -> int:
    if after is None:
        return 0
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise BadValueError(f"list's after is how many elements to skip, an integer ≥ 0; got {after!r}")
    return after


def _elements(txn, prefix: bytes, *, reverse: bool = False, limit: int, skip: int = 0, start: bytes | None = None):
    """``(key, value)`` of a store field's elements in key order (or reversed), after ``start``."""
    cursor = txn.cursor()
    n = 0
    if not reverse:
        first = prefix + start if start is not None else prefix
        if not cursor.set_range(first):
            return
        for key, value in cursor:
            if not key.startswith(prefix):
                return
            if start is not None and key == first:
                continue
            if skip:
                skip -= 1
                continue
            yield key, value
            n += 1
            if n >= limit:
                return
    else:
        end = prefix + b"\xff" * 16
        if cursor.set_range(end):
            ok = cursor.prev()
        else:
            ok = cursor.last()
        while ok:
            key = cursor.key()
            if not key.startswith(prefix):
                return
            yield key, cursor.value()
            n += 1
            if n >= limit:
                return
            ok = cursor.prev()


def _checked_chunks(fh, meta: dict, chunk_size: int, where: str) -> Iterator[bytes]:
    with fh:
        digest = hashlib.sha256()
        chunk = fh.read(chunk_size)
        while True:
            digest.update(chunk)
            ahead = fh.read(chunk_size) if chunk else b""
            if not ahead:
                if digest.hexdigest() != meta["sha256"]:
                    raise CorruptDataError(
                        f"{where}: blob {meta['_id_']} is corrupt: sha256 on disk {digest.hexdigest()} differs from "
                        f"{meta['sha256']} recorded at put. Restore it from a backup, or delete it."
                    )
                if chunk:
                    yield chunk
                return
            yield chunk
            chunk = ahead


# -- checking (hoarddb check) ----------------------------------------------------------------

#: The key namespaces store fields keep in their bucket's environment.
NAMESPACES = FIELD + COUNT + BLOB


def check_fields(txn, declaration: Mapping, directory: Path, document_exists, problems: list) -> None:
    """What a check finds wrong with a bucket's store fields (``txn``: a read of its closed
    environment; ``document_exists(doc key)``: the owner type's test), into ``problems``.

    Every element belongs to a declared field of a document that exists, decodes, and sits
    under the key its type gives it (a heap element under its priority); each store's
    count record holds its number of elements and a sequence no element passed; each blob
    element has its owner record and its file in ``fields/``, whose bytes match the
    SHA-256 and size recorded, and every file there belongs to one.
    """
    from .heap import prepare_element

    kv = "kv/data.mdb"
    fields = {i: (f["name"], f["type"]) for i, f in enumerate(declaration.get("store_fields") or [])}
    counted: dict[bytes, list[int]] = {}  # doc key + field no -> [elements, highest seq]
    orphaned: set[bytes] = set()
    stray: dict[int, int] = {}
    blob_dir = Path(directory) / "fields"
    owned: set[str] = set()
    for key, raw in _scan(txn, FIELD):
        key = bytes(key)
        try:
            pos = key_end(key, 1)
            if pos >= len(key):
                raise BadValueError("no field number after the document key")
        except BadValueError as exc:
            problems.append(Problem(kv, f"a store-field element's key does not parse ({exc.message}): {key[:40]!r}",
                                    REBUILD))
            continue
        dk, fno, ek = key[1:pos], key[pos], key[pos + 1:]
        if fno not in fields:
            stray[fno] = stray.get(fno, 0) + 1
            continue
        name, ftype = fields[fno]
        where = f"store field {name} of document {_shown(dk)}"
        slot = counted.setdefault(dk + bytes([fno]), [0, 0])
        slot[0] += 1
        if dk + bytes([fno]) not in orphaned and not document_exists(dk):
            orphaned.add(dk + bytes([fno]))
            problems.append(Problem(kv, f"{where} holds elements, and the document does not exist", REBUILD))
        try:
            element = decode(raw)
        except DECODE_ERRORS as exc:
            problems.append(Problem(kv, f"an element of {where} does not decode ({exc})"))
            continue
        if ftype in QUEUES or ftype == "heap":
            expected = 8
            if ftype == "heap":
                try:
                    priority_key = prepare_element(element, "element")[0]
                    expected += len(priority_key)
                    if ek[:-8] != priority_key:
                        raise BadValueError("it is not under its priority")
                except (BadValueError, NotADocumentError) as exc:
                    problems.append(Problem(kv, f"an element of {where}: {exc.message}", REBUILD))
                    continue
            if len(ek) != expected:
                problems.append(Problem(kv, f"an element of {where} has a key of {len(ek)} bytes, not {expected}",
                                        REBUILD))
                continue
            slot[1] = max(slot[1], int.from_bytes(ek[-8:], "big"))
        elif ftype in KEYED:
            try:
                if key_end(ek, 0) != len(ek):
                    raise BadValueError("bytes after the element's key")
            except BadValueError as exc:
                problems.append(Problem(kv, f"an element key of {where} does not parse ({exc.message})", REBUILD))
        else:  # blob: the metadata, its owner record, its file
            blob_id = element.get("_id_")
            if not isinstance(blob_id, str) or encode_key(blob_id) != ek:
                problems.append(Problem(kv, f"a blob of {where} is recorded under another id than its own "
                                            f"({blob_id!r:.60})", REBUILD))
                continue
            owned.add(blob_id)
            owner = txn.get(BLOB + blob_id.encode())
            if owner is None or bytes(owner) != dk + bytes([fno]):
                problems.append(Problem(kv, f"blob {blob_id} of {where} has no record of its owner", REBUILD))
            path = blob_dir / blob_id
            try:
                size, sha256 = blobfiles.file_digest(path)
            except FileNotFoundError:
                problems.append(Problem(f"fields/{blob_id}", f"the file of blob {blob_id} of {where} is missing",
                                        "restore the file from a backup, or delete the blob"))
                continue
            if sha256 != element.get("sha256") or size != element.get("size"):
                problems.append(Problem(f"fields/{blob_id}", f"blob {blob_id} of {where} is corrupt: its file has "
                                                             f"{size} bytes of sha256 {sha256}, recorded at put "
                                                             f"{element.get('size')} bytes of {element.get('sha256')}",
                                        "restore the file from a backup, or delete the blob"))
    for key, raw in _scan(txn, COUNT):
        at = bytes(key[1:])
        elements, top = counted.pop(at, (0, 0))
        if len(raw) != _COUNTER.size:
            problems.append(Problem(kv, f"a store field's count record is {len(raw)} bytes, not {_COUNTER.size}",
                                    REBUILD))
            continue
        count, seq = _COUNTER.unpack(raw)
        name = fields.get(at[-1], ("#" + str(at[-1]), ""))[0] if at else "?"
        where = f"store field {name} of document {_shown(at[:-1])}"
        if at[-1:] and at[-1] not in fields:
            continue  # counted with the stray elements
        if count and not document_exists(at[:-1]) and at not in orphaned:
            problems.append(Problem(kv, f"{where} has a count, and the document does not exist", REBUILD))
        if count != elements:
            problems.append(Problem(kv, f"{where} counts {count} elements, and {elements} are there", REBUILD))
        if seq < top:
            problems.append(Problem(kv, f"{where}'s sequence is {seq}, behind its element {top}", REBUILD))
    for at, (elements, _top) in counted.items():
        problems.append(Problem(kv, f"store field {fields[at[-1]][0]} of document {_shown(at[:-1])} holds {elements} "
                                    "elements and has no count record", REBUILD))
    for key, raw in _scan(txn, BLOB):
        blob_id = bytes(key[1:]).decode("utf-8", "replace")
        if txn.get(FIELD + bytes(raw) + encode_key(blob_id)) is None:
            problems.append(Problem(kv, f"blob {blob_id} has a record of its owner, and no store field holds it",
                                    REBUILD))
    for fno, n in stray.items():
        problems.append(Problem(kv, f"{n} store-field elements of field number {fno}, which the bucket does not "
                                    "declare", REBUILD))
    if blob_dir.is_dir():
        for path in sorted(blob_dir.iterdir()):
            if not path.name.startswith(blobfiles.TEMP_PREFIX) and path.name not in owned:
                problems.append(Problem(f"fields/{path.name}", "no blob of a store field names this file",
                                        "delete the file if you do not miss it: no document owns it"))


def _shown(dk: bytes) -> str:
    try:
        return literal(decode_key(dk))
    except Exception:
        return repr(bytes(dk)[:40])
