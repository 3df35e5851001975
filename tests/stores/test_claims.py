"""claim/ack on fifo and heap buckets: every verb and refusal, leases, dead letters, restarts and kills.

Most tests run on both claimable types (the ``kind`` fixture). Elements are
``{priority: -i, i: i}``, so a heap's priority order is the push order and one
expectation serves both. Leases are measured on ``hoarddb.stores.claims.clock``, which
the ``clock`` fixture replaces with a clock the test moves; the tests with real
processes use real time, short leases and bounded waits.
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import hoarddb
from hoarddb import errors
from hoarddb.options import Options
from hoarddb.stores import claims
from hoarddb.stores.fifo import FifoStore

from ..killing import REPO, SAY_READY, child_env, kill_midway

SLOW = os.environ.get("HOARDDB_SLOW") == "1"
KINDS = ("fifo", "heap")


def el(i: int) -> dict:
    return {"priority": -i, "i": i}


def ids(docs) -> list[int]:
    return [d["i"] for d in docs]


def claimed(cs) -> list[int]:
    return [c["element"]["i"] for c in cs]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(claims, "clock", c)
    return c


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture
def q(db, kind):
    jobs = db.create_bucket("Jobs", type=kind)
    jobs.batch_push([el(i) for i in range(10)])
    return jobs


def answer(client, op: str, bucket: str = "Jobs", **args) -> dict:
    return client.execute({"op": op, "db": "app", "bucket": bucket, "args": args})


# -- claim --------------------------------------------------------------------------------------

def test_claim_hands_out_in_order_and_hides_from_everyone_else(q, clock):
    first = q.claim({"limit": 3, "lease": 10})
    assert claimed(first) == [0, 1, 2]
    assert all(c["deliveries"] == 1 and isinstance(c["claimId"], str) for c in first)
    assert len({c["claimId"] for c in first}) == 3
    assert claimed(q.claim(limit=2)) == [3, 4]  # another claimer gets the next ones
    assert q.peek() == el(5) and ids(q.peek(10)) == [5, 6, 7, 8, 9]
    assert q.length() == 5
    assert ids(q.pop(2)) == [5, 6]  # pop takes ready elements only
    assert ids(q.list()) == [7, 8, 9]


def test_claim_defaults_to_one_element_for_thirty_seconds(q, clock):
    (c,) = q.claim()
    assert c["element"] == el(0)
    clock.tick(29.9)
    assert claimed(q.claim()) == [1]
    clock.tick(0.1)  # 30 s after the first claim
    again = q.claim()
    assert claimed(again) == [0] and again[0]["deliveries"] == 2


def test_claim_on_an_empty_bucket_is_an_empty_list(db, kind):
    jobs = db.create_bucket("Jobs", type=kind)
    assert jobs.claim() == [] and jobs.claim(limit=5) == []


@pytest.mark.parametrize("limit, error", [(0, errors.BadValueError), (101, errors.LimitExceededError),
                                          (-1, errors.BadValueError)])
def test_claim_limit_is_from_1_to_100(q, limit, error):
    with pytest.raises(error, match="claim limit"):
        q.claim(limit=limit)
    assert q.length() == 10


@pytest.mark.parametrize("lease", [0, -1, 86_401, float("nan"), float("inf"), True, "30", [30],
                                   1e-300, 5e-324, 1e-9, 0.0009, 2**62])
def test_lease_is_a_positive_number_of_seconds_up_to_a_day(q, lease):
    with pytest.raises(errors.BadValueError, match="lease is a number of seconds"):
        q.claim(lease=lease)
    assert q.length() == 10


def test_the_shortest_lease_still_hides_the_element(q, clock):
    # A lease below a millisecond vanished when added to the wall clock's ~1e6..1.7e9 seconds:
    # the element was claimable again the moment it was handed out (a second worker got it).
    (c,) = q.claim(lease=claims.MIN_LEASE)
    assert claimed(q.claim(limit=3)) == [1, 2, 3]
    assert q.extend(c["claimId"], claims.MIN_LEASE)["extended"] == 1
    assert claimed(q.claim()) == [4]
    clock.tick(claims.MIN_LEASE)
    assert claimed(q.claim()) == [0]


def test_claim_limit_must_be_an_integer(q):
    with pytest.raises(errors.InvalidArgumentError):
        q.claim(limit="3")


def test_a_lifo_and_the_keyed_types_have_no_claim(db):
    stack = db.create_bucket("Stack", type="lifo")
    users = db.create_bucket("Users", type="hash")
    for bucket in (stack, users):
        with pytest.raises(errors.VerbNotSupportedError, match="has no verb 'claim'"):
            bucket.claim()
        with pytest.raises(errors.VerbNotSupportedError):
            bucket.ack("x")


# -- ack --------------------------------------------------------------------------------------------

def test_ack_removes_for_good_and_twice_is_not_found(q, clock):
    (c,) = q.claim(lease=5)
    assert q.ack(c["claimId"]) == {"acked": 1}
    with pytest.raises(errors.NotFoundError, match="acked already"):
        q.ack(c["claimId"])
    clock.tick(60)
    assert claimed(q.claim(limit=100)) == list(range(1, 10))  # 0 never comes back
    assert q.length() == 0


@pytest.mark.parametrize("bad", ["nope", "00.11", "zz.0011223344556677", "", "0000000000000063.0011223344556677"])
def test_ack_of_an_unknown_claim_id_is_not_found(q, bad):
    q.claim()
    with pytest.raises(errors.NotFoundError, match="no claim"):
        q.ack(bad)


@pytest.mark.parametrize("bad", [5, {"claimId": 1}, [1, 2], None])
def test_ack_takes_claim_id_strings(q, bad):
    with pytest.raises(errors.InvalidArgumentError):
        q.ack(bad)


def test_ack_of_a_list_is_one_write_all_or_none(q, clock):
    cs = q.claim(limit=4, lease=5)
    good = [c["claimId"] for c in cs]
    with pytest.raises(errors.NotFoundError):
        q.ack(good[:2] + ["nope"])
    assert answer(q._database._client, "length")["claimed"] == 4  # nothing was acked
    assert q.ack(good) == {"acked": 4}
    assert q.ack([]) == {"acked": 0}
    with pytest.raises(errors.LimitExceededError):
        q.ack(["x"] * 1001)


def respellings(cid: str) -> list[str]:
    """Other spellings bytes.fromhex reads as the same (element, token): upper case, spaces."""
    key, token = cid.split(".")
    return [f"{key}.{token[:8]} {token[8:]}", f"{key}.{token.upper()}", f"{key} .{token}", f" {cid}"]


@pytest.mark.parametrize("verb", ["ack", "release"])
def test_a_claim_id_is_only_the_string_claim_returned(tmp_path, kind, verb, clock):
    # ack([cid, cid respelled]) acked the one element twice: {acked: 2}, and a heap's stored
    # count of elements dropped by two (length wrong for good; below zero, every pop failed).
    with hoarddb.open(tmp_path / "data") as client:
        jobs = client["app"].create_bucket("Jobs", type=kind)
        jobs.batch_push([el(i) for i in range(3)])
        (c,) = jobs.claim(lease=60)
        for other in respellings(c["claimId"]):
            with pytest.raises(errors.NotFoundError, match="no claim"):
                getattr(jobs, verb)([c["claimId"], other])
            with pytest.raises(errors.NotFoundError, match="no claim"):
                getattr(jobs, verb)(other)
        assert answer(client, "length") == {"ok": 1, "result": 2, "ready": 2, "claimed": 1}
        assert getattr(jobs, verb)([c["claimId"]]) == {verb.rstrip("e") + "ed": 1}
    with hoarddb.open(tmp_path / "data") as client:
        jobs = client["app"].Jobs
        expect = [1, 2] if verb == "ack" else [0, 1, 2]
        assert jobs.length() == len(expect) and jobs.stats()["entries"] == len(expect)
        assert ids(jobs.pop(10)) == expect and jobs.length() == 0 and jobs.pop() is None


def test_a_late_ack_counts_while_no_one_else_claimed_it(q, clock):
    (c,) = q.claim(lease=1)
    clock.tick(5)  # the lease ran out, but the element was not claimed again
    assert q.ack(c["claimId"]) == {"acked": 1}
    assert claimed(q.claim()) == [1]


def test_ack_after_someone_else_claimed_it_is_refused(q, clock):
    (mine,) = q.claim(lease=1)
    clock.tick(2)
    (theirs,) = q.claim(lease=10)
    assert theirs["element"] == mine["element"] and theirs["claimId"] != mine["claimId"]
    with pytest.raises(errors.ClaimExpiredError, match="claimed again") as info:
        q.ack(mine["claimId"])
    assert info.value.code == 32 and info.value.codeName == "CLAIM_EXPIRED"
    assert q.ack(theirs["claimId"]) == {"acked": 1}


# -- lease expiry, release, extend ----------------------------------------------------------------------

def test_expired_leases_come_back_first_in_original_order_with_deliveries(q, clock):
    a = q.claim(limit=2, lease=10)  # 0, 1
    b = q.claim(limit=3, lease=5)  # 2, 3, 4
    q.ack(a[1]["claimId"])
    clock.tick(6)  # b's lease ran out, a's did not
    assert claimed(q.claim(limit=2, lease=10)) == [2, 3]
    clock.tick(5)  # a[0] ran out too; 4 is still ready again
    again = q.claim(limit=4, lease=10)
    assert claimed(again) == [0, 4, 5, 6]
    assert [c["deliveries"] for c in again] == [2, 2, 1, 1]
    del b


def test_leases_run_out_in_real_time(q):
    first = q.claim(limit=3, lease=0.2)
    assert claimed(q.claim(limit=7, lease=0.4)) == [3, 4, 5, 6, 7, 8, 9] and q.length() == 0
    deadline = time.monotonic() + 5
    while True:
        got = q.claim(limit=3, lease=30)
        if got:
            break
        assert time.monotonic() < deadline, "the lease never ran out"
        time.sleep(0.05)
    assert claimed(got) == claimed(first) == [0, 1, 2]
    assert [c["deliveries"] for c in got] == [2, 2, 2]


def test_release_gives_it_back_now_first_and_in_order(q, clock):
    cs = q.claim(limit=3, lease=60)
    assert q.release(cs[2]["claimId"]) == {"released": 1}
    assert q.release([cs[0]["claimId"]]) == {"released": 1}
    assert q.length() == 9 and q.peek() == el(0)
    again = q.claim(limit=3)
    assert claimed(again) == [0, 2, 3] and [c["deliveries"] for c in again] == [2, 2, 1]
    with pytest.raises(errors.ClaimExpiredError):
        q.release(cs[0]["claimId"])
    with pytest.raises(errors.NotFoundError):
        q.release("nope")


def test_extend_renews_the_lease_from_now(q, clock):
    (c,) = q.claim(lease=10)
    clock.tick(8)
    reply = q.extend(c["claimId"], 10)
    assert reply["extended"] == 1 and reply["expiresAt"].timestamp() == pytest.approx(clock.now + 10)
    clock.tick(8)  # 16 s after the claim: still held thanks to the heartbeat
    assert claimed(q.claim()) == [1]
    clock.tick(3)
    assert claimed(q.claim()) == [0]
    with pytest.raises(errors.ClaimExpiredError, match="no longer yours"):
        q.extend(c["claimId"], 10)


def test_extend_of_a_run_out_claim_no_one_took_renews_it(q, clock):
    (c,) = q.claim(lease=1)
    clock.tick(5)
    q.extend(c["claimId"], 30)
    assert claimed(q.claim()) == [1]
    assert q.ack(c["claimId"]) == {"acked": 1}


@pytest.mark.parametrize("seconds", [0, -5, 86_401, "10", None, 1e-300, 1e-9])
def test_extend_refuses_a_bad_lease(q, seconds):
    (c,) = q.claim()
    with pytest.raises((errors.BadValueError, errors.InvalidArgumentError)):
        q.extend(c["claimId"], seconds)


def test_extend_needs_a_claim_id_string(q):
    with pytest.raises(errors.InvalidArgumentError):
        q.extend(["x"], 10)
    with pytest.raises(errors.NotFoundError):
        q.extend("nope", 10)


# -- pop, peek, length, stats, list ----------------------------------------------------------------

def test_pop_takes_run_out_claims_first_and_never_held_ones(q, clock):
    q.claim(limit=2, lease=1)  # 0, 1
    held = q.claim(limit=2, lease=100)  # 2, 3
    clock.tick(2)
    assert q.pop() == el(0)
    assert ids(q.pop(3)) == [1, 4, 5]
    assert ids(q.peek(10)) == [6, 7, 8, 9]
    assert q.ack([c["claimId"] for c in held]) == {"acked": 2}
    assert ids(q.pop(100)) == [6, 7, 8, 9] and q.pop() is None


def test_length_and_peek_say_ready_and_claimed(client, q, clock):
    q.claim(limit=3, lease=5)
    assert answer(client, "length") == {"ok": 1, "result": 7, "ready": 7, "claimed": 3}
    assert answer(client, "peek") == {"ok": 1, "result": el(3), "claimed": 3}
    assert answer(client, "peek", limit=2) == {"ok": 1, "result": [el(3), el(4)], "claimed": 3}
    assert q.length() == 7  # the Python API answers the result
    stats = q.stats()
    assert stats["entries"] == 7 and stats["claimed"] == 3
    clock.tick(5)
    assert answer(client, "length") == {"ok": 1, "result": 10, "ready": 10, "claimed": 0}


def test_a_fifo_never_claimed_from_answers_as_a_plain_queue(client, db):
    jobs = db.create_bucket("Jobs", type="fifo")
    jobs.push(el(0))
    assert answer(client, "length") == {"ok": 1, "result": 1}
    assert jobs.stats()["claimed"] == 0
    assert not (Path(client._executor.path) / "app" / "Jobs" / "claims").exists()


def test_the_shell_shows_the_extra_fields_in_json(client, q):
    from hoarddb.shell import run_script

    out, err = io.StringIO(), io.StringIO()
    code = run_script(client, "db.Jobs.claim({lease: 30, limit: 2}); db.Jobs.length(); db.Jobs.peek()",
                      json_mode=True, out=out, err=err, db="app")
    assert code == 0, err.getvalue()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [c["element"]["i"] for c in lines[0]["result"]] == [0, 1]
    assert lines[1] == {"ok": 1, "result": 8, "ready": 8, "claimed": 2}
    assert lines[2]["claimed"] == 2 and lines[2]["result"]["i"] == 2


def test_heap_claims_follow_priority(db, clock):
    tickets = db.create_bucket("Tickets", type="heap")
    tickets.batch_push([{"priority": p, "n": n} for n, p in enumerate([1, 5, 3, 5, 2])])
    first = tickets.claim(limit=2, lease=1)
    assert [(c["element"]["priority"], c["element"]["n"]) for c in first] == [(5, 1), (5, 3)]
    tickets.push({"priority": 9, "n": 5})
    clock.tick(2)
    # Run-out leases first (in priority order), then the top of the heap.
    assert [c["element"]["n"] for c in tickets.claim(limit=4)] == [1, 3, 5, 2]


def test_export_holds_claimed_elements_too(db, kind, clock):
    jobs = db.create_bucket("Jobs", type=kind)
    jobs.batch_push([el(i) for i in range(7)])
    jobs.claim(limit=3)
    jobs.pop()
    docs, cursor = [], None
    while True:
        page = jobs.export(cursor=cursor, limit=2)
        docs += page["docs"]
        cursor = page["next"]
        if cursor is None:
            break
    assert sorted(ids(docs)) == [0, 1, 2, 4, 5, 6]


# -- concurrency ------------------------------------------------------------------------------------

def test_concurrent_claimers_never_share_an_element(db, kind):
    jobs = db.create_bucket("Jobs", type=kind)
    jobs.batch_push([el(i) for i in range(400)])
    got: list[int] = []
    lock = threading.Lock()

    def worker():
        while True:
            cs = jobs.claim(limit=random.randint(1, 7), lease=60)
            if not cs:
                return
            jobs.ack([c["claimId"] for c in cs])
            with lock:
                got.extend(claimed(cs))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(400)) and jobs.length() == 0


# -- dead letters --------------------------------------------------------------------------------------

@pytest.fixture
def dl(db, kind):
    """A queue with max_deliveries 2 and its dead-letter bucket of the same type."""
    db.create_bucket("JobsFailed", type=kind)
    jobs = db.create_bucket("Jobs", type=kind, max_deliveries=2, dead_letter="JobsFailed")
    jobs.batch_push([el(i) for i in range(4)])
    return jobs


def test_past_max_deliveries_an_element_moves_to_the_dead_letter_bucket(db, dl, clock):
    dl.claim(limit=2, lease=1)  # 0, 1: first delivery
    clock.tick(2)
    again = dl.claim(limit=2, lease=1)  # 0, 1: second delivery
    assert [c["deliveries"] for c in again] == [2, 2]
    clock.tick(2)
    # A third hand-out would pass max_deliveries: 0 and 1 move instead, 2 and 3 are handed out.
    assert claimed(dl.claim(limit=4, lease=10)) == [2, 3]
    dead = db.JobsFailed.peek(10)
    assert ids(dead) == [0, 1]
    assert dead[0]["_deadLetter"]["from"] == "Jobs" and dead[0]["_deadLetter"]["deliveries"] == 2
    assert dead[0]["_deadLetter"]["at"].timestamp() == pytest.approx(clock.now)
    assert dead[0]["priority"] == 0  # the element's own fields are kept
    with pytest.raises(errors.NotFoundError, match="dead-letter"):
        dl.ack(again[0]["claimId"])
    assert dl.length() == 0 and dl.stats()["claimed"] == 2


def test_a_run_out_element_at_max_deliveries_is_neither_ready_nor_poppable(dl, clock):
    for _ in range(2):
        dl.claim(limit=1, lease=1)
        clock.tick(2)
    assert dl.length() == 3 and ids(dl.peek(10)) == [1, 2, 3]
    assert dl.pop() == el(1)


def test_moving_dead_letters_back(db, dl, kind, clock):
    """The snippet of docs/user/queues.md."""
    for _ in range(3):
        dl.claim(limit=1, lease=1)
        clock.tick(2)
    assert ids(db.JobsFailed.list()) == [0]
    # -- as the docs write it
    while (doc := db.JobsFailed.pop()) is not None:
        doc.pop("_deadLetter", None)
        db.Jobs.push(doc)
    # --
    assert db.JobsFailed.length() == 0
    # 1 ran out and comes first; 0 is a new element again: a fifo's tail, a heap's priority 0.
    assert claimed(dl.claim(limit=10)) == ([1, 2, 3, 0] if kind == "fifo" else [1, 0, 2, 3])
    assert dl.length() == 0


def test_a_missing_dead_letter_bucket_leaves_them_held_and_logs(db, kind, clock, caplog):
    jobs = db.create_bucket("Jobs", type=kind, max_deliveries=1, dead_letter="Later")
    jobs.batch_push([el(0), el(1)])
    jobs.claim(lease=1)
    clock.tick(2)
    with caplog.at_level(logging.ERROR, logger="hoarddb.engine"):
        assert claimed(jobs.claim(limit=5)) == [1]
    assert "'Later'" in caplog.text and "stay held" in caplog.text
    assert answer(db._client, "length") == {"ok": 1, "result": 0, "ready": 0, "claimed": 2}
    db.create_bucket("Later", type="lifo")
    assert jobs.claim() == []  # the next claim moves them
    assert ids(db.Later.list()) == [0]


def test_a_dead_letter_bucket_that_refuses_the_elements_leaves_them_held(db, clock, caplog):
    db.create_bucket("Dead", type="heap")  # a fifo's elements carry no priority
    jobs = db.create_bucket("Jobs", type="fifo", max_deliveries=1, dead_letter="Dead")
    jobs.push({"task": "a"})
    jobs.claim(lease=1)
    clock.tick(2)
    with caplog.at_level(logging.ERROR, logger="hoarddb.engine"):
        assert jobs.claim() == []
    assert "priority" in caplog.text
    assert db.Dead.length() == 0 and jobs.stats()["claimed"] == 1


def test_one_element_the_dead_letter_bucket_refuses_holds_back_none_of_the_others(db, clock, caplog):
    db.create_bucket("Dead", type="heap")
    jobs = db.create_bucket("Jobs", type="fifo", max_deliveries=1, dead_letter="Dead")
    jobs.batch_push([{"task": "a", "priority": 1}, {"task": "b"}, {"task": "c", "priority": 3}])
    jobs.claim(limit=3, lease=1)
    clock.tick(2)
    with caplog.at_level(logging.ERROR, logger="hoarddb.engine"):
        assert jobs.claim() == []
    assert "1 element(s) past max_deliveries stay held" in caplog.text and "priority" in caplog.text
    assert sorted(d["task"] for d in db.Dead.peek(10)) == ["a", "c"]
    assert jobs.stats()["claimed"] == 1  # b waits, held, for a bucket that takes it


def test_a_queue_cannot_be_its_own_dead_letter_bucket(db, clock, caplog):
    jobs = db.create_bucket("Jobs", type="fifo", max_deliveries=1, dead_letter="Jobs")
    jobs.push(el(0))
    jobs.claim(lease=1)
    clock.tick(2)
    with caplog.at_level(logging.ERROR, logger="hoarddb.engine"):
        assert jobs.claim() == []
    assert "the queue itself" in caplog.text


@pytest.mark.parametrize("options, match", [
    ({"max_deliveries": 3}, "go together"),
    ({"dead_letter": "X"}, "go together"),
    ({"max_deliveries": 0, "dead_letter": "X"}, "max_deliveries"),
    ({"max_deliveries": "3", "dead_letter": "X"}, "max_deliveries"),
    ({"max_deliveries": True, "dead_letter": "X"}, "max_deliveries"),
    ({"max_deliveries": 3, "dead_letter": "no spaces"}, "invalid dead_letter bucket name"),
])
def test_claim_options_are_checked(db, kind, options, match):
    with pytest.raises((errors.BadValueError, errors.InvalidNameError), match=match):
        db.create_bucket("Jobs", type=kind, **options)
    assert "app" not in db._client.databases()  # nothing of the refused declaration was written


def test_a_lifo_takes_no_claim_options(db):
    with pytest.raises(errors.UnknownOptionError):
        db.create_bucket("Stack", type="lifo", max_deliveries=3, dead_letter="X")


# -- restarts --------------------------------------------------------------------------------------------

def test_claims_survive_close_and_reopen(tmp_path, kind, clock):
    with hoarddb.open(tmp_path / "data") as c:
        jobs = c["app"].create_bucket("Jobs", type=kind)
        jobs.batch_push([el(i) for i in range(6)])
        a = jobs.claim(limit=2, lease=10)
        b = jobs.claim(limit=2, lease=100)
        jobs.ack(a[0]["claimId"])
    with hoarddb.open(tmp_path / "data") as c:
        jobs = c["app"].Jobs
        assert answer(c, "length") == {"ok": 1, "result": 2, "ready": 2, "claimed": 3}
        assert jobs.ack(b[0]["claimId"]) == {"acked": 1}  # claimIds stay valid
        clock.tick(11)
        again = jobs.claim(limit=10)
        assert claimed(again) == [1, 4, 5] and [c["deliveries"] for c in again] == [2, 1, 1]
    with hoarddb.open(tmp_path / "data") as c:
        jobs = c["app"].Jobs
        assert jobs.length() == 0 and jobs.stats()["claimed"] == 4
        clock.tick(200)
        assert claimed(jobs.claim(limit=10)) == [1, 3, 4, 5]  # 0 and 2 were acked


def test_a_claim_killed_before_the_head_moved_is_not_handed_out_twice(tmp_path, monkeypatch, clock):
    """The fifo's claim commits in claims/ first, then moves the log's head; the opener finishes the move."""
    directory = tmp_path / "Jobs"
    directory.mkdir()
    store = FifoStore(directory, {"type": "fifo", "options": {}}, Options())
    store.batch_push([el(i) for i in range(5)])
    monkeypatch.setattr(FifoStore, "_took_fresh", lambda self, fresh: None)  # "killed" after the commit
    assert claimed(store.claim(limit=2)) == [0, 1]
    monkeypatch.undo()
    monkeypatch.setattr(claims, "clock", clock)
    store.close()
    store = FifoStore(directory, {"type": "fifo", "options": {}}, Options())
    assert store.log.popped == 2 and ids(store.list()) == [2, 3, 4]
    assert claimed(store.claim(limit=5, lease=100)) == [2, 3, 4]
    clock.tick(60)
    assert claimed(store.claim(limit=5)) == [0, 1]
    store.close()


def test_sync_off_then_sync_is_durable(tmp_path, kind, clock):
    with hoarddb.open(tmp_path / "data", sync=False) as c:
        jobs = c["app"].create_bucket("Jobs", type=kind)
        jobs.batch_push([el(i) for i in range(3)])
        (x,) = jobs.claim()
        c._executor.sync()
        jobs.ack(x["claimId"])
        c._executor.sync()
    with hoarddb.open(tmp_path / "data") as c:
        clock.tick(100)
        assert claimed(c["app"].Jobs.claim(limit=5)) == [1, 2]


# -- a killed worker -------------------------------------------------------------------------------------

def _wait_for_line(path: Path, child, what: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text()
        for line in text.split("\n")[:-1]:
            if line.startswith(what):
                return line
        assert child.poll() is None, child.stderr.read().decode()
        assert time.monotonic() < deadline, f"the child never said {what!r}"
        time.sleep(0.01)


WORKER = r"""
import sys, time, hoarddb
data, kind, lease = sys.argv[1], sys.argv[2], float(sys.argv[3])
client = hoarddb.open(data) if not data.startswith("hoarddb://") else hoarddb.connect(data)
jobs = client["app"].Jobs
cs = jobs.claim(limit=4, lease=lease)
print("claimed", " ".join(str(c["element"]["i"]) for c in cs), flush=True)
time.sleep(60)  # working on them... until killed
"""


def _kill_a_worker(data: str, kind: str, tmp_path: Path, lease: float) -> list[int]:
    out_path = tmp_path / "worker.out"
    with open(out_path, "wb") as out:
        child = subprocess.Popen([sys.executable, "-c", WORKER, data, kind, str(lease)],
                                 stdout=out, stderr=subprocess.PIPE, cwd=REPO, env=child_env())
    try:
        line = _wait_for_line(out_path, child, "claimed")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stderr.close()
    return [int(w) for w in line.split()[1:]]


def _after_the_lease(jobs, expect: list[int], lease: float) -> None:
    """Claim the others; then, once the killed worker's lease ran out, its elements come back."""
    assert claimed(jobs.claim(limit=6, lease=60)) == [4, 5, 6, 7, 8, 9]
    deadline = time.monotonic() + lease + 10
    while True:
        got = jobs.claim(limit=4, lease=30)
        if got:
            break
        assert time.monotonic() < deadline, "the killed worker's lease never ran out"
        time.sleep(0.05)
    assert claimed(got) == expect and all(c["deliveries"] == 2 for c in got)


def test_a_killed_worker_loses_nothing(tmp_path, kind):
    """The worker holds the database (embedded): it claims, is killed without acking; after the lease all come back."""
    data = tmp_path / "data"
    with hoarddb.open(data) as c:
        c["app"].create_bucket("Jobs", type=kind).batch_push([el(i) for i in range(10)])
    assert _kill_a_worker(str(data), kind, tmp_path, lease=1.0) == [0, 1, 2, 3]
    with hoarddb.open(data) as c:
        jobs = c["app"].Jobs
        assert ids(jobs.peek(10)) == [4, 5, 6, 7, 8, 9]  # still hidden while the lease runs
        _after_the_lease(jobs, [0, 1, 2, 3], 1.0)
        assert answer(c, "length") == {"ok": 1, "result": 0, "ready": 0, "claimed": 10}


def test_a_killed_worker_over_the_wire_loses_nothing(tmp_path, kind):
    """A worker connected to a server is killed; the server (and its other clients) see the elements come back."""
    testing = pytest.importorskip("hoarddb.testing")
    with testing.ServerThread(tmp_path / "data", insecure=True) as server:
        with hoarddb.connect(server.url()) as c:
            jobs = c["app"].create_bucket("Jobs", type=kind)
            jobs.batch_push([el(i) for i in range(10)])
            assert _kill_a_worker(server.url(), kind, tmp_path, lease=0.5) == [0, 1, 2, 3]
            assert answer(c, "length")["claimed"] == 4
            _after_the_lease(jobs, [0, 1, 2, 3], 0.5)


# -- a killed process holding the database ----------------------------------------------------------------

#: The child: push, claim, ack, release, extend and pop in a loop on an embedded database,
#: saying "B ..." before each operation and "A ..." once it returned (or "E" when refused).
CHILD = r"""
import random, sys, hoarddb
from hoarddb.errors import HoardError
data, kind, start, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
client = hoarddb.open(data)
db = client["app"]
try:
    db.create_bucket("Jobs", type=kind)
except HoardError:  # made by an earlier round
    pass
jobs = db.Jobs
held = {}  # i -> claimId

""" + SAY_READY + r"""
i = start
while True:
    r = rng.random()
    try:
        if r < 0.3:
            say(f"B push {i}")
            jobs.push({"priority": -i, "i": i, "pad": "x" * rng.randrange(0, 800)})
            say("A")
            i += 1
        elif r < 0.55:
            n = rng.randrange(1, 6)
            say(f"B claim {n}")
            cs = jobs.claim(limit=n, lease=rng.choice([0.2, 0.5, 2.0]))
            for c in cs:
                held[c["element"]["i"]] = c["claimId"]
            say("A " + " ".join(f"{c['element']['i']}:{c['deliveries']}" for c in cs))
        elif r < 0.8 and held:
            pick = rng.sample(sorted(held), min(len(held), rng.randrange(1, 4)))
            say("B ack " + " ".join(map(str, pick)))
            jobs.ack([held.pop(k) for k in pick] if len(pick) > 1 else held.pop(pick[0]))
            say("A")
        elif r < 0.85 and held:
            k = rng.choice(sorted(held))
            say(f"B release {k}")
            jobs.release(held.pop(k))
            say("A")
        elif r < 0.9 and held:
            k = rng.choice(sorted(held))
            say(f"B extend {k}")
            jobs.extend(held[k], 1.0)
            say("A")
        elif r >= 0.9:
            n = rng.randrange(1, 4)
            say(f"B pop {n}")
            docs = jobs.pop(n)
            say("A " + " ".join(str(d["i"]) for d in docs))
    except HoardError as exc:
        say("E " + type(exc).__name__)
"""


def run_kill_test(kind: str, tmp_path: Path, rounds: int, seed: int, monkeypatch) -> None:
    data = tmp_path / "data"
    rng = random.Random(seed)
    present: dict[int, int] = {}  # element -> deliveries so far
    next_id = 0
    far = Clock(time.time() + 10_000_000)
    for round_ in range(rounds):
        said = kill_midway(CHILD, [data, kind, next_id, rng.randrange(2**32)], tmp_path / f"round{round_}.out",
                           rng.uniform(0.05, 0.4))

        # Replay what was acknowledged; only whole lines count.
        in_flight = None
        for line in said:
            words = line.split()
            if words[0] == "B":
                in_flight = words[1:]
                if in_flight[0] == "push":
                    next_id = max(next_id, int(in_flight[1]) + 1)
                continue
            what, args = in_flight[0], in_flight[1:]
            in_flight = None
            if words[0] == "E":
                continue  # refused: all or nothing, so nothing
            if what == "push":
                present[int(args[0])] = 0
            elif what == "claim":
                for pair in words[1:]:
                    k, d = map(int, pair.split(":"))
                    assert k in present, f"round {round_}: claimed {k}, which is not in the queue"
                    assert d == present[k] + 1, f"round {round_}: {k} delivered {d} times, the model says {present[k] + 1}"
                    present[k] = d
            elif what == "ack":
                for k in map(int, args):
                    del present[k]
            elif what == "pop":
                for k in map(int, words[1:]):
                    del present[k]

        # Look at a copy, far in the future, so every lease has run out: claim everything.
        copy = tmp_path / f"copy{round_}"
        shutil.copytree(data, copy, ignore=shutil.ignore_patterns("LOCK"))
        monkeypatch.setattr(claims, "clock", far)
        with hoarddb.open(copy) as c:
            got = []
            while cs := c["app"].Jobs.claim(limit=100, lease=1):
                got += [(x["element"]["i"], x["deliveries"] - 1) for x in cs]
        monkeypatch.undo()
        shutil.rmtree(copy)
        actual = dict(got)
        assert len(actual) == len(got), f"round {round_}: an element is in the queue twice: {sorted(got)}"

        what = in_flight[0] if in_flight else None
        args = [int(w) for w in in_flight[1:]] if in_flight else []
        lost = set(present) - set(actual)
        extra = set(actual) - set(present)
        if what == "push":
            assert extra <= set(args) and not lost, (round_, lost, extra)
        elif what == "ack":
            assert lost <= set(args) and not extra, (round_, lost, extra)
        elif what == "pop":
            assert len(lost) <= args[0] and not extra, (round_, lost, extra)
        else:
            assert not lost and not extra, f"round {round_}: lost {sorted(lost)}, came back {sorted(extra)}"
        bumped = {k for k in actual if k in present and actual[k] != present[k]}
        if what == "claim":
            assert len(bumped) <= args[0] and all(actual[k] == present[k] + 1 for k in bumped), (round_, bumped)
        else:
            assert not bumped, f"round {round_}: deliveries changed for {sorted(bumped)}"
        present = actual


def test_a_killed_process_loses_no_claim_and_brings_back_no_ack(tmp_path, kind, monkeypatch):
    run_kill_test(kind, tmp_path, rounds=5, seed=11, monkeypatch=monkeypatch)


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="set HOARDDB_SLOW=1 for the long kill test")
def test_a_killed_process_loses_no_claim_and_brings_back_no_ack_long(tmp_path, kind, monkeypatch):
    run_kill_test(kind, tmp_path, rounds=100, seed=12, monkeypatch=monkeypatch)


# -- a stateful model ---------------------------------------------------------------------------------------

MAX_DELIVERIES = 2


class Model:
    """The queue as a few dicts: what claim, ack, release, extend, pop and peek must do."""

    def __init__(self, kind: str):
        self.kind = kind
        self.order: dict[int, tuple] = {}  # element -> its place in pop order
        self.records: dict[int, dict] = {}  # element -> {cid, deliveries, expires}
        self.never: set[int] = set()  # elements never claimed
        self.dead_letters: list[int] = []

    def push(self, i: int, priority: int) -> None:
        self.order[i] = (i,) if self.kind == "fifo" else (-priority, i)
        self.never.add(i)

    def _sorted(self, keys) -> list[int]:
        return sorted(keys, key=self.order.__getitem__)

    def observe(self, now: float) -> None:
        """What every verb does first: leases that ran out by ``now`` have run out. For good:
        a clock that goes back does not hand a lease back (until a reopen measures again)."""
        for r in self.records.values():
            r["out"] = r["out"] or r["expires"] <= now

    def ready_again(self, now: float) -> list[int]:
        self.observe(now)
        return self._sorted(k for k, r in self.records.items() if r["out"] and r["deliveries"] < MAX_DELIVERIES)

    def dead(self, now: float) -> list[int]:
        self.observe(now)
        return self._sorted(k for k, r in self.records.items() if r["out"] and r["deliveries"] >= MAX_DELIVERIES)

    def next_ready(self, now: float, n: int) -> list[int]:
        return (self.ready_again(now) + self._sorted(self.never))[:n]

    def held(self, now: float) -> int:
        return len(self.records) - len(self.ready_again(now))

    def find(self, cid: str) -> int | None:
        for k, r in self.records.items():
            if r["cid"] == cid:
                return k
        return None

    def remove(self, k: int) -> None:
        self.records.pop(k, None)
        self.never.discard(k)
        del self.order[k]


@pytest.mark.parametrize("kind", KINDS)
def test_against_a_model(kind):
    clock = Clock()

    class ClaimMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.saved = claims.clock
            claims.clock = clock
            self.directory = Path(tempfile.mkdtemp(prefix="hoarddb-claims-"))
            self.client = hoarddb.open(self.directory, sync=False)
            self.db = self.client["app"]
            self.db.create_bucket("Dead", type="fifo")
            self.jobs = self.db.create_bucket("Jobs", type=kind, max_deliveries=MAX_DELIVERIES, dead_letter="Dead")
            self.model = Model(kind)
            self.next = 0
            self.cids: list[str] = []  # every claimId handed out, stale ones too

        @rule(priorities=st.lists(st.integers(0, 3), min_size=1, max_size=8))
        def push(self, priorities):
            self.jobs.batch_push([{"priority": p, "i": self.next + k} for k, p in enumerate(priorities)])
            for k, p in enumerate(priorities):
                self.model.push(self.next + k, p)
            self.next += len(priorities)

        @rule(n=st.integers(1, 6), lease=st.sampled_from([1, 2.5, 5]))
        def claim(self, n, lease):
            m, now = self.model, clock.now
            want = m.next_ready(now, n)
            dead = m.dead(now)
            got = self.jobs.claim(limit=n, lease=lease)
            assert claimed(got) == want
            for c in got:
                k = c["element"]["i"]
                d = m.records[k]["deliveries"] + 1 if k in m.records else 1
                assert c["deliveries"] == d
                m.never.discard(k)
                m.records[k] = {"cid": c["claimId"], "deliveries": d, "expires": now + lease, "out": False}
                self.cids.append(c["claimId"])
                event(f"delivery {min(d, MAX_DELIVERIES)}")
            for k in dead:  # the engine moved them
                event("dead-lettered")
                m.dead_letters.append(k)
                m.remove(k)

        def _refusal(self, cid):
            """The error a claimId the model does not hold gets: stale while its element is
            still in the table under a newer claim, else (or when it is not spelled as claim
            returned it) unknown."""
            element = cid.split(".")[0]
            newer = cid == cid.strip() and " " not in cid and any(
                r["cid"].split(".")[0] == element for r in self.model.records.values())
            return errors.ClaimExpiredError if newer else errors.NotFoundError

        def _call(self, verb, cid, *args):
            """Run ``verb`` on a claimId; the model's element, or None when it must be refused (and was)."""
            self.model.observe(clock.now)
            k = self.model.find(cid)
            if k is None:
                with pytest.raises((errors.NotFoundError, errors.ClaimExpiredError)) as info:
                    getattr(self.jobs, verb)(cid, *args)
                assert type(info.value) is self._refusal(cid), (verb, cid)
                event(f"{verb} refused: {type(info.value).__name__}")
                return None
            getattr(self.jobs, verb)(cid, *args)
            return k

        @precondition(lambda self: self.cids)
        @rule(data=st.data(), verb=st.sampled_from(["ack", "release"]), respell=st.booleans())
        def many(self, data, verb, respell):
            """ack or release a list: all or none; the first bad claimId names the refusal."""
            picks = data.draw(st.lists(st.sampled_from(self.cids), max_size=4))
            if respell and picks:
                picks.append(respellings(picks[0])[0])
            m = self.model
            m.observe(clock.now)
            distinct = list(dict.fromkeys(picks))
            bad = next((cid for cid in distinct if m.find(cid) is None), None)
            if bad is not None:
                with pytest.raises((errors.NotFoundError, errors.ClaimExpiredError)) as info:
                    getattr(self.jobs, verb)(picks)
                assert type(info.value) is self._refusal(bad), (verb, picks)
                event(f"{verb} of a list refused")
                return
            assert getattr(self.jobs, verb)(picks) == {verb.rstrip("e") + "ed": len(distinct)}
            for cid in distinct:
                k = m.find(cid)
                if verb == "ack":
                    m.remove(k)
                else:
                    m.records[k].update(expires=0.0, out=True)
            event(f"{verb} of a list of {min(len(distinct), 2)}+")

        @precondition(lambda self: self.cids)
        @rule(data=st.data())
        def ack(self, data):
            cid = data.draw(st.sampled_from(self.cids))
            k = self._call("ack", cid)
            if k is not None:
                self.model.remove(k)

        @precondition(lambda self: self.cids)
        @rule(data=st.data())
        def release(self, data):
            cid = data.draw(st.sampled_from(self.cids))
            k = self._call("release", cid)
            if k is not None:
                self.model.records[k].update(expires=0.0, out=True)

        @precondition(lambda self: self.cids)
        @rule(data=st.data(), seconds=st.sampled_from([1, 4, 8]))
        def extend(self, data, seconds):
            cid = data.draw(st.sampled_from(self.cids))
            k = self._call("extend", cid, seconds)
            if k is not None:
                self.model.records[k].update(expires=clock.now + seconds, out=False)

        @rule(n=st.integers(1, 3))
        def pop(self, n):
            want = self.model.next_ready(clock.now, n)
            assert ids(self.jobs.pop(n)) == want
            for k in want:
                self.model.remove(k)

        @rule(seconds=st.sampled_from([0.5, 1, 2.5, 6, -0.5, -3]))
        def tick(self, seconds):
            clock.tick(seconds)  # the wall clock may go back (NTP): running leases get longer

        @rule()
        def reopen(self):
            self.client.close()
            self.client = hoarddb.open(self.directory, sync=False)
            self.db = self.client["app"]
            self.jobs = self.db.Jobs
            for r in self.model.records.values():  # the leases are measured again on the clock
                r["out"] = False

        @invariant()
        def peek_and_length(self):
            m, now = self.model, clock.now
            a = answer(self.client, "length")
            ready = len(m.ready_again(now)) + len(m.never)
            assert a["result"] == ready and a.get("claimed", 0) == m.held(now)
            assert ids(self.jobs.peek(20)) == m.next_ready(now, 20)
            assert ids(self.db.Dead.list(limit=1000)) == m.dead_letters
            assert ids(self.jobs.list(limit=1000)) == m._sorted(m.never)  # never handed out
            assert sorted(ids(self.jobs.export(limit=1000)["docs"])) == sorted(m.order)  # claimed ones too

        def teardown(self):
            try:
                self.client.close()
            finally:  # a close that raises must not leave the folder behind in /tmp
                claims.clock = self.saved
                shutil.rmtree(self.directory, ignore_errors=True)

    ClaimMachine.TestCase.settings = settings(max_examples=300 if SLOW else 40, stateful_step_count=50, deadline=None)
    ClaimMachine.TestCase().runTest()


def test_an_empty_list_acks_and_releases_nothing_with_the_same_answer_before_any_claim(db, kind):
    jobs = db.create_bucket("Jobs", type=kind)
    jobs.push(el(0))
    # a bucket never claimed from answers as one that was: {acked: 0}, not an empty document
    assert jobs.ack([]) == {"acked": 0}
    assert jobs.release([]) == {"released": 0}
    with pytest.raises(errors.NotFoundError, match="no claim"):
        jobs.ack(["0000000000000000.0000000000000000"])
    assert jobs.length() == 1
    jobs.claim()
    assert jobs.ack([]) == {"acked": 0}
    assert jobs.release([]) == {"released": 0}
