"""A partitioned heap's pop, claim, peek and list over its owners: the best of the owners' tops.

A heap declared with ``partitions: N`` and ``group: "<field>"`` keeps each element in the
partition of its group value, as a partitioned fifo does; each owner node keeps the
elements of all its partitions in one local heap, so its top is the best of its
partitions'. A ``pop`` or ``claim`` of ``limit`` elements through any node:

1. asks every owner for its top ``limit`` (a ``peek``, in parallel);
2. merges them, highest priority first (ties: the owners in the turn order, each owner's
   own in its order, which is push order among equals), and keeps the first ``limit``:
   so many from each owner;
3. pops (claims) that many from each owner, in parallel: each owner gives its best at
   that moment.

What is promised: the elements taken are the best of the tops read at step 1. Under
concurrency another pop may take some of them between steps 1 and 3; the owner then gives
its next best instead, so an element of lower priority than one left on another owner can
come out (never one that was not pushed, never one twice). A round that got fewer than
asked (an owner had less than it showed) asks again, at most 3 rounds. With one client
popping, the order is exactly the heap's: highest priority first, equal priorities of one
group in push order (across groups, equal priorities come in no promised order).
"""

from __future__ import annotations

import asyncio

from .. import operations
from ..values.keys import encode_key

#: The verb that shows a queue's next elements without taking them (the table's: turns, and no write).
PEEK = next(o.name for o in operations.VERBS.values() if o.gather == "turns" and not o.write)
#: Rounds of peek-then-pop at most for one pop or claim.
ROUNDS = 3


def _priority(item: dict, claimed: bool):
    element = item.get("element") if claimed else item
    return encode_key(element.get("priority")) if isinstance(element, dict) else b""


def element_priority(element: dict):
    """What a heap's elements are ordered by in pop order (highest first): their priority's encoding (a cluster
    cursor's merge of a partitioned heap's list, hoarddb/cluster/cursors.py)."""
    return _priority(element, False)


def best(answers: list[tuple[str, list]], claimed: bool = False) -> list[tuple[str, dict]]:
    """Every ``(node, element)`` of the owners' answers (given in turn order), highest priority first; ties keep
    the order given (owner after owner, each owner's in its own order)."""
    merged = [(node, e) for node, items in answers for e in items]
    return sorted(merged, key=lambda t: _priority(t[1], claimed), reverse=True)  # (stable, reverse too)


async def take(node, op, doc: dict, owners: list[str], want: int, single: bool) -> dict:
    """pop, claim or peek of a partitioned heap through ``node`` (a ClusterNode), from ``owners`` in turn order."""
    args = dict(doc.get("args") or {})
    claiming = op.gather == "turns_claimed"
    got: list[tuple[str, dict]] = []
    refusal = None
    for _round in range(ROUNDS if op.write else 1):
        need = want - len(got)
        peeked = await asyncio.gather(*(node._here_or_there(n, {**doc, "op": PEEK, "args": {"limit": need}})
                                        for n in owners))
        tops = []
        for n, answer in zip(owners, peeked):
            if answer.get("ok") != 1:
                if answer.get("codeName") != "PARTITION_UNAVAILABLE":
                    return answer
                refusal = refusal or answer  # a node that is down: the others' elements are taken
                continue
            tops.append((n, answer.get("result") or []))
        chosen = best(tops)[:need]
        if not op.write:
            got = chosen
            break
        counts: dict[str, int] = {}
        for n, _e in chosen:
            counts[n] = counts.get(n, 0) + 1
        if not counts:
            break
        takers = [n for n in owners if n in counts]
        answers = await asyncio.gather(*(node._here_or_there(n, {**doc, "args": {**args, "limit": counts[n]}})
                                         for n in takers))
        taken = []
        for n, answer in zip(takers, answers):
            if answer.get("ok") != 1:
                if not got and not taken:
                    return answer
                continue  # (what the others gave is answered; this owner's refusal is not lost work)
            taken.append((n, answer.get("result") or []))  # (claimIds name their partitions: queues.py)
        got += best(taken, claiming)
        if len(got) >= want or sum(len(i) for _, i in taken) >= sum(counts.values()):
            break
    if not got and refusal is not None:
        return refusal
    result = [e for _, e in best([(n, [e]) for n, e in got], claiming)]
    if single:
        return {"ok": 1, "result": result[0] if result else None}
    return {"ok": 1, "result": result}


def merged_list(answers: list[dict], after: int, limit: int) -> list:
    """list over a partitioned heap: every owner's first ``after + limit`` in pop order, merged in pop order."""
    return [e for _, e in best([(str(i), a["result"]) for i, a in enumerate(answers)])][after:after + limit]
