"""The writes that pick one document of a spread bucket by a filter: find_and_modify, and update with multi: false or upsert.

On one node these read the first match and write it in one transaction. Over a spread
bucket the first match may be on any partition, so a node runs them in two phases (as
MongoDB's routers do since 7.1 for the same writes without the shard key):

1. *Find*: the filter is asked of every partition's owner at once (``ClusterNode._gather``
   of a ``search`` with ``limit: 1`` and the request's ``sort``; a ``find`` when an index
   is not ready), and the first match overall is kept: the least by ``sort``, ties (and
   no sort) by key, as one node orders them.
2. *Write*: the request runs at that document's owner with its filter narrowed to the
   document's key, ``{_id_: k, $and: [filter]}``, and without ``upsert``: a document
   changed or deleted since phase 1 so that it no longer matches is not written. Then
   nothing was written, and phase 1 runs again — at most :data:`ROUNDS` times, then the
   request is refused WRITE_CONFLICT (nothing written; send it again).

A filter that pins ``_id_`` to one value by equality (``{_id_: {$eq: k}}``, or inside a
top-level ``$and``) can match only that key's document: the request goes to that key's
partition alone, upsert included, and runs there exactly as on one node. An upsert whose
filter pins no ``_id_`` is refused (VERB_NOT_SUPPORTED, naming the fix): where to insert
would be decided after looking at every partition, so two such upserts at once could both
insert. (docs/dev/cluster.md, "Writes that pick one document".)
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bson.regex import Regex

from .. import operations
from ..errors import HoardError, VerbNotSupportedError, WriteConflictError
from ..stores.hash import MAX_KEY_BYTES, check_find_and_modify, check_update
from ..values.filter import equality_fields
from ..values.keys import encode_key

if TYPE_CHECKING:
    from .node import ClusterNode

#: How many times phase 1 runs before the request is refused WRITE_CONFLICT (at least 1).
ROUNDS = max(1, int(os.environ.get("HOARDDB_PICK_ROUNDS", "32")))
#: The reads of phase 1: a hash bucket's search (an index serves the filter where one fits), and find when
#: the index search would use is not ready (find_and_modify never refuses so on one node). Found by the table.
_SEARCH = next(o for o in operations.VERBS.values() if o.cost == operations.INDEXED and "hash" in o.types
               and o.gather == "documents")
_FIND = next(o for o in operations.VERBS.values() if o.cost == operations.SCAN and "hash" in o.types
             and o.gather == "documents" and o.key_param == "filter")
_NONE = object()


def picks(op: operations.Operation, doc: dict) -> bool:
    """Whether a request over a spread bucket writes one document it picks by its filter (or inserts one): a
    filtered write without a gather of its own (find_and_modify), or a filtered update asked with upsert or
    multi: false."""
    if not op.write or not op.key_param or op.param(op.key_param).kind != "filter":
        return False
    if not op.gather:
        return True
    args = doc.get("args")
    return op.param("multi") is not None and isinstance(args, dict) and bool(
        args.get("upsert") or args.get("multi") is False)


async def run(node: ClusterNode, op: operations.Operation, doc: dict, place: dict) -> dict:
    """The answer to ``doc`` (a request :func:`picks`) over the spread bucket ``place``, as one node gives it."""
    args = doc.get("args")
    if not isinstance(args, dict):
        return await node.server.run_here(doc)  # refused there, saying what args takes
    bound = operations.bind(op, (), args)
    given = {k: v for k, v in bound.items() if v is not None}  # (as the engine calls the store: None is left out)
    filter_ = given.get("filter") or {}
    one = not op.gather  # find_and_modify: the document is the answer; update: {matched, modified}
    if one:
        check_find_and_modify(filter_, given.get("update"), given.get("remove", False), given.get("new", False),
                              given.get("upsert", False), given.get("sort"), given.get("projection"),
                              given.get("arrayFilters"))
    else:
        check_update(filter_, given.get("update"), given.get("upsert", False), given.get("multi", True),
                     given.get("arrayFilters"))
    key = _pinned_key(filter_)
    if key is not _NONE:
        if not _storable(key):  # no document has such a key: nothing matches, wherever it runs
            return await node.server.run_here({k: v for k, v in doc.items() if k != "_node"})
        return await node._run({**doc, "args": {**args, "filter": {"_id_": key, "$and": [filter_]}}})
    if given.get("upsert"):
        raise VerbNotSupportedError(
            f"{op.name} with upsert over a spread bucket (partitions: {place['partitions']}) needs an equality on "
            "_id_ in its filter (such as {_id_: <key>, ...}), so that the document it may insert has one partition "
            "to be looked for and inserted in; without one, two such upserts at once could both insert. Give the "
            "key in the filter, or declare the bucket with placement: whole")
    sort = given.get("sort") if one else None
    second = {k: v for k, v in args.items() if k not in ("upsert", "sort", "filter")}
    if not one:
        second["multi"] = False
    for attempt in range(ROUNDS):
        found = await _first(node, doc, place, filter_, sort)
        if found.get("ok") != 1:
            return found
        if not found["result"]:
            return {"ok": 1, "result": None if one else {"matched": 0, "modified": 0}}
        target = found["result"][0]["_id_"]
        answer = await node._run({"op": op.name, "db": doc["db"], "bucket": doc["bucket"],
                                  "args": {**second, "filter": {"_id_": target, "$and": [filter_]}}})
        if answer.get("ok") != 1:
            return answer
        if (answer.get("result") is not None) if one else (answer.get("result") or {}).get("matched"):
            return answer
        node.pick_retries += 1  # changed since phase 1: look again, after a pause that grows (others race for it)
        if attempt + 1 < ROUNDS:
            await asyncio.sleep(random.uniform(0, min(0.05, 0.0005 * 2 ** attempt)))
    raise WriteConflictError(
        f"{op.name} over a spread bucket: the first document matching the filter changed before it could be "
        f"written, {ROUNDS} time(s) in a row (other clients write the same documents); nothing was written: send "
        "it again", rounds=ROUNDS)


async def _first(node: ClusterNode, doc: dict, place: dict, filter_: Any, sort: Any) -> dict:
    """Phase 1: the first document matching ``filter_`` over every partition (``result``: it alone, or empty)."""
    part: dict = {"filter": filter_, "limit": 1}
    if sort is not None:
        part["sort"] = sort
    answer: dict = {}
    for read in (_SEARCH, _FIND):
        answer = await node._gather(read, {"op": read.name, "db": doc["db"], "bucket": doc["bucket"], "args": part},
                                    place)
        if answer.get("codeName") != "INDEX_NOT_READY":
            break
    return answer


def _pinned_key(filter_: Any) -> Any:
    """The one ``_id_`` a filter's matches can have (an equality on ``_id_``, at its top or in a top-level
    ``$and``), or _NONE."""
    pinned = equality_fields(filter_, check=False)
    return pinned["_id_"] if "_id_" in pinned else _NONE


def _storable(key: Any) -> bool:
    """Whether a document may have ``key`` as its ``_id_`` (as a hash bucket checks it)."""
    if type(key) is str and len(key) < 400:
        return True
    if key is None or isinstance(key, (list, tuple, Mapping, Regex)):
        return False
    try:
        return len(encode_key(key)) + 1 <= MAX_KEY_BYTES
    except HoardError:
        return False
