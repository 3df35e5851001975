"""Which partition of a spread bucket a request or a stored item falls in: the hashing a cluster node and an owner-routing client share.

A spread bucket has ``partitions`` partitions, numbered from 0; a document's partition is
a hash of its key's order-preserving encoding (hoarddb.values.keys), so that keys equal
as values (``30``, ``30.0``, ``Int64(30)``) fall in the same partition on every node and
in every client. What is hashed depends on the bucket's type (docs/dev/cluster.md, "The
map"): a hash document's ``_id_``, a btree entry's sort value, a blob's id in lower case,
a partitioned queue's pushed element's group field.

The cluster's nodes route with hoarddb/cluster/node.py (which also cuts stored items by
partition); a client that sends each keyed request to its partition's owner
(hoarddb/client/router.py) asks :func:`request_partition` here, from the map a node gave it
(the ``cluster_map`` operation). The two must agree; tests/cluster/test_owner_routing.py
holds them to it. A disagreement would cost only a forward (a node forwards what it does
not own), never a wrong answer.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

from . import operations
from .ids import uuid7
from .values.keys import encode_key

#: What :func:`request_partition` answers for a request over many partitions (or none it can tell).
MANY = None
#: The request field that names the owner a partitioned queue's pop, claim or peek starts its turn at: a
#: routing client sends the request to that owner, which then takes from its own partitions first.
TURN_FIELD = "_turn"
#: The operations that take a partitioned queue's elements in turns over its owners (pop, claim, peek).
TURNS = frozenset(name for name, op in operations.VERBS.items() if op.gather in ("turns", "turns_claimed"))


_blake2b = hashlib.blake2b
_from_bytes = int.from_bytes


def partition_of(key, partitions: int) -> int:
    """The partition (0 to ``partitions - 1``) of the document whose key is ``key``."""
    if partitions <= 1:
        return 0
    return _from_bytes(_blake2b(encode_key(key), digest_size=8).digest(), "big") % partitions


#: The value a request routes by, when it has one; _NONE when it acts on many partitions.
#: What a request acts on when it is no one key (many documents, or one the request does not name).
NONE = object()
_NONE = NONE


class Partitioner:
    """:func:`request_partition` for one placement, read once: a client keeps one per bucket of the map it
    read (hoarddb/client/router.py), so that a request costs the reading of its key and one hash."""

    __slots__ = ("partitions", "_read")

    def __init__(self, place: Mapping):
        self.partitions = place.get("partitions") or 1
        kind = place.get("type")
        if place.get("group") is not None:
            group = place["group"]
            self._read = lambda op, doc: group_of(op, doc, group)
        elif kind == "btree":
            field = place.get("key")
            self._read = lambda op, doc: _btree_key_of(op, doc, field)
        elif kind == "blob":
            self._read = _blob_key_of
        elif kind == "hash":
            self._read = key_of
        else:
            self._read = None

    def __call__(self, doc: Mapping, hashed: bool = True) -> int | None:
        """The partition ``doc`` (a request) acts on, or None: as :func:`request_partition`. With ``hashed``
        False, 0 for a request of one partition (its key read, and an insert's made, but not hashed): for a
        bucket whose partitions all go to the same place."""
        if self.partitions <= 1:
            return 0
        op = (_FIELD_VERBS if "field" in doc else _OPERATIONS).get(doc.get("op"))
        if op is None or op.cursor or self._read is None:  # (a cursor's more must go where it was opened)
            return None
        value = self._read(op, doc)
        if value is _NONE:
            return None
        return partition_of(value, self.partitions) if hashed else 0


_FIELD_VERBS, _OPERATIONS = operations.FIELD_VERBS, operations.OPERATIONS


def request_partition(place: Mapping, doc: Mapping) -> int | None:
    """The partition a request acts on, from its bucket's placement ``place`` (``type``, ``partitions``,
    ``key``: a btree's sort field, ``group``: a partitioned queue's), or None when it acts on many or its
    partition cannot be told without the store (a btree entry sorted by its first field...).

    An insert of a hash document without ``_id_`` gets one made here (a UUIDv7, as a node makes it), so
    that its partition is known: the request's ``args`` are changed in place."""
    return Partitioner(place)(doc)


#: The kind of each operation's parameter, by (id of the operation, name): Operation.param walks the table's
#: parameters, and the operations live as long as the module (so their ids are theirs).
_KINDS: dict[tuple[int, str], str | None] = {}


def _kind(op: operations.Operation, name: str) -> str | None:
    found = _KINDS.get((id(op), name), _NONE)
    if found is _NONE:
        param = op.param(name)
        found = _KINDS[id(op), name] = param.kind if param is not None else None
    return found


def key_of(op: operations.Operation, doc: Mapping) -> Any:
    """A hash bucket's request's document key (the table's route and key_param), or _NONE."""
    if "field" in doc:  # a document's store field: routed by the document's key
        return doc.get("key", _NONE)
    if not op.key_param:
        return _NONE
    args = doc.get("args")
    if not isinstance(args, dict):
        return _NONE
    value = args.get(op.key_param)
    if type(value) is dict or (type(value) is not str and isinstance(value, Mapping)):  # (str: the common key)
        if "_id_" in value:
            key = value["_id_"]
            return key if type(key) is str or not isinstance(key, (Mapping, list)) else _NONE
        if op.makes_key and _kind(op, op.key_param) == "doc":
            args[op.key_param] = {"_id_": uuid7(), **value}
            return args[op.key_param]["_id_"]
        return _NONE
    if value is None or isinstance(value, list) or _kind(op, op.key_param) != "any":
        return _NONE
    return value


def _btree_key_of(op: operations.Operation, doc: Mapping, field: str | None) -> Any:
    """A btree request's sort value (bare, or ``{Field: value}``; an insert's document's), or _NONE."""
    if "field" in doc:
        key = doc.get("key", _NONE)
    elif not op.key_param:
        return _NONE
    else:
        args = doc.get("args")
        if not isinstance(args, dict) or op.key_param not in args:
            return _NONE
        key = args[op.key_param]
        if _kind(op, op.key_param) == "doc":  # insert: the document's sort value
            if not isinstance(key, Mapping):
                return _NONE
            if field is not None:
                return key.get(field, _NONE)
            if "_id_" in key:
                return key["_id_"]
            return next(iter(key.values()), _NONE)
    if isinstance(key, Mapping):
        if len(key) != 1:
            return _NONE
        (key,) = key.values()
        if isinstance(key, Mapping) and any(str(k).startswith("$") for k in key):
            return _NONE
    return _NONE if isinstance(key, list) else key


def _blob_key_of(op: operations.Operation, doc: Mapping) -> Any:
    """A blob request's id in lower case (get, info, stream, delete), or _NONE (a put: its id is made by the node)."""
    if "field" in doc or not op.key_param or op.upload:
        return _NONE
    args = doc.get("args")
    if not isinstance(args, dict) or op.key_param not in args:
        return _NONE
    value = args[op.key_param]
    if isinstance(value, Mapping):
        value = value.get("_id_")
    if isinstance(value, uuid.UUID):
        return str(value)
    return value.lower() if isinstance(value, str) else _NONE


def pushes(op: operations.Operation) -> bool:
    """Whether a queue's verb adds the one document it is given (push: a ``doc`` of kind doc; batch_push splits)."""
    return op.write and _kind(op, "doc") == "doc" and not op.gather


def group_of(op: operations.Operation, doc: Mapping, group: str) -> Any:
    """A partitioned queue's push's group value (missing: None), or _NONE for every other verb."""
    if not pushes(op) or "field" in doc:
        return _NONE
    args = doc.get("args")
    pushed = args.get("doc") if isinstance(args, dict) else None
    return pushed.get(group) if isinstance(pushed, Mapping) else _NONE
