"""Store fields: addressing the stores a document owns (``db.Property["p1"].Expenses``), their cascade and limits.

A hash or btree bucket declares store fields (``Expenses lifoStore``); each document
then owns one store of that type per field. What a store does is its type's, written
once for a bucket and a field alike (:class:`~hoarddb.stores.fifo.FifoField`,
:class:`~hoarddb.stores.heap.HeapField`, :class:`~hoarddb.stores.keyed.KeyedField`,
:class:`~hoarddb.stores.blob.BlobField`: the type's verbs over a keyspace, see
:mod:`hoarddb.stores.keyspace`). What only fields have is here: finding a document's
store (:meth:`FieldStores.store`), the keyspace of one document's one field
(:class:`FieldSpace`: the document must exist, the count record, the L2 limits), the
cascade when a document goes, and the check. Their elements live in the owning
bucket's LMDB environment, beside the documents, so a write to a store field and the
check that its document exists are one transaction:

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

import logging
import os
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from ..errors import BadValueError, L2LimitError, NotADocumentError, NotFoundError, TooManyElementsError, \
    VerbNotSupportedError
from ..operations import FIELD_VERBS, field_verbs_for
from ..storage import blobfiles
from ..values.codec import DECODE_ERRORS, decode
from ..values.keys import decode_key, encode_key, key_end
from ..values.literal import literal
from .base import DAMAGE, REBUILD, Problem
from .base import scan as _scan
from .blob import BlobField
from .fifo import FifoField
from .heap import HeapField, prepare_element
from .keyed import KeyedField
from .keyspace import COUNTER, Keys, Keyspace
from .lifo import LifoField

log = logging.getLogger("hoarddb.fields")

FIELD, COUNT, BLOB = b"F", b"C", b"B"
QUEUES = ("fifo", "lifo")
KEYED = ("hash", "btree")


class FieldStores:
    """FieldStores finds the store fields of one bucket's documents, and deletes them with their document.

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
            raise no_store_field(self.bucket, name, self.fields) from None

    def store(self, key: Any, field: str, verb: str):
        """The store that serves ``verb`` on document ``key``'s store ``field``: its type's
        semantics over the field's keyspace (refused, with advice, when the type has no such verb)."""
        fno, ftype = self.field(field)
        op = FIELD_VERBS.get(verb)
        if op is None or ftype not in op.types:
            raise refusal(self.bucket, field, ftype, verb)
        dk = self.owner.doc_key(key)
        where = f'{self.bucket}["{key}"].{field}' if isinstance(key, str) else f"{self.bucket}[{literal(key)}].{field}"
        return TYPES[ftype](FieldSpace(self, dk, fno, where, key, field), self.options)

    def call(self, key: Any, field: str, verb: str, positional: list, keywords: dict) -> Any:
        """Run ``verb`` on document ``key``'s store ``field``."""
        store = self.store(key, field, verb)
        try:
            return getattr(store, FIELD_VERBS[verb].name)(*positional, **keywords)
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
                total += COUNTER.unpack(value)[0]
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


class FieldSpace(Keyspace):
    """FieldSpace is one document's one store field, as the keyspace its store's verbs run
    over: reads and writes in the bucket's environment that first check the document
    exists, and writes that keep its count record and hold it to the L2 limits."""

    def __init__(self, stores: FieldStores, dk: bytes, fno: int, where: str, key: Any, name: str):
        self.stores, self.dk, self.where, self.key, self.name = stores, dk, where, key, name
        self.bucket, self.directory = stores.bucket, stores.blob_dir
        self.prefix = FIELD + dk + bytes([fno])
        self.counter_key = COUNT + dk + bytes([fno])

    def _require(self, txn) -> None:
        if not self.stores.owner.document_exists(txn, self.dk):
            raise NotFoundError(
                f"{self.where}: document {literal(self.key)} does not exist in bucket {self.stores.bucket!r}, and a "
                "store field exists only once its document does. Insert the document first."
            )

    def read(self, fn):
        with self.stores.owner.kv.read() as txn:
            self._require(txn)
            return fn(Keys(txn, self.prefix, *_counter(txn, self.counter_key)))

    def write(self, fn):
        """``fn(keys)`` in one write of the owning bucket, with the count record kept and the limits checked."""
        opts = self.stores.options

        def body(txn):
            self._require(txn)
            before = _counter(txn, self.counter_key)
            keys = Keys(txn, self.prefix, *before)
            result = fn(keys)
            if keys.count > opts.l2_hard_limit and keys.count > before[0]:
                raise L2LimitError(
                    f'bucket "{self.stores.bucket}.{self.name}" exceeded hard limit ({opts.l2_hard_limit:,} entries). '
                    "Suggestions: archive old entries, split into multiple L1 buckets, or increase the limit in config.",
                    document=self.key, field=self.name, limit=opts.l2_hard_limit,
                )
            txn.put(self.counter_key, COUNTER.pack(keys.count, keys.seq))
            return (result, keys.count), 0

        result, count = self.stores.owner._write(body)
        if count > opts.l2_soft_limit and self.counter_key not in self.stores._warned:
            self.stores._warned.add(self.counter_key)
            log.warning('bucket "%s.%s" of document %s holds %d entries, past the soft limit of %d; '
                        "the hard limit is %d", self.stores.bucket, self.name, literal(self.key), count,
                        opts.l2_soft_limit, opts.l2_hard_limit)
        return result

    # -- which blob field owns an id (b"B" + id), written with the blob's record ----------

    def own(self, keys: Keys, blob_id: str) -> None:
        keys.txn.put(BLOB + blob_id.encode(), self.prefix[1:])

    def disown(self, keys: Keys, blob_id: str) -> None:
        keys.txn.delete(BLOB + blob_id.encode())

    def owned(self, keys: Keys, blob_id: str) -> bool:
        return keys.txn.get(BLOB + blob_id.encode()) is not None


def no_store_field(bucket: str, field: str, fields: dict) -> BadValueError:
    """The refusal of a field bucket ``bucket`` has not, naming its ``fields`` (name -> (number, type))."""
    names = ", ".join(f"{n} ({t})" for n, (_, t) in fields.items()) or "none"
    return BadValueError(f"bucket {bucket!r} has no store field {field!r}; its store fields: {names}")


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


def _counter(txn, key: bytes) -> tuple[int, int]:
    raw = txn.get(key)
    return COUNTER.unpack(raw) if raw is not None else (0, 0)


# -- checking (hoarddb check) ----------------------------------------------------------------

#: Each store type's semantics, as a store field serves them (over a FieldSpace).
TYPES = {"fifo": FifoField, "lifo": LifoField, "heap": HeapField, "hash": KeyedField, "btree": KeyedField,
         "blob": BlobField}

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
        if len(raw) != COUNTER.size:
            problems.append(Problem(kv, f"a store field's count record is {len(raw)} bytes, not {COUNTER.size}",
                                    REBUILD))
            continue
        count, seq = COUNTER.unpack(raw)
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
