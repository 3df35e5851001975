"""The keyed store of a hash or btree store field: documents under keys of the caller's choosing, listed in key order.

A hash or btree *bucket* keeps documents named by a field of their own (``_id_``, a sort
key) with indexes over them (:mod:`hoarddb.stores.hash`, :mod:`hoarddb.stores.btree`);
a hash or btree *store field* is a plain map, ``put(key, doc)`` storing a document under a
key that is not one of its fields. Both field types are this one map over a keyspace
(:mod:`hoarddb.stores.keyspace`), each element under ``encode_key(key)``, so its keys
sort as values do (a hash field lists in key order too). An element may own stores of its
own (``Friends hashStore { Messages fifoStore }``): its keyspace deletes them with it, and
``get`` names them beside the element's own fields.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadValueError
from ..values.codec import decode
from ..values.keys import decode_key, encode_key
from .base import Reply, check_limit, encode_document
from .keyspace import Keys, Keyspace

#: The longest key of an element, with its keyspace's prefix (LMDB's limit is 511 bytes).
MAX_KEY_BYTES = 500


class KeyedField:
    """KeyedField is a document's hash or btree store field: ``put`` (replacing), ``get``,
    ``delete``, ``list`` of ``{key, doc}`` in key order, ``length``."""

    def __init__(self, space: Keyspace, options):
        self.space, self.options = space, options

    def put(self, key: Any, doc: Any = None, **extra) -> Any:
        """Store ``doc`` under ``key``, replacing what was there; return the key."""
        if extra:
            raise BadValueError(f"{self.space.where}.put takes (key, document); name and type are for blob fields")
        if doc is None:
            raise BadValueError(f"{self.space.where}.put takes a key and a document: put(\"<key>\", {{...}})")
        ek = self._key(key)
        data = encode_document(doc, "the document")

        def fn(keys: Keys) -> Any:
            keys.put(ek, data)
            return key

        return self.space.write(fn)

    def get(self, key: Any) -> Any:
        """The document under ``key``, or None; its own fields, never its stores (when its
        elements own stores, the answer names them beside it: ``store_fields``)."""
        ek = self._key(key)
        if not self.space.owns_stores():
            raw = self.space.read(lambda keys: keys.get(ek))
            return decode(raw) if raw is not None else None

        def fn(keys: Keys):
            raw = keys.get(ek)
            return None if raw is None else Reply(decode(raw), store_fields=self.space.element_stores(keys, ek))

        return self.space.read(fn)

    def delete(self, key: Any) -> dict:
        """Delete the document under ``key`` and the stores it owns, in one transaction:
        ``{deleted: 1}``, or 0 when there was none."""
        ek = self._key(key)

        def fn(keys: Keys) -> dict:
            if keys.get(ek) is None:
                return {"deleted": 0}
            self.space.drop_element(keys, ek, key)
            return {"deleted": int(keys.delete(ek))}

        return self.space.write(fn)

    def list(self, after: Any = None, limit: int = 100) -> list:
        """Up to ``limit`` ``{key, doc}`` in key order, after the key ``after``."""
        check_limit(limit, self.options.max_peek, "list")
        start = None if after is None else self._key(after)
        return self.space.read(lambda keys: [{"key": decode_key(k), "doc": decode(v)}
                                             for k, v in keys.items(after=start, limit=limit)])

    def length(self) -> int:
        return self.space.read(lambda keys: keys.count)

    def _key(self, key: Any) -> bytes:
        if key is None or isinstance(key, (list, dict)):
            raise BadValueError(f"{self.space.where}: a key is a string, number, date, ObjectId or UUID, "
                                f"got {key!r:.60}")
        ek = encode_key(key)
        if len(ek) + len(self.space.prefix) > MAX_KEY_BYTES:
            raise BadValueError(f"{self.space.where}: key is too long ({len(ek)} bytes once encoded)")
        return ek
