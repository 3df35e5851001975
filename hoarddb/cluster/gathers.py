"""Gathers that merge on the node asked what every owner of a spread bucket sends: export's pages, distinct's values, aggregate's pipeline over the documents read a page at a time.

``export`` asks each owner for a page after the cursor and keeps the first ``limit`` of
their union in key order. ``distinct`` and ``aggregate`` read the matched documents through
each owner's search cursor (hoarddb/cluster/cursors.py: :func:`matching`), merged in key
order and consumed as they come, on a thread: so the documents matched on one node may be
many times a message (16 MiB), and what the node asked holds at a time is a batch per owner
(about 1 MiB) and what the pipeline's stages keep (``stage_memory_bytes`` and
``stage_max_documents``, as on one node). An ``aggregate`` asked with ``batch_size``
answers its output through a cursor of the node asked: a pipeline of ``$match``,
``$project``, ``$unwind``, ``$skip``, ``$limit`` streams (each ``more`` reads on from the
owners), one that groups or sorts computes that stage, then hands its output out a batch
at a time.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .. import operations
from ..errors import BadValueError, PartitionUnavailableError, VerbNotSupportedError
from ..values.keys import encode_key
from . import cursors as cluster_cursors
from .partitions import partition_of

if TYPE_CHECKING:
    from .node import ClusterNode


async def export(node: "ClusterNode", op: operations.Operation, doc: dict, place: dict) -> dict:
    """export over a spread hash or blob bucket: one page in key order across the owners, as one node gives it.

    Each owner sends its first ``limit`` entries after the cursor (of the partitions asked of it); the page is
    the first ``limit`` of them all, none past the last key of an owner whose page was full (what lies beyond
    it there was not sent). A page cut short so is completed by asking again from there. ``next`` is the
    page's last key (a hash bucket's encoded key, a blob's id) when the page is full, else None."""
    from .node import _default_of, route_value  # noqa: PLC0415

    args = dict(doc.get("args") or {})
    limit = args.get("limit", _default_of(place["type"], op.name, "limit"))
    if place["type"] == "btree":
        return await _export_btree(node, op, doc, place, args, limit)
    if place["type"] == "hash":
        key = lambda d: encode_key(d["_id_"])  # noqa: E731 (the cursor a hash bucket's export gives)
    else:
        key = lambda d: d["_id_"]  # noqa: E731 (a blob's id, lower case)
    cursor = args.get("cursor")
    page: list = []
    while True:
        answers = await node._each_part({**doc, "args": {**args, "cursor": cursor}}, place)
        bad = next((a for _n, _parts, a in answers if a.get("ok") != 1), None)
        if bad is not None:
            return bad
        bound = None
        found: list = []
        for _n, parts, a in answers:
            docs = a["result"]["docs"]
            if len(docs) >= limit:
                last = key(docs[-1])
                bound = last if bound is None or last < bound else bound
            found += [d for d in docs if partition_of(route_value(d, place), place["partitions"]) in parts]
        if bound is not None:
            found = [d for d in found if key(d) <= bound]
        found.sort(key=key)
        page += found[:limit - len(page)]
        if len(page) >= limit:
            return {"ok": 1, "result": {"docs": page, "next": key(page[-1])}}
        if bound is None:
            return {"ok": 1, "result": {"docs": page, "next": None}}
        cursor = bound


async def _export_btree(node: "ClusterNode", op: operations.Operation, doc: dict, place: dict, args: dict,
                        limit: int) -> dict:
    """export over a spread btree bucket: one page in sort-key order across the owners, ties in their insertion
    order, as one node gives it; ``next`` is, as there, the storage key of the page's last entry on its owner.

    As for a hash bucket, each owner sends its first ``limit`` entries after the cursor and the page is the
    first ``limit`` of them all up to the least last sort value of the full pages. Entries with equal sort
    values share a partition, so they come from one owner, in its order; and a cursor (an encoded sort value
    and a sequence number) taken from one owner places every other owner after that sort value. The page's
    last entry's key is its owner's ``next`` when it ends that owner's page; else that owner is asked again
    for the page up to that entry, whose ``next`` it is (the whole page read again if the owner's entries
    changed between the two)."""
    from .moves import PARTS_FIELD  # noqa: PLC0415
    from .node import _btree_order, route_value  # noqa: PLC0415

    order = _btree_order(place, doc["bucket"])
    cursor = args.get("cursor")
    page: list = []
    changed = 0
    while True:
        sent = {**args, "cursor": cursor}
        answers = await node._each_part({**doc, "args": sent}, place)
        bad = next((a for _n, _parts, a in answers if a.get("ok") != 1), None)
        if bad is not None:
            return bad
        bound = after = None
        found: list = []  # (encoded sort value, node, its partitions, position in its page, entry, its page)
        for n, parts, a in answers:
            docs = a["result"]["docs"]
            if len(docs) >= limit and (bound is None or order(docs[-1]) < bound):
                bound, after = order(docs[-1]), a["result"]["next"]
            found += [(order(d), n, parts, i, d, a["result"]) for i, d in enumerate(docs)
                      if partition_of(route_value(d, place), place["partitions"]) in parts]
        if bound is not None:
            found = [f for f in found if f[0] <= bound]
        found.sort(key=lambda f: f[0])  # (stable: ties come from one owner, in its order)
        taken = found[:limit - len(page)]
        if len(page) + len(taken) < limit:
            page += [f[4] for f in taken]
            if bound is None:
                return {"ok": 1, "result": {"docs": page, "next": None}}
            cursor = after  # every entry up to the bound is in the page: go on after it
            continue
        _enc, n, parts, i, last, its = taken[-1]
        if i == len(its["docs"]) - 1 and its["next"] is not None:
            return {"ok": 1, "result": {"docs": page + [f[4] for f in taken], "next": its["next"]}}
        again = await node._here_or_there(n, {**doc, PARTS_FIELD: sorted(parts), "args": {**sent, "limit": i + 1}},
                                          op, place)
        if again.get("ok") != 1:
            return again
        docs = again["result"]["docs"]
        if docs and docs[-1] == last and again["result"]["next"] is not None:
            return {"ok": 1, "result": {"docs": page + [f[4] for f in taken], "next": again["result"]["next"]}}
        changed += 1  # (the owner's entries changed between the two reads: this round again)
        if changed > 5:
            raise PartitionUnavailableError(f"export of {doc['db']}.{doc['bucket']}: its entries kept changing under "
                                            "the page; ask for it again", node=n)


async def distinct(node: "ClusterNode", op: operations.Operation, doc: dict, place: dict) -> dict:
    """distinct over a spread hash bucket: the matching documents read here a page at a time, and their values
    taken as one node takes them (an array's elements one by one), deduplicated, in the order of values."""
    from ..stores.hash import _is_leaf_array  # noqa: PLC0415
    from ..values.paths import MISSING, resolve, split_path  # noqa: PLC0415
    from .node import NODE_FIELD  # noqa: PLC0415

    args = doc.get("args") or {}
    field = args.get("field") if isinstance(args, dict) else None
    if not isinstance(field, str) or any(op.param(k) is None for k in args):
        return await node.server.run_here({k: v for k, v in doc.items() if k != NODE_FIELD})  # refused there
    parts = split_path(field, what="distinct field")
    source, _extras = await cluster_cursors.matching(node, doc, place, args.get("filter"))

    def values() -> list:
        seen: dict = {}
        for d in source:
            for value in resolve(d, parts):
                if value is MISSING or isinstance(value, (list, tuple)) and _is_leaf_array(d, parts, value):
                    continue
                seen.setdefault(encode_key(value), value)
        return [seen[k] for k in sorted(seen)]
    try:
        return {"ok": 1, "result": await asyncio.get_running_loop().run_in_executor(None, values)}
    finally:
        source.release()


async def aggregate(node: "ClusterNode", op: operations.Operation, doc: dict, place: dict) -> dict:
    """aggregate over a spread hash bucket (or a whole one whose ``$lookup`` reads a bucket spread or owned by
    another node): the documents a leading ``$match`` keeps (every document without one) read here in key
    order a page at a time from each owner's cursor, and the whole pipeline run over them here, within the same
    stage limits as on one node; a ``$lookup``'s bucket is read once, whole, wherever it is (a spread one in
    pages). With ``batch_size`` (and no explain), its output is answered through a cursor of this node."""
    from ..values.pipeline import Limits, compile_pipeline  # noqa: PLC0415
    from .node import _SEARCH, NODE_FIELD, _lookups  # noqa: PLC0415

    args = doc.get("args") or {}
    pipeline = args.get("pipeline") if isinstance(args, dict) else None
    explain = args.get("explain", False) if isinstance(args, dict) else False
    if not isinstance(pipeline, list) or not isinstance(explain, bool) or any(op.param(k) is None for k in args):
        return await node.server.run_here({k: v for k, v in doc.items() if k != NODE_FIELD})  # refused there
    size = cluster_cursors.check_batch_size(args.get("batch_size"))
    loop = asyncio.get_running_loop()
    joined: dict[str, list] = {}
    for name in _lookups(pipeline):
        if not isinstance(name, str) or name in joined:
            continue
        joined_place = await node._placement(doc["db"], name)
        if joined_place is not None and joined_place["type"] != "hash":
            raise BadValueError(f"$lookup joins hash buckets; {name!r} is a {joined_place['type']} bucket")
        if joined_place is not None:  # read in pages from its owners, held here whole
            source, _extras = await cluster_cursors.matching(node, {"db": doc["db"], "bucket": name},
                                                              joined_place, None)
            try:
                joined[name] = await loop.run_in_executor(None, list, source)
            finally:
                source.release()
            continue
        got = await node._run({"op": _SEARCH.name, "db": doc["db"], "bucket": name, "args": {}})
        if got.get("ok") != 1:
            return got
        joined[name] = got["result"]

    def lookup(name):
        if name not in joined:
            raise VerbNotSupportedError(f"aggregate over a spread bucket: $lookup from {name!r} is not read here")
        return joined[name]
    options = node.server.engine.options
    compiled = compile_pipeline(pipeline, limits=Limits(options.stage_memory_bytes, options.stage_max_documents),
                                lookup=lookup)
    source, extras = await cluster_cursors.matching(node, doc, place, compiled.leading_match)
    if size is not None and not explain:  # its output through a cursor of this node
        return await cluster_cursors.opened(node, source, f"aggregate on {doc['db']}.{doc['bucket']}",
                                            compiled.run(source), size, extras)
    gathered = [0]

    def counted():
        for d in source:
            gathered[0] += 1
            yield d
    try:
        out = await loop.run_in_executor(None, lambda: list(compiled.run(counted())))
    finally:
        source.release()
    if explain:
        extras["explain"] = {**extras, "gathered": gathered[0], "returned": len(out)}
    return {"ok": 1, "result": out, **extras}
