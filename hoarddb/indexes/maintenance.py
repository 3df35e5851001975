"""Index maintenance inside the writing transaction: the entries a document has, and the unique rule.

Entries live in the bucket's LMDB environment beside the documents:

    unique index:   b"I" + id + encode_key(v1) + encode_key(v2)...              -> encode_key(_id_)
    other index:    b"I" + id + encode_key(v1) + ... + encode_key(_id_)         -> b""

So one entry costs the encoded values plus the encoded document key plus 2 bytes (as
key and value; LMDB adds an 8-byte node header), and its key is at most MAX_ENTRY_KEY
bytes. A missing field is indexed as null (a
sparse index has no entry for a document lacking all of its fields, and a partial one
none for a document its partialFilterExpression does not match). A field holding a non-empty array is indexed
once per distinct element, never as the whole array (so only each element is bounded,
not the array); an empty array is one entry whose value is ``[]``, which is also the
entry of an element ``[]``. Every document ``find`` matches by an equality therefore has
an entry the planner looks up (an array value: its own entry or its first element's, see
planner.lookups). A compound index takes each element of its one array field with the
other fields' values, and refuses a document with arrays in two of its fields:

    {_id_: "o1", C: "c1", Tags: ["x", "y", "x"]}  ->  ("c1", "x", "o1"), ("c1", "y", "o1")
    {_id_: "o2", C: "c1", Tags: []}               ->  ("c1", [], "o2")

Entries are changed in the same LMDB transaction as the document, so a crash leaves
both or neither. A unique entry holds the key of the document that owns the value; the
entry is removed only by its holder. A ``conflicted`` unique index (one value in two
documents, found by a load or a rebuild) also records each other document holding a
value as a *claim*:

    claim:          b"I" + id + encode_key(v1)... + encode_key(_id_)            -> b""

(the entry's key followed by the claimant's key; no entry key is another's prefix, as
keys are self-delimiting). When the holder leaves the value, the first claimant becomes
the holder, so the index keeps refusing a third document for as long as any document
holds the value. Searches never read a conflicted index, and the rebuild at the next
open writes every entry and claim again.
"""

from __future__ import annotations

import datetime
from itertools import product
from typing import Any, Iterable

from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId

from ..errors import BadValueError, DuplicateKeyError, IndexNotReadyError
from ..values.keys import decode_key, encode_key, key_end
from ..values.literal import literal
from ..values.filter import compile_filter
from .declaration import FORMAT as FORMAT_PLAIN, NEWEST_FORMAT, format_for
from .timerange import TimeRangeIndex, now_ms

PREFIX = b"I"
MAX_ENTRY_KEY = 500  # LMDB keys are at most 511 bytes
LMDB_MAX_KEY = 511
#: What a field holds that is indexed by its elements (BSON stores a tuple as an array too).
ARRAY_TYPES = (list, tuple)
#: The common types of a field value that is not an array: the single-field fast path
#: knows them by their type alone (any other is asked ``isinstance(v, ARRAY_TYPES)``).
NOT_ARRAYS = frozenset({str, int, float, bool, type(None), ObjectId, datetime.datetime, Int64, Decimal128, dict})
#: The value of an empty array's one entry: ``[]``, which is also an element ``[]``'s.
EMPTY_ARRAY = encode_key([])


_INVERT = bytes(255 - i for i in range(256))


def descending(encoded: bytes) -> bytes:
    """The encoding of a value in a descending field: every bit inverted. Encodings are
    self-delimiting (none is the start of another), so inverted ones sort in exactly the
    reverse order, and stay self-delimiting."""
    return encoded.translate(_INVERT)


def encode_descending(value: Any) -> bytes:
    return encode_key(value).translate(_INVERT)


def elements(array: list | tuple, encode=encode_key) -> list[tuple[bytes, Any]]:
    """``(encoded element, element)`` for each distinct element of an array, in order; for an
    empty array the one ``(encoded [], [])``."""
    if not array:
        return [(encode([]), [])]
    seen: set = set()
    out = []
    for element in array:
        ek = encode(element)
        if ek not in seen:
            seen.add(ek)
            out.append((ek, element))
    return out


class Index:
    """Index is one declared index of a bucket, with the code that computes its entries."""

    def __init__(self, decl: dict):
        self.decl = decl
        self.id: int = decl["id"]
        self.name: str = decl["name"]
        self.fields: list[str] = list(decl["fields"])
        #: The field of a single-field index (None for a compound one): its entries are made
        #: without the general path when the value is not an array (see entries).
        self.single: str | None = self.fields[0] if len(self.fields) == 1 else None
        #: Whether each field descends (``desc``), and the function that encodes its values:
        #: hoarddb.values.keys's order-preserving bytes, inverted for a descending field.
        desc = decl.get("desc") or ()
        self.descending: tuple = tuple(f in desc for f in self.fields)
        self.encoders: tuple = tuple(encode_descending if d else encode_key for d in self.descending)
        self.unique: bool = bool(decl.get("unique"))
        self.ttl = decl.get("expire_after_seconds")
        self.prefix = PREFIX + bytes([self.id])
        #: A sparse index leaves out a document lacking every one of its fields; a partial one,
        #: a document its partialFilterExpression does not match (see :meth:`covers`).
        self.sparse: bool = bool(decl.get("sparse"))
        self.partial: dict | None = decl.get("partialFilterExpression")
        self.filtered: bool = self.sparse or self.partial is not None
        fmt = decl.get("format", format_for(decl))
        if fmt > NEWEST_FORMAT:
            self.state = "unreadable"
        elif fmt < format_for(decl):
            self.state = "building"
        else:
            self.state = decl.get("state", "ready")
        #: Whether claims (see the module's docstring) may exist: only a unique index that a
        #: load or a rebuild found conflicted pays the extra lookup when a holder leaves.
        self.claims = self.unique and self.state == "conflicted"
        #: While the index is ``building`` (hoarddb.indexes.builder): None until its old
        #: entries are gone, then the encoded key of the last document whose entries the
        #: rebuild wrote. Writes keep the entries of documents up to it, and leave the
        #: others to the rebuild (:meth:`kept`). ``progress`` is (documents done, of).
        self.frontier: bytes | None = None
        self.progress: tuple[int, int] = (0, 0)
        self._partial_match = compile_filter(self.partial) if self.partial is not None and self.maintained else None

    def covers(self, doc) -> bool:
        """Whether a document has entries in this index: every one, unless the index is sparse
        (a document holding none of its fields, not even as null, has none) or partial (a
        document its expression does not match has none)."""
        if self.sparse:
            return any(f in doc for f in self.fields)
        if self._partial_match is not None:
            return self._partial_match(doc)
        return True

    @property
    def maintained(self) -> bool:
        return self.state != "unreadable"

    def kept(self, doc_key: bytes) -> bool:
        """Whether a write keeps this index's entries of the document ``doc_key``: always, but
        while the index is building only for the documents the rebuild has passed."""
        if self.state != "building":
            return True
        return self.frontier is not None and doc_key <= self.frontier

    def value_tuples(self, doc: dict, bucket: str) -> list[tuple[bytes, tuple]]:
        """``(encoded values, values)`` for each entry a document has in this index (see the module's docstring)."""
        if self.filtered and not self.covers(doc):
            return []
        if len(self.fields) == 1:  # the common case: one field, not an array, one entry
            v = doc.get(self.fields[0])
            if type(v) in NOT_ARRAYS or not isinstance(v, ARRAY_TYPES):
                return [(self.encoders[0](v), (v,))]
            return [(ek, (element,)) for ek, element in elements(v, self.encoders[0])]
        values = [doc.get(f) for f in self.fields]
        if not any(isinstance(v, ARRAY_TYPES) for v in values):  # one entry
            return [(b"".join([enc(v) for enc, v in zip(self.encoders, values)]), tuple(values))]
        per_field = []
        arrays = 0
        for enc, v in zip(self.encoders, values):
            if isinstance(v, ARRAY_TYPES):
                arrays += 1
                per_field.append(elements(v, enc))
            else:
                per_field.append([(enc(v), v)])
        if arrays > 1:
            raise BadValueError(
                f"index {self.name!r} on bucket {bucket!r} cannot index a document whose fields "
                f"{', '.join(self.fields)} hold arrays in more than one field; keep at most one of them an array"
            )
        out = []
        for combo in product(*per_field):
            out.append((b"".join(ek for ek, _ in combo), tuple(v for _, v in combo)))
        return out

    def entry(self, encoded_values: bytes, doc_key: bytes) -> tuple[bytes, bytes]:
        """The LMDB key and value of one entry (``doc_key`` is the encoded ``_id_``)."""
        if self.unique:
            key, value = self.prefix + encoded_values, doc_key
        else:
            key, value = self.prefix + encoded_values + doc_key, b""
        if len(key) > MAX_ENTRY_KEY:
            raise self._too_long(key)
        return key, value

    def entries(self, doc: dict, doc_key: bytes, bucket: str) -> list[tuple[bytes, bytes, tuple]]:
        """``(key, value, values)`` of each entry a document has in this index: :meth:`entry`
        of each of :meth:`value_tuples`, and for a single field that holds no array (nearly
        every entry) the same made in one step."""
        if self.filtered and not self.covers(doc):
            return []
        if self.single is not None:
            v = doc.get(self.single)
            if type(v) in NOT_ARRAYS or not isinstance(v, ARRAY_TYPES):
                return [(*self.entry(self.encoders[0](v), doc_key), (v,))]
        return [(*self.entry(encoded, doc_key), values) for encoded, values in self.value_tuples(doc, bucket)]

    def _too_long(self, key: bytes) -> BadValueError:
        return BadValueError(
            f"the value of {', '.join(self.fields)} is too long to index in {self.name!r} "
            f"({len(key)} bytes once encoded; at most {MAX_ENTRY_KEY}, for each element of an array)"
        )

    def doc_key_of(self, key: bytes, value: bytes) -> bytes:
        """The encoded ``_id_`` an entry points to."""
        if self.unique:
            return bytes(value)
        return bytes(key[self.values_end(key):])

    def values_end(self, key: bytes, fields: int | None = None) -> int:
        """Where the encoded values of the first ``fields`` fields (all by default) end in an
        entry's ``key`` (BadValueError if they do not parse)."""
        pos = len(self.prefix)
        for down in self.descending[:fields]:
            pos = pos + key_end(descending(bytes(key[pos:])), 0) if down else key_end(key, pos)
        return pos

    def decoded_values(self, encoded: bytes) -> list:
        """The values an entry's encoded values (after the prefix) hold, for messages."""
        out = []
        pos = 0
        for down in self.descending:
            part = descending(encoded[pos:]) if down else encoded[pos:]
            end = key_end(part, 0)
            out.append(decode_key(part[:end]))
            pos += end
        return out


class IndexSet:
    """IndexSet is every index of one bucket, kept in step with its documents."""

    def __init__(self, declarations: Iterable[dict], bucket: str):
        self.bucket = bucket
        declarations = list(declarations)
        self.indexes = [Index(d) for d in declarations if "timeRange" not in d]
        #: The time-range indexes (hoarddb.indexes.timerange), kept apart: searches never read them.
        self.timeranges = [TimeRangeIndex(d, _rest(d)) for d in declarations if "timeRange" in d]
        #: Every index, in declaration order (what the catalog persists).
        self.all = sorted(self.indexes + self.timeranges, key=lambda ix: ix.id) if self.timeranges else self.indexes
        #: Whether a write has index entries to keep (plain or time-range).
        self.writes = bool(self.indexes or self.timeranges)
        #: The indexes writes keep: all but unreadable ones (a state set only when an index is
        #: read from its declaration, never changed after).
        self.maintained = [ix for ix in self.indexes if ix.maintained]

    def __bool__(self) -> bool:
        return bool(self.indexes)

    def check_writable(self) -> None:
        """Refuse every write while a unique index is unreadable (declared by a newer hoardDB)."""
        for ix in self.all:
            if ix.unique and ix.state == "unreadable":
                raise IndexNotReadyError(
                    f"bucket {self.bucket!r} refuses writes: its unique index {ix.name!r} was declared by a newer "
                    "version of hoardDB and this version cannot keep its rule. Run the newer version again.",
                    index=ix.name, state="unreadable",
                )

    def entries(self, ix: Index, doc: dict | None, doc_key: bytes) -> dict[bytes, tuple[bytes, tuple]]:
        if doc is None:
            return {}
        return {key: (value, values) for key, value, values in ix.entries(doc, doc_key, self.bucket)}

    def apply(self, txn, doc_key: bytes, old: dict | None, new: dict | None, *, where: str = "",
              conflicts: dict | None = None) -> None:
        """Move a document's entries from ``old`` to ``new`` (None: absent) in ``txn``.

        Raises DuplicateKeyError, with the spec's message, when ``new`` would take a unique
        value another document holds; the caller's transaction is then aborted whole.
        """
        if self.timeranges:
            now = now_ms()
            for tr in self.timeranges:
                if tr.maintained:
                    tr.apply(txn, doc_key, old, new, now, self.bucket, where, conflicts)
        if new is None:
            self.remove(txn, doc_key, old)
            return
        if old is None:  # an insert: every entry is new (the common case, without the set arithmetic)
            for ix in self.maintained:
                if ix.state == "building" and not ix.kept(doc_key):
                    continue
                for key, value, values in ix.entries(new, doc_key, self.bucket):
                    self._add(txn, ix, key, value, values, doc_key, where, conflicts)
            return
        for ix in self.maintained:
            if ix.state == "building" and not ix.kept(doc_key):
                continue
            before = self.entries(ix, old, doc_key)
            after = self.entries(ix, new, doc_key)
            for key in before.keys() - after.keys():
                if ix.unique:
                    self._leave(txn, ix, key, doc_key)
                else:
                    txn.delete(key)
            for key in after.keys() - before.keys():
                value, values = after[key]
                self._add(txn, ix, key, value, values, doc_key, where, conflicts)

    def _add(self, txn, ix: Index, key: bytes, value: bytes, values: tuple, doc_key: bytes, where: str,
             conflicts: dict | None) -> None:
        """Put one new entry; a unique value another document holds is refused, or (with
        ``conflicts``, a load) noted while the holder keeps the entry."""
        if ix.unique:
            holder = txn.get(key)
            if holder is not None and bytes(holder) != doc_key:
                if conflicts is None:
                    raise self.duplicate(ix, values, decode_key(holder), where)
                conflicts.setdefault(ix.name, {
                    "values": dict(zip(ix.fields, values)),
                    "documents": [decode_key(holder), decode_key(doc_key)],
                })
                self._claim(txn, ix, key, doc_key)
                return  # the holder keeps the entry; the index becomes conflicted
        txn.put(key, value)

    @staticmethod
    def _claim(txn, ix: Index, key: bytes, doc_key: bytes) -> None:
        """Record that ``doc_key`` holds the value of entry ``key`` too (a conflicted index)."""
        claim = key + doc_key
        if len(claim) <= LMDB_MAX_KEY:  # longer: not recorded; the rebuild at open finds it again
            txn.put(claim, b"")
        ix.claims = True

    @staticmethod
    def _leave(txn, ix: Index, key: bytes, doc_key: bytes) -> None:
        """``doc_key`` no longer holds the value of the unique entry ``key``: remove its entry,
        or its claim; a holder leaving hands the entry to the first claimant, if any."""
        holder = txn.get(key)
        if holder is None:
            return
        if bytes(holder) != doc_key:  # a conflicted index: the entry is the other holder's
            if ix.claims:
                txn.delete(key + doc_key)
            return
        txn.delete(key)
        if ix.claims:
            cursor = txn.cursor()
            if cursor.set_range(key):
                claim = bytes(cursor.key())
                if claim.startswith(key) and len(claim) > len(key):
                    txn.put(key, claim[len(key):])
                    txn.delete(claim)

    def remove(self, txn, doc_key: bytes, doc: dict | None) -> None:
        """Delete a document's entries (the hot path of delete and TTL expiry)."""
        if doc is None:
            return
        for ix in self.maintained:
            if ix.state == "building" and not ix.kept(doc_key):
                continue
            for encoded, _values in ix.value_tuples(doc, self.bucket):
                if ix.unique:
                    self._leave(txn, ix, ix.prefix + encoded, doc_key)
                else:
                    txn.delete(ix.prefix + encoded + doc_key)

    def duplicate(self, ix: Index, values: tuple, holder: Any, where: str = "") -> DuplicateKeyError:
        shown = ", ".join(f"{f} = {literal(v)}" for f, v in zip(ix.fields, values))
        message = (
            f'Duplicate value for unique index "{ix.name}" on bucket "{self.bucket}": {shown} '
            f"is already used by document {literal(holder)}. Change the value, update that document instead, "
            "or delete it first."
        )
        return DuplicateKeyError(
            message + where, index=ix.name, values=dict(zip(ix.fields, values)), holder=holder,
        )

    def rebuild(self, txn, ix: Index, documents: Iterable[tuple[bytes, dict]]) -> dict | None:
        """Write ``ix``'s entries again from every document; return the first conflict found, if any."""
        while self.clear(txn, ix) == 10_000:
            pass
        conflict = self.build(txn, ix, documents)
        if conflict is None:
            ix.claims = False
        return conflict

    @staticmethod
    def clear(txn, ix: Index, batch: int = 10_000) -> int:
        """Delete up to ``batch`` of ``ix``'s entries (and claims); how many."""
        cursor = txn.cursor()
        doomed = []
        if cursor.set_range(ix.prefix):
            for key in cursor.iternext(values=False):
                if not key.startswith(ix.prefix) or len(doomed) >= batch:
                    break
                doomed.append(bytes(key))
        for key in doomed:
            txn.delete(key)
        return len(doomed)

    def build(self, txn, ix: Index, documents: Iterable[tuple[bytes, dict]]) -> dict | None:
        """Write the entries of ``documents`` in ``ix`` (whose old entries are gone); the first
        conflict found, if any (then the other holder's claim is recorded)."""
        conflict = None
        for doc_key, doc in documents:
            for key, (value, values) in self.entries(ix, doc, doc_key).items():
                if ix.unique:
                    holder = txn.get(key)
                    if holder is not None and bytes(holder) != doc_key:
                        if conflict is None:
                            conflict = {
                                "values": dict(zip(ix.fields, values)),
                                "documents": [decode_key(holder), decode_key(doc_key)],
                            }
                        self._claim(txn, ix, key, doc_key)
                        continue
                txn.put(key, value)
        return conflict


def _rest(decl: dict) -> Index | None:
    """The plain index over a time-range index's fields after the timestamp, whose entries'
    encodings the time-range index reuses (None for a single-field one)."""
    if len(decl["fields"]) < 2:
        return None
    return Index({"id": decl["id"], "name": decl["name"], "fields": decl["fields"][1:],
                  "unique": bool(decl.get("unique")), "format": FORMAT_PLAIN})
