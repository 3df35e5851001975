"""The heap store through the public API: priority order, ties, limits, rebuild on open."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, strategies as st

import hoarddb
from hoarddb import errors
from hoarddb.engine import Engine
from hoarddb.options import Options


def test_spec_example(db):
    alerts = db.create_bucket("Alerts", type="heap")
    alerts.push({"priority": 10, "Msg": "Disk full", "Host": "node-1"})
    alerts.push({"priority": 5, "Msg": "High CPU", "Host": "node-2"})
    alerts.push({"priority": 8, "Msg": "Network latency", "Host": "node-3"})
    assert alerts.pop() == {"priority": 10, "Msg": "Disk full", "Host": "node-1"}
    assert alerts.peek() == {"priority": 8, "Msg": "Network latency", "Host": "node-3"}
    assert alerts.length() == 2


def test_ties_are_first_in_first_out(db):
    h = db.create_bucket("H", type="heap")
    h.batch_push([{"priority": 1, "n": i} for i in range(5)] + [{"priority": 1.0, "n": 5}])
    assert [d["n"] for d in h.pop({"limit": 6})] == [0, 1, 2, 3, 4, 5]


def test_mixed_numeric_priorities(db):
    h = db.create_bucket("H", type="heap")
    for p in [3, -1.5, 2.5, 100, -7, 0]:
        h.push({"priority": p})
    assert [d["priority"] for d in h.peek(10)] == [100, 3, 2.5, 0, -1.5, -7]
    assert [d["priority"] for d in h.list()] == [100, 3, 2.5, 0, -1.5, -7]


@pytest.mark.parametrize("bad", ["high", None, True, float("nan"), [1]])
def test_priority_must_be_a_number(db, bad):
    h = db.create_bucket("H", type="heap")
    with pytest.raises(errors.BadValueError, match="priority"):
        h.push({"priority": bad})
    assert h.length() == 0


def test_missing_priority_and_batch_all_or_nothing(db):
    h = db.create_bucket("H", type="heap")
    with pytest.raises(errors.BadValueError, match="needs a numeric priority"):
        h.push({"Msg": "x"})
    with pytest.raises(errors.BadValueError, match="element 1 of the batch"):
        h.batch_push([{"priority": 1}, {"priority": "x"}])
    assert h.length() == 0


def test_limits(db):
    h = db.create_bucket("H", type="heap")
    with pytest.raises(errors.LimitExceededError, match="at most 100"):
        h.pop(101)
    with pytest.raises(errors.LimitExceededError, match="at most 1000"):
        h.peek({"limit": 1001})
    assert h.pop() is None and h.peek() is None and h.pop({"limit": 5}) == []


def test_rebuilt_on_open(tmp_path):
    with hoarddb.open(tmp_path) as c:
        h = c["app"].create_bucket("H", type="heap")
        h.batch_push([{"priority": p} for p in [4, 9, 1, 9, 6]])
        h.pop()
    with hoarddb.open(tmp_path) as c:
        h = c["app"].H
        assert h.length() == 4
        assert h.peek() == {"priority": 9}
        assert [d["priority"] for d in h.pop(10)] == [9, 6, 4, 1]


@given(st.lists(st.tuples(st.booleans(), st.integers(-5, 5)), max_size=60))
def test_matches_a_sorted_model(tmp_path_factory, steps):
    with hoarddb.open(tmp_path_factory.mktemp("h")) as c:
        h = c["app"].create_bucket("H", type="heap")
        model, n = [], 0
        for is_push, p in steps:
            if is_push:
                h.push({"priority": p, "n": n})
                model.append((-p, n))
                n += 1
            else:
                got = h.pop()
                if not model:
                    assert got is None
                else:
                    model.sort()
                    neg, seq = model.pop(0)
                    assert (got["priority"], got["n"]) == (-neg, seq)
        assert h.length() == len(model)


# -- the store's write lock, then the heap's mutex: one order on every path --------------------

def _on_a_thread(fn) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)  # (daemon: a deadlocked one must not keep pytest alive)
    thread.start()
    return thread


@pytest.mark.parametrize("verb", ["push", "pop", "claim"])
def test_a_heap_write_outside_a_group_waits_for_a_group_on_another_thread_without_a_deadlock(tmp_path, verb):
    """Regression test: a server's write group takes the store's write lock (and the commit
    lock), then the heap's mutex in the verb; a heap write outside a group took the mutex
    first, then the write lock. Run at once on two threads, each waited for the other.

    The steps are driven: a held commit (commits_deferred) keeps the group waiting for the
    commit lock while it holds the write lock, the write outside the group then starts and
    waits for the write lock, and the held commit ends."""
    engine = Engine(tmp_path / "data", Options(sync=False))
    engine.execute({"op": "create_bucket", "db": "app", "bucket": "H", "options": {"type": "heap"}})

    def request(op, **args):
        return {"op": op, "db": "app", "bucket": "H", "args": args}

    engine.execute(request("batch_push", docs=[{"priority": p} for p in range(10)]))
    store = engine._stores[("app", "H")]
    group = [request("push", doc={"priority": 20}), request("push", doc={"priority": 21})]
    answers: list = []
    with engine.commits_deferred():
        engine.execute(request("push", doc={"priority": 30}))  # its commit, and the commit lock, held to the end
        grouping = _on_a_thread(lambda: answers.extend(engine.execute_group(group)))
        deadline = time.monotonic() + 10
        while store._wlock.acquire(blocking=False):  # until the group holds the write lock
            store._wlock.release()
            assert time.monotonic() < deadline, "the group never took the store's write lock"
            time.sleep(0.001)
        outside = request(verb, **({"doc": {"priority": 40}} if verb == "push" else {}))
        alone = _on_a_thread(lambda: answers.append(engine.execute(outside)))
        time.sleep(0.3)  # it reaches the write lock and waits there
    # The commit lock is free: the group goes on and calls the heap's verbs, then ends.
    deadline = time.monotonic() + 10
    for thread in (grouping, alone):
        thread.join(max(0.0, deadline - time.monotonic()))
    if grouping.is_alive() or alone.is_alive():  # (the engine is left open: closing it would wait for them too)
        pytest.fail("deadlock: the group waits for the heap's mutex, the write outside it for the store's "
                    "write lock; both must take the write lock first")
    assert len(answers) == 3 and all(a["ok"] == 1 for a in answers), answers
    assert engine.execute(request("length"))["result"] == (14 if verb == "push" else 12)
    engine.close()
