"""The btree store type: documents in the order of a sort key, with range, first, last and paging.

An entry's sort key is the field the bucket declares with ``key:`` at creation
(``create_bucket("Leaderboard", type="btree", key="Score")``); without a declared key it
is the document's ``_id_`` when it has one, else its first field. In the bucket's LMDB
environment:

    b"D" + encode_key(sort key) + seq (uint64 big-endian)  ->  BSON of the document

``encode_key`` sorts as values sort (numbers of every kind in one numeric order,
negative and fractional floats included; strings by their UTF-8 bytes; a fixed order
between kinds), and ``seq`` — a counter kept in ``b"Mseq"`` — lets entries with equal
sort keys coexist, in insertion order (a leaderboard has ties).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import BadValueError, HoardError, MissingKeyError, NotADocumentError
from ..values.codec import DECODE_ERRORS, decode
from ..values.filter import compile_filter
from ..values.keys import encode_key
from ..values.literal import literal
from ..values.order import NUMBER, is_nan, type_rank
from . import resumable
from .base import REBUILD, KVStore, Problem, Reply, answer_too_large, check_limit, encode_document, scan
from .fields import NAMESPACES as FIELD_NAMESPACES
from .fields import FieldStores, check_fields

SEQ_KEY = b"Mseq"
RANGE_OPERATORS = ("$gt", "$gte", "$lt", "$lte", "$eq", "$prefix")
MAX_KEY_BYTES = 480


class BTreeStore(KVStore):
    """BTreeStore keeps documents sorted by their sort key; equal keys keep insertion order."""

    type_name = "btree"
    bucket_options = {"key": "the field whose value sorts the entries (default: _id_, else the first field)"}
    NAMESPACES = KVStore.NAMESPACES + FIELD_NAMESPACES

    @classmethod
    def check_kv(cls, txn, declaration, directory, problems) -> None:
        """Every entry decodes and sits under its own sort key, with a sequence number the
        counter (``b"Mseq"``) has passed; the count is theirs; the store fields check."""
        super().check_kv(txn, declaration, directory, problems)
        key_field = (declaration.get("options") or {}).get("key")
        raw = txn.get(SEQ_KEY)
        last = int.from_bytes(raw, "big") if raw else 0
        count = 0
        for key, raw in scan(txn, cls.DOC):
            count += 1
            shown = repr(bytes(key[1:])[:40])
            try:
                doc = decode(raw)
            except DECODE_ERRORS as exc:
                problems.append(Problem(cls.KV_FILE, f"the entry under key {shown} does not decode ({exc})"))
                continue
            try:
                value = _sort_value(doc, key_field, declaration.get("name", ""))
                if len(key) < 10 or encode_key(value) != key[1:-8]:
                    problems.append(Problem(cls.KV_FILE, f"the entry with sort key {literal(value)} is stored under "
                                                         f"the key of another, {shown}"))
            except HoardError as exc:
                problems.append(Problem(cls.KV_FILE, f"the entry under key {shown} has no sort key: {exc.message}"))
            if int.from_bytes(key[-8:], "big") > last:
                problems.append(Problem(cls.KV_FILE, f"the entry under key {shown} has a sequence number past the "
                                                     f"counter's ({last})", REBUILD))
        cls.check_count(txn, count, problems)

        def document_exists(dk: bytes) -> bool:
            cursor = txn.cursor()
            return cursor.set_range(cls.DOC + dk) and _is_entry_of(cursor.key(), cls.DOC + dk)

        check_fields(txn, declaration, directory, document_exists, problems)

    @classmethod
    def validate_options(cls, bucket_options):
        key = bucket_options.get("key")
        if key is not None and (not isinstance(key, str) or not key or key.startswith("$")):
            raise BadValueError(f"a btree bucket's key is a field name such as \"Score\", got {key!r}")
        return dict(bucket_options)

    def __init__(self, directory, declaration, options):
        super().__init__(directory, declaration, options)
        self.key_field = (declaration.get("options") or {}).get("key")
        with self.kv.read() as txn:
            raw = txn.get(SEQ_KEY)
        self._seq = int.from_bytes(raw, "big") if raw else 0
        self.fields = FieldStores(self, declaration, options)

    # -- store fields: a document's stores hang from its sort key ----------------------

    def doc_key(self, key: Any) -> bytes:
        return self._encoded(self._unwrap(key, "a store field's document key"))

    def document_exists(self, txn, dk: bytes) -> bool:
        cursor = txn.cursor()
        return cursor.set_range(self.DOC + dk) and _is_entry_of(cursor.key(), self.DOC + dk)

    # -- sort keys -------------------------------------------------------------------

    def sort_key(self, doc: Mapping) -> Any:
        """The value an entry sorts by (see the module docstring)."""
        return _sort_value(doc, self.key_field, self.declaration["name"])

    def _encoded(self, value: Any) -> bytes:
        ek = encode_key(value)
        if len(ek) > MAX_KEY_BYTES:
            raise BadValueError(f"a sort key is at most {MAX_KEY_BYTES} bytes once encoded; this one is {len(ek)}")
        return ek

    def _unwrap(self, key: Any, verb: str) -> Any:
        """A key given bare, or as ``{<key field>: value}`` (``get({Score: 92})``)."""
        return self._named(key, verb)[1]

    def _named(self, key: Any, verb: str) -> tuple[str | None, Any]:
        """``(field, value)`` of a key given as ``{<key field>: value}``; ``(None, key)`` for a bare key."""
        if isinstance(key, Mapping):
            if len(key) != 1:
                raise BadValueError(f"{verb} takes a key, or one field naming it such as {{Score: 92}}; got {key!r}")
            (field, value), = key.items()
            self._check_field(field, verb)
            if isinstance(value, Mapping) and any(str(k).startswith("$") for k in value):
                raise BadValueError(f"{verb} takes an exact key; for bounds use range({{{field}: {{$gte: ...}}}})")
            return field, value
        return None, key

    def _sorts_by(self, doc: Mapping, field: str | None) -> bool:
        """Whether ``doc`` is keyed by ``field`` (always, for a bare key or a declared key field).

        Without a declared key each entry sorts by its own ``_id_``, else its first field,
        so ``{User: "jane"}`` names the entries keyed by ``User`` — never one keyed by
        ``Score`` whose value happens to be ``"jane"``.
        """
        return field is None or self.key_field is not None or _sort_field(doc) == field

    def _not_keyed_by(self, field: str, docs: list, verb: str) -> BadValueError:
        fields = sorted({str(_sort_field(d)) for d in docs})
        return BadValueError(
            f"{verb} names the key field {field!r}, but btree bucket {self.declaration['name']!r} declares no key and "
            f"its entries {'within those bounds' if verb == 'range' else 'with that key'} sort by {', '.join(map(repr, fields))} (each entry sorts by its _id_, else its first "
            f"field), so nothing is keyed by {field!r}. Name the field they sort by, give the key bare, or create the "
            "bucket with key=\"<field>\"; to match other fields, read the entries and filter them."
        )

    def _check_field(self, field: str, verb: str) -> None:
        if self.key_field is not None and field != self.key_field:
            raise BadValueError(
                f"btree bucket {self.declaration['name']!r} is keyed by {self.key_field!r}; {verb} cannot use {field!r}"
            )

    # -- writes ------------------------------------------------------------------------

    def _prepare(self, doc: Any, what: str = "document") -> tuple[bytes, Any, bytes]:
        if not isinstance(doc, Mapping):
            raise NotADocumentError(f"{what} must be a document, got {type(doc).__name__}")
        value = self.sort_key(doc)
        return self._encoded(value), value, encode_document(doc, what)

    def insert(self, doc: Mapping) -> Any:
        """Add an entry; return its sort key. Entries with equal keys coexist."""
        return self.batch_insert([doc])[0]

    def batch_insert(self, docs: list) -> list:
        """Add every entry in one write, or none; return their sort keys."""
        prepared = [self._prepare(doc, f"document {i} of the batch") for i, doc in enumerate(docs)]

        def fn(txn):
            seq = self._seq
            for ek, _value, data in prepared:
                seq += 1
                txn.put(self.DOC + ek + seq.to_bytes(8, "big"), data)
            txn.put(SEQ_KEY, seq.to_bytes(8, "big"))
            self._seq = seq  # under the write lock; only read inside transactions
            return seq, len(prepared)

        self._write(fn)
        return [value for _ek, value, _data in prepared]

    def load(self, docs: list) -> dict:
        """Restore entries (as batch_insert, for a dump's restore): ``{loaded}``."""
        return {"loaded": len(self.batch_insert(docs))}

    def delete(self, target: Any) -> dict:
        """Delete every entry whose sort key equals ``target`` (bare, or ``{Field: value}``): ``{deleted}``."""
        field, value = self._named(target, "delete")
        dk = self._encoded(value)
        prefix = self.DOC + dk
        unlink: list = []

        def fn(txn):
            cursor = txn.cursor()
            entries, doomed, others = 0, [], []
            if cursor.set_range(prefix):
                for key, raw in cursor:
                    if not _is_entry_of(key, prefix):
                        break
                    entries += 1
                    if field is None or self.key_field is not None:
                        doomed.append(key)
                        continue
                    doc = decode(raw)
                    if self._sorts_by(doc, field):
                        doomed.append(key)
                    else:
                        others.append(doc)
            if others and not doomed:
                raise self._not_keyed_by(field, others, "delete")
            if doomed and len(doomed) == entries and self.fields:  # the last entries with this key take its stores
                self.fields.check_cascade(txn, dk, value)
                unlink[:] = self.fields.delete_all(txn, dk)
            for key in doomed:
                txn.delete(key)
            return len(doomed), -len(doomed)

        deleted = self._write(fn)
        self.fields.unlink(unlink)
        return {"deleted": deleted}

    # -- reads ---------------------------------------------------------------------------

    def exists(self, key: Any) -> bool:
        """Whether an entry with this sort key exists (``{Field: value}`` as :meth:`get` takes it).

        A bare key, or the declared key field, is answered from the keys alone; a field named
        on a bucket without a declared key needs the entries read to know what they sort by.
        """
        field, value = self._named(key, "exists")
        if not self._sorts_by({}, field):
            return self.get(key) is not None
        prefix = self.DOC + self._encoded(value)
        with self.kv.read() as txn:
            cursor = txn.cursor()
            return cursor.set_range(prefix) and _is_entry_of(cursor.key(), prefix)

    def get(self, key: Any) -> dict | None:
        """The first entry (in insertion order) whose sort key equals ``key``, or None.

        ``{Field: value}`` on a bucket without a declared key matches only entries that sort by
        ``Field`` (see :meth:`_sorts_by`); BadValueError when the entries with that key sort by another.
        """
        field, value = self._named(key, "get")
        prefix = self.DOC + self._encoded(value)
        with self.kv.read() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(prefix):
                return None
            doc, others = None, []
            for k, raw in cursor:
                if not _is_entry_of(k, prefix):
                    break
                entry = decode(raw)
                if self._sorts_by(entry, field):
                    doc = entry
                    break
                others.append(entry)
            if doc is None:
                if others:
                    raise self._not_keyed_by(field, others, "get")
                return None
        return Reply(doc, store_fields=self.fields.sizes(value)) if self.fields else doc

    def first(self) -> dict | None:
        """The entry with the lowest sort key, or None when empty."""
        with self.kv.read() as txn:
            cursor = txn.cursor()
            if cursor.set_range(self.DOC) and cursor.key().startswith(self.DOC):
                return decode(cursor.value())
        return None

    def last(self) -> dict | None:
        """The entry with the highest sort key, or None when empty."""
        with self.kv.read() as txn:
            cursor = txn.cursor()
            if cursor.set_range(b"E"):  # the first key past the b"D" namespace
                if not cursor.prev():
                    return None
            elif not cursor.last():
                return None
            if cursor.key().startswith(self.DOC):
                return decode(cursor.value())
        return None

    def list(self, after: Any = None, limit: int = 100) -> list[dict]:
        """Entries in key order, starting after every entry whose key is ``after``."""
        check_limit(limit, self.options.max_peek, "list")
        out = []
        with self.kv.read() as txn:
            cursor = txn.cursor()
            start = self.DOC + self._encoded(after) if after is not None else self.DOC
            if not cursor.set_range(start):
                return out
            for key, raw in cursor:
                if not key.startswith(self.DOC):
                    break
                if after is not None and _is_entry_of(key, start):
                    continue
                out.append(decode(raw))
                if len(out) >= limit:
                    break
        return out

    def range(self, bounds: Mapping | None = None, limit: int | None = None, reverse: Any = False,
              stream: bool = False) -> list[dict]:
        """Entries whose sort key lies within ``bounds``, in key order (``reverse`` for descending).

        ``bounds`` is ``{Field: {$gte: a, $lt: b}}`` naming the key field, or the bare
        ``{$gte: a, $lt: b}``; ``$gt $gte $lt $lte $eq`` and ``$prefix`` (keys that are
        strings starting with a given string: ``{$prefix: "2026-03"}``, a whole month of
        ``"2026-03-14/<id>"`` keys). A plain value is an exact key. Bounds compare as
        filters do: ``{$gte: 90}`` matches numbers only, never strings.
        """
        if not isinstance(reverse, bool):
            raise BadValueError(f"range's reverse is true or false, got {reverse!r}")
        if limit is not None:
            check_limit(limit, 1 << 62, "range")
        field, ops = self._bounds(bounds or {})
        exact = self._exact_bounds(ops)
        if exact is not None:  # the byte range is exactly the value range: nothing to check per entry
            (lower, upper), prefix, check = exact, None, None
        else:
            lower, upper = self._byte_bounds(ops)
            prefix = ops.get("$prefix")
            rest = {k: v for k, v in ops.items() if k != "$prefix"}
            check = compile_filter({"k": rest}) if rest else None
        if stream:  # a cursor's: read in chunks as it goes (stores/resumable.py), no answer limit
            return self._ranged(resumable.walk(self.kv, lower, upper, reverse), field, prefix, check, limit)
        out, others = [], []
        room, taken = self.options.max_answer_bytes, 0  # (a server's message limit)
        with self.kv.read() as txn:
            cursor = txn.cursor()
            for key, raw in _walk(cursor, lower, upper, reverse):
                doc = decode(raw)
                if not self._sorts_by(doc, field):
                    if len(others) < 8:
                        others.append(doc)
                    continue
                if check is not None or prefix is not None:
                    value = self.sort_key(doc)
                    if check is not None and not check({"k": value}):
                        continue
                    if prefix is not None and not (isinstance(value, str) and value.startswith(prefix)):
                        continue
                out.append(doc)
                if room is not None:
                    taken += len(raw)
                    if taken > room:
                        raise answer_too_large(taken, room, "range")
                if limit is not None and len(out) >= limit:
                    break
        if others and not out:
            raise self._not_keyed_by(field, others, "range")
        return out

    def _ranged(self, entries, field, prefix, check, limit):
        """range's entries one by one (a cursor's), as range checks them."""
        others, n = [], 0
        for _key, raw in entries:
            doc = decode(raw)
            if not self._sorts_by(doc, field):
                if len(others) < 8:
                    others.append(doc)
                continue
            if check is not None or prefix is not None:
                value = self.sort_key(doc)
                if check is not None and not check({"k": value}):
                    continue
                if prefix is not None and not (isinstance(value, str) and value.startswith(prefix)):
                    continue
            yield doc
            n += 1
            if limit is not None and n >= limit:
                return
        if others and not n:
            raise self._not_keyed_by(field, others, "range")

    def _bounds(self, bounds: Mapping) -> tuple[str | None, dict]:
        """``(the key field the bounds name, or None for bare bounds, {operator: value})``."""
        if not isinstance(bounds, Mapping):
            raise BadValueError("range takes bounds such as {Score: {$gte: 90}} or {$gte: \"2026-03-01\", $lt: \"2026-04\"}")
        field = None
        if bounds and all(isinstance(k, str) and k.startswith("$") for k in bounds):
            ops = dict(bounds)
        elif len(bounds) == 1:
            (field, value), = bounds.items()
            self._check_field(field, "range")
            if isinstance(value, Mapping) and value and all(str(k).startswith("$") for k in value):
                ops = dict(value)
            else:
                ops = {"$eq": value}
        elif not bounds:
            ops = {}
        else:
            raise BadValueError(f"range bounds name one key field, got {sorted(bounds)}")
        for op in ops:
            if op not in RANGE_OPERATORS:
                raise BadValueError(f"range accepts the bounds {', '.join(RANGE_OPERATORS)}; not {op!r}")
        if "$prefix" in ops and not isinstance(ops["$prefix"], str):
            raise BadValueError(f"$prefix takes a string, got {ops['$prefix']!r}")
        return field, ops

    def _exact_bounds(self, ops: dict) -> tuple[bytes, bytes] | None:
        """LMDB key bounds holding exactly the entries the bounds match, or None when a
        filter check per entry is needed (bounds of mixed kinds, arrays, documents, null, NaN).

        Keys sort by kind first (a tag byte), so bounds of one kind stay inside that kind's
        bracket, as filters compare; NaN keys, the lowest numbers, are skipped.
        """
        values = [v for op, v in ops.items() if op != "$prefix"]
        if "$prefix" in ops:
            values.append(ops["$prefix"])
        if not values:
            return self.DOC, b"E"
        if any(v is None or isinstance(v, (list, tuple, dict)) or is_nan(v) for v in values):
            return None
        if len({type_rank(v) for v in values}) != 1:
            return None
        tag = encode_key(values[0])[0]
        lower, upper = self.DOC + bytes([tag]), self.DOC + bytes([tag + 1])
        if type_rank(values[0]) == NUMBER:
            lower = self.DOC + encode_key(float("nan")) + b"\xff" * 9
        return self._narrow(ops, lower, upper)

    def _byte_bounds(self, ops: dict) -> tuple[bytes, bytes]:
        """The smallest LMDB key to look at and the first one past the range (a coarse cut;
        the exact bounds are checked on each entry)."""
        return self._narrow(ops, self.DOC, b"E")

    def _narrow(self, ops: dict, lower: bytes, upper: bytes) -> tuple[bytes, bytes]:
        """``[lower, upper)`` narrowed by each bound. An entry's key is its encoded sort key and
        an 8-byte counter, so ``ek + ff*9`` is past every entry whose key is ``ek``."""
        for op, value in ops.items():
            if op == "$prefix":
                stem = self.DOC + string_stem(value)
                lower, upper = max(lower, stem), min(upper, stem + b"\xff")
                continue
            ek = self.DOC + self._encoded(value)
            if op in ("$gte", "$eq"):
                lower = max(lower, ek)
            if op == "$gt":
                lower = max(lower, ek + b"\xff" * 9)
            if op == "$lt":
                upper = min(upper, ek)
            if op in ("$lte", "$eq"):
                upper = min(upper, ek + b"\xff" * 9)
        return lower, upper


def _sort_value(doc: Mapping, key_field: str | None, bucket: str) -> Any:
    """The value an entry of btree bucket ``bucket`` sorts by (BTreeStore.sort_key; a check has no store open)."""
    if key_field is not None:
        if key_field not in doc:
            raise MissingKeyError(
                f"btree bucket {bucket!r} is keyed by {key_field!r}, and this document has no {key_field!r}: add it"
            )
        return doc[key_field]
    if "_id_" in doc:
        return doc["_id_"]
    for value in doc.values():
        return value
    raise MissingKeyError("an empty document has no sort key: give it an _id_ or a first field")


def string_stem(prefix: str) -> bytes:
    """The bytes every encoded string starting with ``prefix`` starts with (its encoding less the terminator)."""
    full, empty = encode_key(prefix), encode_key("")
    terminator = empty[1:]  # the empty string is its tag byte and the terminator alone
    assert full.endswith(terminator)
    return full[: len(full) - len(terminator)]


def _sort_field(doc: Mapping) -> str | None:
    """The field an entry of a btree without a declared key sorts by: ``_id_``, else its first field."""
    if "_id_" in doc:
        return "_id_"
    return next(iter(doc), None)


def _is_entry_of(key: bytes, prefix: bytes) -> bool:
    """Whether an LMDB key is ``prefix`` followed by exactly one 8-byte sequence number."""
    return key.startswith(prefix) and len(key) == len(prefix) + 8


def _walk(cursor, lower: bytes, upper: bytes, reverse: bool):
    """``(key, value)`` for LMDB keys in ``[lower, upper)``, ascending or descending."""
    if not reverse:
        if not cursor.set_range(lower):
            return
        for key, value in cursor:
            if key >= upper:
                return
            yield key, value
    else:
        if cursor.set_range(upper):
            if not cursor.prev():
                return
        elif not cursor.last():
            return
        while True:
            key = cursor.key()
            if key < lower:
                return
            if key < upper:
                yield key, cursor.value()
            if not cursor.prev():
                return
