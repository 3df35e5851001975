"""The contract of fifo, lifo and heap stores, as buckets and as store fields: order, ties, limits, refusals."""

from __future__ import annotations

import datetime
import functools
import math

import pytest
from bson import Decimal128, Int64, ObjectId

from .places import refused

QUEUES = ("fifo", "lifo", "heap")


def element(kind: str, n, priority=1) -> dict:
    """An element a store of ``kind`` takes (a heap's carries its priority)."""
    return {"priority": priority, "n": n} if kind == "heap" else {"n": n}


def ns(docs) -> list:
    return [d["n"] for d in docs]


def pop_order(kind: str, pushed: list) -> list:
    """The order pop takes the ``n`` of elements pushed in this order (heap: all of priority 1)."""
    return list(reversed(pushed)) if kind == "lifo" else list(pushed)


# -- push, pop, peek ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", QUEUES)
def test_push_answers_null_and_batch_push_how_many(place, kind):
    q = place.make(kind)
    assert q.push(element(kind, 0)) is None
    assert q.batch_push([element(kind, 1), element(kind, 2)]) == 2
    assert q.batchPush([element(kind, 3)]) == 1  # the alias
    assert q.batch_push([]) == 0
    assert q.length() == 4


@pytest.mark.parametrize("kind", QUEUES)
def test_pop_takes_its_end_and_peek_shows_what_pop_would_take(place, kind):
    q = place.make(kind)
    q.batch_push([element(kind, n) for n in range(5)])
    order = pop_order(kind, list(range(5)))
    assert q.peek() == element(kind, order[0])
    assert q.length() == 5  # peek removes nothing
    assert q.pop() == element(kind, order[0])
    assert q.peek() == element(kind, order[1])
    assert ns(q.peek(3)) == order[1:4] == ns(q.peek({"limit": 3})) == ns(q.peek(limit=3))
    assert ns(q.pop(2)) == order[1:3]
    assert ns(q.pop({"limit": 10})) == order[3:]
    assert q.length() == 0


@pytest.mark.parametrize("kind", QUEUES)
def test_an_empty_store_pops_and_peeks_nothing(place, kind):
    q = place.make(kind)
    assert q.pop() is None and q.peek() is None
    assert q.pop(5) == [] and q.peek(5) == [] and q.list() == []
    assert q.length() == 0


@pytest.mark.parametrize("kind", QUEUES)
def test_pushes_between_pops_keep_the_order(place, kind):
    q = place.make(kind)
    q.push(element(kind, 1))
    q.push(element(kind, 2))
    first = q.pop()
    q.batch_push([element(kind, 3), element(kind, 4)])
    rest = ns(q.pop(10))
    if kind == "lifo":
        assert (first["n"], rest) == (2, [4, 3, 1])
    else:
        assert (first["n"], rest) == (1, [2, 3, 4])


@pytest.mark.parametrize("kind", QUEUES)
def test_an_element_comes_back_as_it_was_pushed(place, kind):
    doc = {"priority": 2.5, "when": datetime.datetime(2026, 3, 14, 9, 30, tzinfo=datetime.UTC),
           "oid": ObjectId("65f0a1b2c3d4e5f601234567"), "dec": Decimal128("1.10"), "big": Int64(2 ** 40),
           "bin": b"\x00\xff", "none": None, "nested": {"list": [1, 2.5, "x", [True, False]]}, "text": "née ✓"}
    q = place.make(kind)
    q.push(doc)
    assert q.peek() == doc and q.list() == [doc]
    got = q.pop()
    assert got == doc and list(got) == list(doc)  # fields in their order, the priority kept (heap)


# -- list ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ("fifo", "lifo"))
def test_list_reads_in_storage_order_oldest_first_on_both_queues(place, kind):
    q = place.make(kind)
    q.batch_push([element(kind, n) for n in range(10)])
    assert ns(q.list()) == list(range(10))  # on a lifo: the reverse of pop order
    assert ns(q.list(after=3, limit=4)) == [3, 4, 5, 6] == ns(q.list({"after": 3, "limit": 4}))
    assert ns(q.list(after=8)) == [8, 9]
    assert q.list(after=10) == [] and q.list(after=1000) == []
    q.pop(2)
    assert ns(q.list()) == ([2, 3, 4, 5, 6, 7, 8, 9] if kind == "fifo" else [0, 1, 2, 3, 4, 5, 6, 7])
    assert q.length() == 8


def test_a_heap_lists_in_pop_order(place):
    h = place.make("heap")
    h.batch_push([element("heap", n, priority=p) for n, p in enumerate([1, 5, 3, 5, 2])])
    assert ns(h.list()) == [1, 3, 2, 4, 0]
    assert ns(h.list(after=1, limit=3)) == [3, 2, 4]
    assert ns(h.list(after=4)) == [0] and h.list(after=5) == []
    assert ns(h.list()) == ns(h.peek(10)) == ns(h.pop(10))


@pytest.mark.parametrize("kind", QUEUES)
def test_list_gives_100_unless_asked_and_1000_at_most(place, kind):
    q = place.make(kind)
    for start in range(0, 1001, 100):
        q.batch_push([element(kind, n) for n in range(start, min(start + 100, 1001))])
    assert len(q.list()) == 100
    assert len(q.list(limit=1000)) == 1000
    assert len(q.peek(1000)) == 1000
    assert ns(q.list(after=1000, limit=5)) == [1000]  # (a heap of equal priorities: in push order)
    refused("LIMIT_EXCEEDED", lambda: q.list(limit=1001), "1000")
    refused("LIMIT_EXCEEDED", lambda: q.peek(1001), "1000")
    assert q.length() == 1001


# -- limits and refusals ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", QUEUES)
def test_pop_takes_at_most_100_in_one_write(place, kind):
    q = place.make(kind)
    q.batch_push([element(kind, n) for n in range(150)])
    refused("LIMIT_EXCEEDED", lambda: q.pop(101), "at most 100")
    assert q.length() == 150  # nothing taken
    assert len(q.pop(100)) == 100 and q.length() == 50


#: Calls a queue or heap refuses, each with its error: counts out of range, arguments of the wrong kind.
BAD_CALLS = [
    ("pop(0)", lambda q: q.pop(0), "BAD_VALUE"),
    ("pop(-1)", lambda q: q.pop(-1), "BAD_VALUE"),
    ("peek(0)", lambda q: q.peek(0), "BAD_VALUE"),
    ("list(limit=0)", lambda q: q.list(limit=0), "BAD_VALUE"),
    ("list(after=-1)", lambda q: q.list(after=-1), "BAD_VALUE"),
    ("list(after='x')", lambda q: q.list(after="x"), "BAD_VALUE"),
    ("list(after=1.5)", lambda q: q.list(after=1.5), "BAD_VALUE"),
    ("pop('five')", lambda q: q.pop("five"), "INVALID_ARGUMENT"),
    ("pop(True)", lambda q: q.pop(True), "INVALID_ARGUMENT"),
    ("peek(2.0)", lambda q: q.peek(2.0), "INVALID_ARGUMENT"),
    ("peek({limt: 5})", lambda q: q.peek({"limt": 5}), "INVALID_ARGUMENT"),
    ("pop(2 ** 70)", lambda q: q.pop(2 ** 70), "INVALID_ARGUMENT"),
    ("push(5)", lambda q: q.push(5), "INVALID_ARGUMENT"),
    ("push(doc, doc)", lambda q: q.push({"priority": 1}, {"b": 2}), "INVALID_ARGUMENT"),
    ("batch_push(doc)", lambda q: q.batch_push({"n": 1}), "INVALID_ARGUMENT"),
]


@pytest.mark.parametrize("kind", QUEUES)
def test_bad_counts_and_arguments_are_refused_and_nothing_changes(place, kind):
    q = place.make(kind)
    q.batch_push([element(kind, n) for n in range(3)])
    for text, call, code in BAD_CALLS:
        try:
            refused(code, functools.partial(call, q))
        except AssertionError as exc:
            raise AssertionError(f"{text}: {exc}") from None
    assert q.length() == 3 and ns(q.list()) == [0, 1, 2]


@pytest.mark.parametrize("kind", QUEUES)
def test_a_batch_with_one_element_that_is_no_document_is_refused_whole(place, kind):
    q = place.make(kind)
    refused("NOT_A_DOCUMENT", lambda: q.batch_push([element(kind, 1), 5, element(kind, 2)]), "1")
    assert q.length() == 0 and q.pop() is None


# -- heap: priorities ---------------------------------------------------------------------------

def test_heap_spec_example(place):
    alerts = place.make("heap")
    alerts.push({"priority": 10, "Msg": "Disk full", "Host": "node-1"})
    alerts.push({"priority": 5, "Msg": "High CPU", "Host": "node-2"})
    alerts.push({"priority": 8, "Msg": "Network latency", "Host": "node-3"})
    assert alerts.pop() == {"priority": 10, "Msg": "Disk full", "Host": "node-1"}
    assert alerts.peek() == {"priority": 8, "Msg": "Network latency", "Host": "node-3"}
    assert alerts.length() == 2


def test_heap_orders_every_kind_of_number_and_ties_leave_in_push_order(place):
    priorities = [3, -1, 2.5, 3.0, Int64(2), -0.5, 1e10, Decimal128("2.5"), 0, -0.0, 3, Int64(-(2 ** 62)),
                  -1e-300, 2.4999, float("inf"), float("-inf")]
    h = place.make("heap")
    h.batch_push([{"priority": p, "n": n} for n, p in enumerate(priorities[:8])])
    for n, p in enumerate(priorities[8:], start=8):
        h.push({"priority": p, "n": n})
    value = [float(p.to_decimal()) if isinstance(p, Decimal128) else float(p) for p in priorities]
    want = sorted(range(len(priorities)), key=lambda n: (-value[n], n))  # highest first, ties by push order
    assert ns(h.peek(100)) == want
    assert ns(h.list(limit=100)) == want
    popped = [h.pop() for _ in priorities]
    assert ns(popped) == want
    assert [d["priority"] for d in popped] == [priorities[n] for n in want]  # each keeps its own priority
    assert h.pop() is None


def test_heap_refuses_a_priority_that_is_not_a_number(place):
    h = place.make("heap")
    h.push({"priority": 1, "n": 0})
    for bad, says in [({"n": 1}, "priority"), ({"priority": "high"}, "number"), ({"priority": True}, "bool"),
                      ({"priority": None}, "number"), ({"priority": float("nan")}, "NaN"),
                      ({"priority": math.nan}, "NaN"), ({"priority": [1]}, "number"),
                      ({"priority": {"$gt": 1}}, "number")]:
        refused("BAD_VALUE", functools.partial(h.push, bad), says)
        refused("BAD_VALUE", functools.partial(h.batch_push, [{"priority": 2, "n": 1}, bad]), says, "1 of the batch")
    assert ns(h.list()) == [0] and h.length() == 1
