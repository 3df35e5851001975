"""The heap store through the public API: priority order, ties, limits, rebuild on open."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

import hoarddb
from hoarddb import errors


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
