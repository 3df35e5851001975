"""A partitioned queue's partitions on a node: one hidden local bucket each, and a node's part of every verb over them.

A fifo, lifo or heap declared with ``partitions: N`` and ``group: "<field>"`` keeps each
partition a node owns in a local bucket of its own, ``<bucket>~p<p>`` (``catalog.part_name``:
no name a user gives can hold ``~``), declared as the bucket is, made when the node first
writes to the partition or receives it (``catalog_operations.create_part``), dropped when it
hands it over. The bucket of the user's name stays empty on every node. These buckets are
left out of list_buckets, of the bucket names an error lists, and so of dump and of the
admin ``check``; a client's request naming one is refused by the server.

- A push (and the part of a batch_push or load of one partition) runs on its partition's
  bucket: the node rewrites the bucket of the local request.
- A node's part of a pop, peek or claim takes from its partitions' buckets in turn, starting
  one further at each pop or claim (fair); a heap's, the best of their tops (heaps.py's way,
  across partitions). ``length`` sums; ``list`` concatenates the partitions (a heap's: merged in
  pop order). A fifo's or lifo's list asks each partition only for its own slice of the page, worked
  out from how many elements each lists (``slices``): the node asked does so over the owners, each
  owner over its partitions, so ``after`` may be as large as on one server (``list_over_owners``).
- A claimId names its partition: ``<p>/<claimId of the partition's bucket>``. ack, release
  and extend are routed by that partition (``ClusterNode._partition``), like a push, so they
  reach the claim wherever the partition moved.
- A partition moves as a whole queue does (queue_moves.py on its hidden bucket).
"""

from __future__ import annotations

import asyncio

from .. import operations
from ..catalog import part_name
from ..catalog_operations import create_part, drop_part
from ..errors import BadValueError, HoardError, NotFoundError, PartitionUnavailableError, VerbNotSupportedError
from . import heaps
from .partitions import partition_of

#: The request field that names the partition a node's request acts on (an export's page of one partition).
PART_FIELD = "_qpart"
#: The request field of a node's ``length`` asking how many elements its partitions' lists show (a fifo's
#: ``length`` also counts the claimed elements due again, which its list does not show): ``list_over_owners``.
LISTED_FIELD = "_qlisted"
#: The verb a queue's owners are asked how many their partitions list with (marked LISTED_FIELD).
_LENGTH = next(o for o in operations.VERBS.values() if o.gather == "sum" and "fifo" in o.types)
#: Between a partition and the partition's own claimId in a partitioned queue's claimIds: ``3/000000000000002a.9f``.
CLAIM_SEP = "/"


def partitioned(place: dict | None) -> bool:
    """Whether a placement is a partitioned queue's (its partitions kept in hidden local buckets)."""
    return place is not None and place.get("group") is not None and place["partitions"] > 1


def claim_partition(claim_id, partitions: int) -> int | None:
    """The partition a claimId names (``<p>/<id>``), or None when it names none."""
    if not isinstance(claim_id, str):
        return None
    head, sep, _ = claim_id.partition(CLAIM_SEP)
    if not sep or not head.isdigit() or int(head) >= partitions:
        return None
    return int(head)


def claims_partition(args, partitions: int) -> int | None:
    """The one partition every claimId of an ack, release or extend names, or None (none, or several)."""
    given = args.get("claimId") if isinstance(args, dict) else None
    ids = [given] if isinstance(given, str) else given
    if not isinstance(ids, list) or not ids:
        return None
    found = {claim_partition(i, partitions) for i in ids}
    return found.pop() if len(found) == 1 and None not in found else None


def named_partition(doc: dict, partitions: int) -> int | None:
    """The partition a node's request names (``_qpart``: an export's page), or None."""
    p = doc.get(PART_FIELD)
    return p if type(p) is int and 0 <= p < partitions else None


def exists(node, db: str, bucket: str, p: int) -> bool:
    return node.server.engine.catalog.has_bucket(db, part_name(bucket, p))


async def ensure(node, db: str, bucket: str, p: int) -> str:
    """The hidden local bucket of partition ``p``, made here if it is not yet; its name."""
    name = part_name(bucket, p)
    if not node.server.engine.catalog.has_bucket(db, name):
        server = node.server
        await server.loop.run_in_executor(server._writes, create_part, server.engine, db, bucket, p)
    return name


async def drop(node, db: str, bucket: str, p: int) -> None:
    """Drop this node's hidden local bucket of partition ``p`` (handed over), if it has one."""
    server = node.server
    await server.loop.run_in_executor(server._writes, drop_part, server.engine, db, part_name(bucket, p))


def _unprefixed(doc: dict, p: int) -> dict:
    """An ack, release or extend's claimIds without their ``<p>/``."""
    args = dict(doc.get("args") or {})
    given = args.get("claimId")

    def strip(i: str) -> str:
        return i.partition(CLAIM_SEP)[2] if claim_partition(i, 1 << 30) == p else i

    if isinstance(given, str):
        args["claimId"] = strip(given)
    elif isinstance(given, list):
        args["claimId"] = [strip(i) if isinstance(i, str) else i for i in given]
    return {**doc, "args": args}


def _prefixed(result, p: int, claimed: bool):
    if claimed and isinstance(result, list):
        return [{**c, "claimId": f"{p}{CLAIM_SEP}{c['claimId']}"} if isinstance(c, dict) and "claimId" in c else c
                for c in result]
    if isinstance(result, dict) and isinstance(result.get("claimId"), str):
        return {**result, "claimId": f"{p}{CLAIM_SEP}{result['claimId']}"}
    return result


async def run_one(node, doc: dict, place: dict, p: int) -> dict:
    """A request for partition ``p`` (a push; an ack, release or extend of its claims; a page of its export), on its
    hidden bucket here (``doc`` without ``_node``; the partition held)."""
    op = operations.OPERATIONS[doc["op"]]
    doc = {k: v for k, v in doc.items() if k != PART_FIELD}
    if not op.write and not exists(node, doc["db"], doc["bucket"], p):  # a partition never written here: empty
        if op.gather == "documents":
            return {"ok": 1, "result": []}  # (a list's, read by a cluster cursor: hoarddb/cluster/cursors.py)
        return {"ok": 1, "result": {"docs": [], "next": None}}  # (an export's page)
    name = await ensure(node, doc["db"], doc["bucket"], p)
    local = {**doc, "bucket": name}
    if op.gather == "by_claim":
        local = _unprefixed(local, p)
    answer = await node.server.run_here(local)
    if answer.get("ok") == 1 and op.gather == "by_claim":
        answer = {**answer, "result": _prefixed(answer.get("result"), p, False)}
    return answer


async def part(node, op: operations.Operation, doc: dict, place: dict) -> dict:
    """This node's part of a request over every partition of a partitioned queue, on the partitions it holds."""
    try:
        return await _part(node, op, doc, place)
    except HoardError as e:
        return e.to_answer()


async def _held(node, db: str, bucket: str, place: dict, skip_fenced: bool) -> list[int]:
    """The partitions of the bucket this node holds now, after their fences (a fenced one: waited for, or skipped
    when ``skip_fenced``)."""
    await node._claim_assigned(db, bucket)
    me, holds = node.node_id, node.coord.holds
    fences = node.mover.sending.get((db, bucket)) is not None  # (a move out of this bucket: each partition waited for)
    out: list[int] = []
    for p, owner in enumerate(place["owners"]):
        if owner != me:
            continue
        try:
            if fences:
                await node.mover.wait_fence(db, bucket, p)
        except PartitionUnavailableError:
            if skip_fenced:
                continue
            raise
        if holds(db, bucket, p) is not None:
            out.append(p)
    return out


async def _part(node, op: operations.Operation, doc: dict, place: dict) -> dict:
    db, bucket = doc["db"], doc["bucket"]
    local = {k: v for k, v in doc.items() if k not in ("_node", "_parts")}
    args = dict(local.get("args") or {})
    taking = op.gather in ("turns", "turns_claimed")
    held = await _held(node, db, bucket, place, skip_fenced=taking)
    out = node.mover.sending.get((db, bucket))
    if out is not None and out.fenced and out.parts.intersection(held):
        held = [p for p in held if p not in out.parts]  # fenced since (a hand-over under way): not touched now
    # counted, so that a move waits for this part: one under way by its fence (moves.Mover._fence), one that
    # begins meanwhile before it starts (Mover._move waits for _running)
    running = node.mover._running
    if out is not None:
        out.inflight += 1
        out.idle.clear()
    else:
        running[(db, bucket)] = running.get((db, bucket), 0) + 1
    try:
        return await _run_part(node, op, local, args, place, held)
    finally:
        if out is not None:
            out.inflight -= 1
            if not out.inflight:
                out.idle.set()
        else:
            running[(db, bucket)] -= 1


async def _on(node, local: dict, p: int, args: dict | None = None) -> dict:
    request = {**local, "bucket": part_name(local["bucket"], p)}
    if args is not None:
        request["args"] = args
    if not exists(node, local["db"], local["bucket"], p):
        op = operations.OPERATIONS[local["op"]]
        if op.write and op.gather in ("split",):
            await ensure(node, local["db"], local["bucket"], p)
        else:
            return None  # (never written here: empty)
    return await node.server.run_here(request)


async def _run_part(node, op, local: dict, args: dict, place: dict, held: list[int]) -> dict:
    db, bucket = local["db"], local["bucket"]
    if op.gather == "sum" and local.get(LISTED_FIELD) is True:  # how many the partitions' lists show
        return {"ok": 1, "result": sum(_listed(node, db, bucket, p) for p in held)}
    if op.gather == "sum":  # length
        total = 0
        for p in held:
            a = await _on(node, local, p)
            if a is None:
                continue
            if a.get("ok") != 1:
                return a
            total += a["result"]
        return {"ok": 1, "result": total}
    if op.gather == "split":  # batch_push, load: each partition's documents on its bucket
        from .node import _NONE, route_value
        docs = args.get("docs")
        if not isinstance(docs, list):
            return await node.server.run_here(local)  # refused as on one server
        groups: dict[int, list] = {}
        for d in docs:
            value = route_value(d, place)
            groups.setdefault(partition_of(None if value is _NONE else value, place["partitions"]), []).append(d)
        missing = sorted(set(groups) - set(held))
        if missing:
            raise PartitionUnavailableError(
                f"partitions {missing} of {db}.{bucket} are not held by node {node.node_id}; send them to their owner",
                node=place["owners"][missing[0]], moved=True)
        answers = []
        for p in sorted(groups):
            answers.append(await _on(node, local, p, {**args, "docs": groups[p]}))
        bad = next((a for a in answers if a.get("ok") != 1), None)
        if bad is not None:
            return bad
        results = [a.get("result") for a in answers]
        if all(type(r) is int for r in results):
            return {"ok": 1, "result": sum(results)}
        if all(isinstance(r, dict) for r in results):
            merged: dict = {}
            for r in results:
                for k, v in r.items():
                    merged[k] = merged.get(k, 0) + v if isinstance(v, int) else v
            return {"ok": 1, "result": merged}
        return {"ok": 1, "result": [x for r in results for x in (r or [])]}
    if op.gather == "documents":  # list: the partitions' elements, partition after partition (a heap's: pop order)
        page = page_of(op, args, place["type"])
        if page is None:
            return await node.server.run_here(local)  # refused as on one server, saying what it takes
        after, limit = page
        if place["type"] != "heap":  # each partition asked only for its slice of [after, after + limit)
            if not _listable(node, limit):
                return await node.server.run_here(local)  # refused as on one server, saying what it takes
            got = []
            for i, skip, take in slices([_listed(node, db, bucket, p) for p in held], after, limit):
                a = await _on(node, local, held[i], {**args, "after": skip, "limit": take})
                if a is None:
                    continue
                if a.get("ok") != 1:
                    return a
                got += a["result"]
            return {"ok": 1, "result": got}
        answers = []
        for p in held:
            a = await _on(node, local, p, {**args, "after": 0, "limit": after + limit})
            if a is None:
                continue
            if a.get("ok") != 1:
                return a
            answers.append(a)
        return {"ok": 1, "result": heaps.merged_list(answers, after, limit)}  # (a heap's: merged in pop order)
    if op.gather not in ("turns", "turns_claimed"):
        raise VerbNotSupportedError(f"{op.name} over a partitioned queue (partitions: {place['partitions']}) is not "
                                    "built yet; declare the bucket without partitions to use it")
    limit = args.get("limit")
    want = 1 if limit is None else limit
    if isinstance(want, bool) or not isinstance(want, int) or want < 1:
        return await node.server.run_here(local)  # refused as on one server, saying what it takes
    claiming = op.gather == "turns_claimed"
    key = (db, bucket, "parts")
    start = node._turns.get(key, 0) % len(held) if held else 0
    if op.write:
        node._turns[key] = start + 1
    order = held[start:] + held[:start]
    if place["type"] == "heap":
        got = await _heap_take(node, op, local, args, order, want, claiming)
    else:
        got = []
        for p in order:
            if len(got) >= want:
                break
            if not _ready(node, db, bucket, p):
                continue  # (an empty partition costs no pop: a pop is a write, run in the group commit)
            a = await _on(node, local, p, {**args, "limit": want - len(got)})
            if a is None:
                continue
            if a.get("ok") != 1:
                if got:
                    break
                return a
            got.extend(_prefixed(a.get("result") or [], p, claiming) if claiming else (a.get("result") or []))
    if limit is None and not claiming:
        return {"ok": 1, "result": got[0] if got else None}
    return {"ok": 1, "result": got}


def slices(counts: list[int], after: int, limit: int) -> list[tuple[int, int, int]]:
    """Which of parts listed one after the other (``counts``: how many elements each lists) hold elements ``after``
    to ``after + limit`` of the whole: ``(index, after within it, how many it gives)``, in order."""
    out = []
    for i, n in enumerate(counts):
        if limit <= 0:
            break
        if after >= n:
            after -= n
            continue
        take = min(n - after, limit)
        out.append((i, after, take))
        after, limit = 0, limit - take
    return out


def page_of(op, args: dict, kind: str) -> tuple[int, int] | None:
    """A list's ``after`` and ``limit`` (the store type's default limit when left out), or None when either is not
    a whole number a list takes (the engine then refuses it, saying what it takes)."""
    from .node import _default_of
    after, limit = args.get("after", 0), args.get("limit")
    if limit is None:
        limit = _default_of(kind, op.name, "limit")
    if type(after) is not int or type(limit) is not int or after < 0:
        return None
    return after, limit


def _listable(node, limit) -> bool:
    """Whether ``limit`` is one a list takes here (1 to ``max_peek``): else the engine refuses it, saying so."""
    return type(limit) is int and 1 <= limit <= node.server.engine.options.max_peek


def _listed(node, db: str, bucket: str, p: int) -> int:
    """How many elements a fifo's or lifo's partition ``p`` here lists: its log's length, read in memory (O(1)). Not
    ``length``'s answer: a fifo's counts too the claimed elements due again, kept in its claim table, which its list
    does not show."""
    return _in_memory(node, db, bucket, p, lambda store: len(store.log), 0)


def _in_memory(node, db: str, bucket: str, p: int, read, default):
    """``read(store)`` of partition ``p``'s bucket here (what it keeps in memory), or ``default`` when there is none
    (none made yet, or dropped meanwhile: handed over)."""
    if not exists(node, db, bucket, p):
        return default
    try:
        return read(node.server.engine._store(db, part_name(bucket, p)))
    except HoardError:
        return default


def deep_list(node, op, doc: dict, place: dict) -> bool:
    """Whether a list asked with ``batch_size`` over a partitioned fifo or lifo is answered whole by
    ``list_over_owners`` rather than by a cluster cursor: when ``after + limit`` passes ``max_peek``, which the cursor
    (cluster/cursors.py ``open_queue_list``: each partition's first ``after + limit``) cannot read, and the whole
    answer can, within one message."""
    args = doc.get("args")
    if op.gather != "documents" or not partitioned(place) or place["type"] == "heap" or type(args) is not dict:
        return False
    page = page_of(op, args, place["type"])
    return page is not None and _listable(node, page[1]) and sum(page) > node.server.engine.options.max_peek


async def list_over_owners(node, op, doc: dict, owners: list[str], place: dict) -> dict:
    """A fifo's or lifo's list over a partitioned queue, asked of the node the client reached: the owners' elements
    one owner after the other (by name), each owner's partitions in turn. Each owner is first asked how many its
    partitions list (``LISTED_FIELD``), then only those holding the page are asked, each for its own slice, so that
    ``after`` may be as large as one server takes and only ``limit`` is bounded by ``max_peek``. A page read while
    elements are pushed or popped may be off by them, as two pages over a changing queue are."""
    args = dict(doc.get("args") or {})
    page = page_of(op, args, place["type"])
    if page is None or not _listable(node, page[1]):
        return await node._here_or_there(owners[0], doc)  # refused there, saying what it takes
    after, limit = page
    if len(owners) == 1:
        return await node._here_or_there(owners[0], doc)
    counted = await asyncio.gather(*(node._here_or_there(n, {**doc, "op": _LENGTH.name, "args": {}, LISTED_FIELD: True})
                                     for n in owners))
    bad = next((a for a in counted if a.get("ok") != 1), None)
    if bad is not None:
        return bad
    parts = slices([a["result"] for a in counted], after, limit)
    answers = await asyncio.gather(*(node._here_or_there(owners[i], {**doc, "args": {**args, "after": skip,
                                                                                     "limit": take}})
                                     for i, skip, take in parts))
    bad = next((a for a in answers if a.get("ok") != 1), None)
    if bad is not None:
        return bad
    return {"ok": 1, "result": [d for a in answers for d in a["result"]]}


def _ready(node, db: str, bucket: str, p: int) -> bool:
    """Whether partition ``p``'s bucket here may have an element to give (its length, read in memory: O(1) for a
    fifo or lifo; a claim table's elements due again counted)."""
    n = _in_memory(node, db, bucket, p, lambda store: store.length(), 0)
    return getattr(n, "result", n) != 0


async def _heap_take(node, op, local: dict, args: dict, order: list[int], want: int, claiming: bool) -> list:
    """A heap's pop, claim or peek over this node's partitions: the best of their tops (heaps.py, across partitions;
    no await between a partition's peek and its pop other than the other partitions', all on this node)."""
    got: list[tuple[str, dict]] = []
    for _round in range(heaps.ROUNDS if op.write else 1):
        need = want - len(got)
        tops = []
        for p in order:
            a = await _on(node, {**local, "op": heaps.PEEK}, p, {"limit": need})
            if a is None or a.get("ok") != 1:
                continue
            tops.append((str(p), a.get("result") or []))
        chosen = heaps.best(tops)[:need]
        if not op.write:
            return [e for _, e in chosen]
        counts: dict[str, int] = {}
        for p, _e in chosen:
            counts[p] = counts.get(p, 0) + 1
        if not counts:
            break
        taken = []
        for p in [str(q) for q in order if str(q) in counts]:
            a = await _on(node, local, int(p), {**args, "limit": counts[p]})
            if a is None or a.get("ok") != 1:
                continue
            items = a.get("result") or []
            taken.append((p, _prefixed(items, int(p), True) if claiming else items))
        got += heaps.best(taken, claiming)
        if len(got) >= want or sum(len(i) for _, i in taken) >= sum(counts.values()):
            break
    return [e for _, e in heaps.best([(n, [e]) for n, e in got], claiming)]


def merge_by_claim(answers: list[dict], single: bool) -> dict:
    """The answers of an ack, release or extend sent to several partitions, as one: the first refusal, else the
    result (one claimId's), or the counts added up."""
    bad = next((a for a in answers if a.get("ok") != 1), None)
    if bad is not None:
        return bad
    results = [a.get("result") for a in answers]
    if single or not all(isinstance(r, dict) for r in results):
        return {"ok": 1, "result": results[0]}
    merged: dict = {}
    for r in results:
        for k, v in r.items():
            merged[k] = merged.get(k, 0) + v if isinstance(v, int) else v
    return {"ok": 1, "result": merged}


async def claims_by_partition(node, op, doc: dict, place: dict) -> dict:
    """ack, release or extend over a partitioned queue with claimIds of several partitions: each partition's sent
    to its owner (``ClusterNode._one``), the answers merged."""
    args = dict(doc.get("args") or {})
    given = args.get("claimId")
    single = isinstance(given, str)
    ids = [given] if single else given
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        owners = sorted(set(place["owners"]))
        return await node._here_or_there(owners[0], doc)  # refused there, saying what it takes
    by_part: dict[int, list[str]] = {}
    for i in ids:
        p = claim_partition(i, place["partitions"])
        if p is None:
            raise NotFoundError(f"{op.name}: {i!r:.80} is not a claimId of this partitioned queue (its "
                                f"claimIds are <partition>{CLAIM_SEP}<id>, as claim gave them)")
        by_part.setdefault(p, []).append(i)
    answers = await asyncio.gather(*(node._one({**doc, "args": {**args, "claimId": by_part[p][0] if single
                                                                 else by_part[p]}}, place, p)
                                     for p in sorted(by_part)))
    return merge_by_claim(list(answers), single)


async def export(node, op, doc: dict, place: dict) -> dict:
    """export of a partitioned queue: its partitions' pages one partition after the other (each partition's elements
    in its storage order), each page asked of the partition's owner. The cursor is ``{p, c}``: the partition to go on
    with and its own cursor there; ``next`` is None once the last partition is read."""
    args = dict(doc.get("args") or {})
    cursor, limit = args.get("cursor"), args.get("limit", 1000)
    partitions = place["partitions"]
    if cursor is None:
        p, inner = 0, None
    elif isinstance(cursor, dict) and set(cursor) == {"p", "c"} and type(cursor["p"]) is int \
            and 0 <= cursor["p"] < partitions:
        p, inner = cursor["p"], cursor["c"]
    else:
        raise BadValueError(f"export's cursor of a partitioned queue is the next of the previous page, "
                            f"{{p: partition, c: its cursor}}; got {cursor!r:.80}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        owners = sorted(set(place["owners"]))
        return await node._here_or_there(owners[0], doc)  # refused there, saying what it takes
    docs: list = []
    while p < partitions and len(docs) < limit:
        answer = await node._one({**doc, PART_FIELD: p, "args": {**args, "cursor": inner, "limit": limit - len(docs)}},
                                 place, p)
        if answer.get("ok") != 1:
            return answer
        page = answer["result"]
        docs += page["docs"]
        if page.get("next") is None:
            p, inner = p + 1, None
        else:
            inner = page["next"]
    return {"ok": 1, "result": {"docs": docs, "next": None if p >= partitions else {"p": p, "c": inner}}}
