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


def partition_of(key, partitions: int) -> int:
    """The partition (0 to ``partitions - 1``) of the document whose key is ``key``."""
    if partitions <= 1:
        return 0
    digest = hashlib.blake2b(encode_key(key), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


#: The value a request routes by, when it has one; _NONE when it acts on many partitions.
#: What a request acts on when it is no one key (many documents, or one the request does not name).
NONE = object()
_NONE = NONE


def request_partition(place: Mapping, doc: Mapping) -> int | None:
    """The partition a request acts on, from its bucket's placement ``place`` (``type``, ``partitions``,
    ``key``: a btree's sort field, ``group``: a partitioned queue's), or None when it acts on many or its
    partition cannot be told without the store (a btree entry sorted by its first field...).

    An insert of a hash document without ``_id_`` gets one made here (a UUIDv7, as a node makes it), so
    that its partition is known: the request's ``args`` are changed in place."""
    partitions = place.get("partitions") or 1
    if partitions <= 1:
        return 0
    op = (operations.FIELD_VERBS if "field" in doc else operations.OPERATIONS).get(doc.get("op"))
    if op is None or op.cursor:  # (a cursor's more must go where it was opened: never routed)
        return None
    kind = place.get("type")
    if place.get("group") is not None:
        value = group_of(op, doc, place["group"])
    elif kind == "btree":
        value = _btree_key_of(op, doc, place.get("key"))
    elif kind == "blob":
        value = _blob_key_of(op, doc)
    elif kind == "hash":
        value = key_of(op, doc)
    else:
        value = _NONE
    return None if value is _NONE else partition_of(value, partitions)


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
    if isinstance(value, Mapping):
        if "_id_" in value:
            key = value["_id_"]
            return key if not isinstance(key, (Mapping, list)) else _NONE
        if op.makes_key and op.param(op.key_param).kind == "doc":
            args[op.key_param] = {"_id_": uuid7(), **value}
            return args[op.key_param]["_id_"]
        return _NONE
    if value is None or isinstance(value, list) or op.param(op.key_param).kind != "any":
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
        if op.param(op.key_param).kind == "doc":  # insert: the document's sort value
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
    param = op.param("doc")
    return op.write and param is not None and param.kind == "doc" and not op.gather


def group_of(op: operations.Operation, doc: Mapping, group: str) -> Any:
    """A partitioned queue's push's group value (missing: None), or _NONE for every other verb."""
    if not pushes(op) or "field" in doc:
        return _NONE
    args = doc.get("args")
    pushed = args.get("doc") if isinstance(args, dict) else None
    return pushed.get(group) if isinstance(pushed, Mapping) else _NONE
