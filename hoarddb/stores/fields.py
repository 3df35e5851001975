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

A hash or btree store field may declare store fields of its elements (L3, and deeper up
to ``max_nesting_depth``: ``Friends hashStore { Messages fifoStore }``). Their keys live in
namespaces of their own, one per level, so that a scan of an L2 store never meets them and
the L2 layout is unchanged. The *path* of a store is its document's key, then for each level
the field number and, below L2, the element's key in the keyed store one level up:

    L2 path   encode_key(doc key) + field no                                 (above: b"F", b"C")
    L3 path   encode_key(doc key) + field no + encode_key(elem key) + field no
    Ln path   the L(n-1) path + encode_key(elem key) + field no

    b"N" + level (1 byte, 3..) + Ln path + element key  ->  element (BSON)
    b"K" + level (1 byte, 3..) + Ln path                ->  count u64 BE, last seq u64 BE
    b"B" + blob id                                      ->  b"N" + level + Ln path (an Ln blob's owner)

    e.g. db.User["jane"].Friends["bob"].Messages, Friends field 0, Messages field 0 of Friends:
    4E 03 | 28 "jane" 00 01 | 00 | 28 "bob" 00 01 | 00 | seq u64 BE  ->  the message

Every encoded key ends where its own bytes say (``key_end``), so no path is a prefix of
another's, and every store of an element (at every level below it) sits under
``b"N" + level + its store's path + encode_key(elem key)``: deleting the element deletes
them, level by level, in the transaction that deletes it. A crash halfway through such a
delete leaves nothing halfway: LMDB commits the whole transaction or none of it, so the
element is there with all its stores or gone with all of them.

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

Limits (these are the spec's L2 sub-buckets, held by every store at every level): past
``l2_soft_limit`` elements a warning is logged once per store; a write that would pass
``l2_hard_limit`` is refused. Deleting a document deletes its stores at every level in the
same transaction, and deleting an element of a keyed store the stores below it, unless
they hold more than ``max_cascade_delete`` elements: then the delete is refused, naming the
command that empties them (the TTL sweeper skips such a document).
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
from .keyed import MAX_KEY_BYTES, KeyedField
from .keyspace import COUNTER, Keys, Keyspace
from .lifo import LifoField

log = logging.getLogger("hoarddb.fields")

FIELD, COUNT, BLOB = b"F", b"C", b"B"
#: Elements and count records of the stores below L2 (a level byte follows).
NESTED, NESTED_COUNT = b"N", b"K"
#: The deepest level a key may name (a level byte); the declaration's maximum is lower.
MAX_LEVEL = 255
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
        self.tree = Node.tree(declaration.get("store_fields") or [])
        self.by_no = {node.no: node for node in self.tree.values()}
        self.depth = 1 + max((node.depth for node in self.tree.values()), default=0)
        self.options = options
        self.blob_dir = Path(owner.directory) / "fields"
        self._warned: set[bytes] = set()
        if any(node.has_blobs for node in self.tree.values()):
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

    def store(self, key: Any, field: str, verb: str, path: list = ()):
        """The store that serves ``verb`` on document ``key``'s store ``field`` (and below it,
        ``path``: the ``(element key, field)`` steps down to a deeper store): its type's
        semantics over the store's keyspace (refused, with advice, when the type has no such
        verb or the declaration no such field)."""
        node = self.tree.get(field)
        if node is None:
            raise no_store_field(self.bucket, field, self.fields)
        dk = self.owner.doc_key(key)
        at = Address(self.bucket, key, node, dk)
        for step_key, step_field in path:
            at = at.down(step_key, step_field)
        op = FIELD_VERBS.get(verb)
        if op is None or at.node.type not in op.types:
            raise refusal(self.bucket, at.field_path, at.node.type, verb)
        return TYPES[at.node.type](FieldSpace(self, at), self.options)

    def call(self, key: Any, field: str, verb: str, positional: list, keywords: dict, path: list = ()) -> Any:
        """Run ``verb`` on document ``key``'s store ``field`` (or the deeper store ``path`` names)."""
        store = self.store(key, field, verb, path)
        try:
            return getattr(store, FIELD_VERBS[verb].name)(*positional, **keywords)
        except DAMAGE as exc:
            raise self.owner.damaged(exc) from exc

    # -- cascade -----------------------------------------------------------------------

    def elements_of(self, txn, dk: bytes) -> int:
        """How many elements document ``dk``'s stores hold together, at every level."""
        total = 0
        prefix = COUNT + dk
        for key, value in _scan(txn, prefix):
            if len(key) == len(prefix) + 1:
                total += COUNTER.unpack(value)[0]
        return total + self.below(txn, dk, 2)

    def below(self, txn, path: bytes, level: int) -> int:
        """How many elements the stores under ``path`` hold at the levels below ``level``."""
        total = 0
        for deeper in range(level + 1, self.depth + 1):
            for _key, value in _scan(txn, NESTED_COUNT + bytes([deeper]) + path):
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
                deeper = self.below(txn, dk + bytes([fno]), 2) if self.tree[name].children else 0
                if count or deeper:
                    also = f" and {deeper:,} in its elements' stores" if deeper else ""
                    held.append((count + deeper, f"{name} ({count:,}{also}, {ftype}): {doc}.{name}.{_EMPTYING[ftype]}"))
            held.sort(key=lambda c: -c[0])
            raise TooManyElementsError(
                f"document {literal(doc_id)} of bucket {self.bucket!r} owns {n:,} store-field elements, more than one "
                f"delete removes (max_cascade_delete = {limit:,}). Empty its store fields first, repeating until "
                f"they are small — {'; '.join(text for _, text in held)} — then delete the document; "
                "or raise max_cascade_delete.",
                document=doc_id, elements=n,
            )

    def delete_all(self, txn, dk: bytes) -> list[str]:
        """Delete every element of document ``dk``'s stores in ``txn``, at every level; the blob files to unlink after commit."""
        files = []
        for ns in (FIELD, COUNT):
            prefix = ns + dk
            doomed = list(_scan(txn, prefix))
            for key, value in doomed:
                if ns == FIELD and len(key) > len(prefix) and self._type_of(key[len(prefix)]) == "blob":
                    blob_id = decode_key(key[len(prefix) + 1:])
                    txn.delete(BLOB + blob_id.encode())
                    files.append(blob_id)
                txn.delete(key)
        return files + self.delete_below(txn, dk, 2)

    def delete_below(self, txn, path: bytes, level: int) -> list[str]:
        """Delete, in ``txn``, every element and count record of the stores under ``path`` at the
        levels below ``level``; the blob files to unlink after commit."""
        files = []
        for deeper in range(level + 1, self.depth + 1):
            for ns in (NESTED, NESTED_COUNT):
                doomed = [bytes(k) for k, _ in _scan(txn, ns + bytes([deeper]) + path)]
                for key in doomed:
                    if ns == NESTED:
                        node, pos = self.node_at(key[2:], deeper)
                        if node is not None and node.type == "blob":
                            blob_id = decode_key(key[2 + pos:])
                            txn.delete(BLOB + blob_id.encode())
                            files.append(blob_id)
                    txn.delete(key)
        return files

    def node_at(self, path: bytes, level: int) -> tuple["Node | None", int]:
        """The declared store a level-``level`` path (with its element key after it) names,
        and where the element key starts; None when the declaration has no such store."""
        node, pos, _parent = node_at(self.by_no, path, level)
        return node, pos

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


class Node:
    """Node is one declared store field: its name, number among its siblings, type, and the
    store fields its elements own (a hash or btree field's, by name and by number)."""

    __slots__ = ("name", "no", "type", "children", "by_no", "depth", "has_blobs")

    def __init__(self, entry: Mapping, no: int):
        self.name, self.no, self.type = entry["name"], no, entry["type"]
        self.children = Node.tree(entry.get("store_fields") or [])
        self.by_no = {child.no: child for child in self.children.values()}
        self.depth = 1 + max((child.depth for child in self.children.values()), default=0)
        self.has_blobs = self.type == "blob" or any(child.has_blobs for child in self.children.values())

    @staticmethod
    def tree(entries) -> dict[str, "Node"]:
        return {entry["name"]: Node(entry, i) for i, entry in enumerate(entries)}


class Address:
    """Address is where one store sits in a bucket's tree: its level (2: a document's store
    field), its path and keys (see the module's layout), and its names: ``where`` as code
    writes it (``User["jane"].Friends["bob"].Messages``), ``dotted`` as the guide does
    (``User.jane.Friends.bob.Messages``), ``field_path`` the declared field
    (``Friends[key].Messages``), and ``needs``: the elements that must exist above it."""

    __slots__ = ("bucket", "key", "node", "dk", "level", "path", "prefix", "counter_key", "where", "dotted",
                 "field_path", "fields", "needs")

    def __init__(self, bucket: str, key: Any, node: Node, dk: bytes):
        self.bucket, self.key, self.node, self.dk, self.level = bucket, key, node, dk, 2
        self.path = dk + bytes([node.no])
        self.prefix, self.counter_key = FIELD + self.path, COUNT + self.path
        self.where = f"{bucket}[{_code(key)}].{node.name}"
        self.dotted = f"{bucket}.{_dot(key)}.{node.name}"
        self.field_path, self.fields = node.name, f"{bucket}.{node.name}"
        self.needs: list[tuple[bytes, str, Any]] = []  # (element's key in the env, its store's where, its key)

    def down(self, key: Any, field: str) -> "Address":
        """The store ``field`` of this (keyed) store's element ``key``: one level deeper."""
        node = self.node
        child = node.children.get(field) if isinstance(field, str) else None
        if child is None:
            if node.type not in KEYED:
                raise BadValueError(f"{self.where} is a {node.type} store: its elements own no stores, so "
                                    f"{self.where}[{_code(key)}].{field} names nothing; only the elements of a hash "
                                    "or btree store field own stores")
            names = ", ".join(f"{n} ({c.type})" for n, c in node.children.items()) or "none"
            raise BadValueError(f"the elements of {self.where} ({node.type} store field {self.fields}) have no store "
                                f"field {field!r}; their store fields: {names}")
        ek = element_key(key, self.where, len(self.prefix) + 2)
        out = Address.__new__(Address)
        out.bucket, out.key, out.node, out.dk, out.level = self.bucket, self.key, child, self.dk, self.level + 1
        if out.level > MAX_LEVEL:
            raise BadValueError(f"{self.where}: a store {out.level} levels deep is past any declaration")
        out.path = self.path + ek + bytes([child.no])
        out.prefix = NESTED + bytes([out.level]) + out.path
        out.counter_key = NESTED_COUNT + bytes([out.level]) + out.path
        out.where = f"{self.where}[{_code(key)}].{field}"
        out.dotted = f"{self.dotted}.{_dot(key)}.{field}"
        out.field_path = f"{self.field_path}[key].{field}"
        out.fields = f"{self.fields}.{field}"
        out.needs = self.needs + [(self.prefix + ek, self.where, key)]
        return out


class FieldSpace(Keyspace):
    """FieldSpace is one store of a document's tree (its store field, or a deeper one), as
    the keyspace its store's verbs run over: reads and writes in the bucket's environment
    that first check the document (and each element above the store) exists, and writes
    that keep its count record, hold it to the L2 limits and delete an element's own
    stores with it."""

    def __init__(self, stores: FieldStores, at: Address):
        self.stores, self.at, self.dk, self.key, self.name = stores, at, at.dk, at.key, at.node.name
        self.where, self.dotted = at.where, at.dotted
        self.bucket, self.directory = stores.bucket, stores.blob_dir
        self.prefix, self.counter_key = at.prefix, at.counter_key
        self._unlink: list[str] = []

    def _require(self, txn) -> None:
        if not self.stores.owner.document_exists(txn, self.dk):
            raise NotFoundError(
                f"{self.where}: document {literal(self.key)} does not exist in bucket {self.stores.bucket!r}, and a "
                "store field exists only once its document does. Insert the document first."
            )
        for element, where, key in self.at.needs:
            if txn.get(element) is None:
                raise NotFoundError(
                    f"{self.where}: element {literal(key)} does not exist in {where}, and its store fields exist "
                    f"only once it does. Put it first: db.{where}.put({literal(key)}, {{...}})"
                )

    def read(self, fn):
        with self.stores.owner.kv.read() as txn:
            self._require(txn)
            return fn(Keys(txn, self.prefix, *_counter(txn, self.counter_key)))

    def write(self, fn):
        """``fn(keys)`` in one write of the owning bucket, with the count record kept and the limits checked."""
        opts = self.stores.options
        self._unlink = []

        def body(txn):
            self._require(txn)
            before = _counter(txn, self.counter_key)
            keys = Keys(txn, self.prefix, *before)
            result = fn(keys)
            if keys.count > opts.l2_hard_limit and keys.count > before[0]:
                named = f"{self.stores.bucket}.{self.name}" if self.at.level == 2 else self.dotted
                raise L2LimitError(
                    f'bucket "{named}" exceeded hard limit ({opts.l2_hard_limit:,} entries). '
                    "Suggestions: archive old entries, split into multiple L1 buckets, or increase the limit in config.",
                    document=self.key, field=self.name, limit=opts.l2_hard_limit, store=self.dotted,
                )
            txn.put(self.counter_key, COUNTER.pack(keys.count, keys.seq))
            return (result, keys.count), 0

        try:
            result, count = self.stores.owner._write(body)
        except BaseException:
            self._unlink = []
            raise
        if self._unlink:
            self.stores.unlink(self._unlink)
            self._unlink = []
        if count > opts.l2_soft_limit and self.counter_key not in self.stores._warned:
            self.stores._warned.add(self.counter_key)
            log.warning('bucket "%s" (%s) holds %d entries, past the soft limit of %d; the hard limit is %d',
                        self.dotted, self.where, count, opts.l2_soft_limit, opts.l2_hard_limit)
        return result

    # -- an element's own stores (a keyed store whose elements declare store fields) -------

    def owns_stores(self) -> bool:
        return bool(self.at.node.children)

    def drop_element(self, keys: Keys, ek: bytes, key: Any) -> None:
        """Delete the stores element ``ek`` owns, at every level below, in ``keys``' transaction;
        refused past max_cascade_delete, naming the command that empties each."""
        if not self.at.node.children:
            return
        path = self.at.path + ek
        limit = self.stores.options.max_cascade_delete
        n = self.stores.below(keys.txn, path, self.at.level)
        if n > limit:
            element = f"db.{self.where}[{literal(key)}]"
            held = []
            for name, child in self.at.node.children.items():
                count = _counter(keys.txn, NESTED_COUNT + bytes([self.at.level + 1]) + path + bytes([child.no]))[0]
                if count:
                    held.append(f"{name} ({count:,}, {child.type}): {element}.{name}.{_EMPTYING[child.type]}")
            raise TooManyElementsError(
                f"element {literal(key)} of {self.where} owns {n:,} store-field elements, more than one delete "
                f"removes (max_cascade_delete = {limit:,}). Empty its store fields first, repeating until they "
                f"are small — {'; '.join(held) or 'its deeper stores'} — then delete the element; or raise "
                "max_cascade_delete.", document=self.key, elements=n, store=f"{self.dotted}.{_dot(key)}",
            )
        self._unlink.extend(self.stores.delete_below(keys.txn, path, self.at.level))

    def element_stores(self, keys: Keys, ek: bytes) -> list[dict]:
        """``[{name, type, length}]`` of the stores element ``ek`` owns (for the shell's view of it)."""
        path = self.at.path + ek
        level = bytes([self.at.level + 1])
        return [{"name": n, "type": c.type,
                 "length": _counter(keys.txn, NESTED_COUNT + level + path + bytes([c.no]))[0]}
                for n, c in self.at.node.children.items()]

    # -- which blob field owns an id (b"B" + id), written with the blob's record ----------

    def own(self, keys: Keys, blob_id: str) -> None:
        keys.txn.put(BLOB + blob_id.encode(), self.prefix[1:] if self.at.level == 2 else self.prefix)

    def disown(self, keys: Keys, blob_id: str) -> None:
        keys.txn.delete(BLOB + blob_id.encode())

    def owned(self, keys: Keys, blob_id: str) -> bool:
        return keys.txn.get(BLOB + blob_id.encode()) is not None


def node_at(by_no: dict, path: bytes, level: int) -> tuple["Node | None", int, int]:
    """The declared store a level-``level`` path names (``by_no``: the bucket's store fields by
    number), where the element key after it starts, and where the path of the element that
    owns the store ends (its parent element's key in the store above); None when the
    declaration has no such store or the path does not parse."""
    try:
        pos = key_end(path, 0)
        node = by_no.get(path[pos])
        pos += 1
        parent = pos
        for _ in range(level - 2):
            if node is None:
                return None, pos, parent
            parent = pos = key_end(path, pos)
            node = node.by_no.get(path[pos])
            pos += 1
        return node, pos, parent
    except (BadValueError, IndexError):
        return None, len(path), len(path)


#: What the keys of a store below an element must leave for its own element keys: a blob's id
#: (39 bytes encoded), a heap's priority and sequence number, a fifo's sequence number.
ELEMENT_ROOM = 48


def element_key(key: Any, where: str, prefix_len: int) -> bytes:
    """The encoded key of an element of the keyed store ``where``, as the owner of stores
    (``prefix_len``: what its stores' keys hold before it), refused when no key can be it."""
    if key is None or isinstance(key, (list, dict)):
        raise BadValueError(f"{where}: a key is a string, number, date, ObjectId or UUID, got {key!r:.60}")
    ek = encode_key(key)
    if len(ek) + prefix_len > MAX_KEY_BYTES - ELEMENT_ROOM:
        raise BadValueError(f"{where}: key {literal(key):.60} is too long to own stores ({len(ek)} bytes once "
                            f"encoded, after {prefix_len} bytes of the keys above it; at most "
                            f"{MAX_KEY_BYTES - ELEMENT_ROOM} in all): use shorter keys at this level")
    return ek


def _code(key: Any) -> str:
    """A key as code writes it in an address: ``"jane"``, ``42``."""
    return f'"{key}"' if isinstance(key, str) else literal(key)


def _dot(key: Any) -> str:
    """A key as a dotted address writes it: ``jane``, ``42``."""
    return key if isinstance(key, str) else literal(key)


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
NAMESPACES = FIELD + COUNT + BLOB + NESTED + NESTED_COUNT


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
    _check_nested(txn, declaration, blob_dir, owned, problems)
    for key, raw in _scan(txn, BLOB):
        blob_id = bytes(key[1:]).decode("utf-8", "replace")
        owner = bytes(raw) if bytes(raw[:1]) == NESTED else FIELD + bytes(raw)  # an Ln blob's owner: its whole prefix
        if txn.get(owner + encode_key(blob_id)) is None:
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


def _check_nested(txn, declaration: Mapping, blob_dir: Path, owned: set, problems: list) -> None:
    """The stores below L2: each element belongs to a declared store of an element that
    exists, and each store's count record holds its number of elements; a blob's file is
    owned (its bytes are checked by a read, as an L2 blob's are by the walk above)."""
    kv = "kv/data.mdb"
    by_no = {node.no: node for node in Node.tree(declaration.get("store_fields") or []).values()}
    for level in range(3, MAX_LEVEL + 1):
        if not any(True for _ in _scan(txn, NESTED + bytes([level]))) and \
                not any(True for _ in _scan(txn, NESTED_COUNT + bytes([level]))):
            break
        counted: dict[bytes, int] = {}
        for key, raw in _scan(txn, NESTED + bytes([level])):
            key = bytes(key)
            node, pos, parent = node_at(by_no, key[2:], level)
            if node is None:
                problems.append(Problem(kv, f"an L{level} store-field element no declared store holds: {key[:40]!r}",
                                        REBUILD))
                continue
            path = key[2:2 + pos]
            counted[path] = counted.get(path, 0) + 1
            above = (FIELD if level == 3 else NESTED + bytes([level - 1])) + key[2:2 + parent]
            owner_key = above + key[2 + parent:2 + pos - 1]
            if counted[path] == 1 and txn.get(owner_key) is None:
                problems.append(Problem(kv, f"an L{level} store {node.name} holds elements, and the element that owns "
                                            f"it does not exist: {key[:40]!r}", REBUILD))
            if node.type == "blob":
                try:
                    owned.add(decode_key(key[2 + pos:]))
                except BadValueError:
                    pass
        for key, raw in _scan(txn, NESTED_COUNT + bytes([level])):
            path = bytes(key[2:])
            elements = counted.pop(path, 0)
            if len(raw) != COUNTER.size or COUNTER.unpack(raw)[0] != elements:
                problems.append(Problem(kv, f"an L{level} store's count record does not hold its {elements} elements: "
                                            f"{bytes(key)[:40]!r}", REBUILD))
        for path, elements in counted.items():
            problems.append(Problem(kv, f"an L{level} store holds {elements} elements and has no count record: "
                                        f"{path[:40]!r}", REBUILD))


def _shown(dk: bytes) -> str:
    try:
        return literal(decode_key(dk))
    except Exception:
        return repr(bytes(dk)[:40])
