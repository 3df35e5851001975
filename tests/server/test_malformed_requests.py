"""Malformed requests over the wire: each is refused alone, and other connections' writes of its group are applied once and answered.

Regression test for issue 22: a write whose ``bucket`` was a document failed its whole
group commit (every connection's writes answered INTERNAL_ERROR, most applied anyway);
an ``op`` sent as BSON code, or an unhashable ``db`` of a read, broke the event loop's
dispatch and dropped the connection unanswered; and a malformed request after a good
write on one connection left that write unanswered.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from bson import Code
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hoarddb
from hoarddb.testing import ServerThread
from hoarddb.testing.raw import RawConnection

from ..test_request_validation import applied, check_refusal, good_writes, malformed, setup


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerThread(tmp_path_factory.mktemp("malformed") / "data", insecure=True, busy_poll=0) as s:
        with hoarddb.connect(s.url(), timeout=30) as c:
            setup(c)
        yield s


@pytest.fixture
def no_errors_logged(caplog):
    caplog.set_level(logging.ERROR)
    yield
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def _connect(server) -> RawConnection:
    raw = RawConnection("127.0.0.1", server.port, timeout=30)
    assert raw.hello()["ok"] == 1
    return raw


def _answers(raw: RawConnection, n: int) -> dict:
    out = {}
    while len(out) < n:
        answer = raw.recv_doc()
        assert answer is not None, f"the server closed the connection after {len(out)} of {n} answers"
        out[answer["id"]] = answer
    return out


def _send_all(raw: RawConnection, requests: list[dict], first_id: int = 1) -> threading.Thread:
    """Send requests (ids from first_id) from a thread: a long pipeline fills the socket's buffers."""
    thread = threading.Thread(target=lambda: [raw.send_doc({"id": first_id + i, **r}) for i, r in enumerate(requests)])
    thread.start()
    return thread


def _queued_writes(server) -> int:
    return server.call(lambda: len(server.server.committer._writes))


def test_malformed_requests_fail_alone_beside_other_connections_writes_in_one_group(server, no_errors_logged):
    bad = malformed(server=True)
    good_a, good_b = good_writes("a", 50), good_writes("b", 50)
    own = good_writes("c", 1)  # the bad connection's own writes, before and after its malformed requests
    with _connect(server) as blocker, _connect(server) as a, _connect(server) as b, _connect(server) as c:
        lock = server.server.engine._group_lock
        lock.acquire()  # the groups wait: what the connections send now gathers into one
        try:
            blocker.send_doc({"id": 1, **good_writes("blocker", 1)[0]})
            deadline = time.monotonic() + 30
            while not server.call(lambda: server.server.committer._running):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            senders = [_send_all(a, good_a), _send_all(b, good_b),
                       _send_all(c, [own[0], *[r for r, _, _ in bad], own[1]])]
            while _queued_writes(server) < len(good_a) + len(good_b) + 1:
                assert time.monotonic() < deadline, _queued_writes(server)
                time.sleep(0.01)
        finally:
            lock.release()
        assert _answers(blocker, 1)[1]["ok"] == 1
        for raw, sent in ((a, good_a), (b, good_b)):
            answers = _answers(raw, len(sent))
            assert all(answers[i + 1]["ok"] == 1 for i in range(len(sent))), answers
        answers = _answers(c, len(bad) + 2)
        for thread in senders:
            thread.join()
        assert answers[1]["ok"] == 1 and answers[len(bad) + 2]["ok"] == 1
        for i, (_request, what, codes) in enumerate(bad):
            check_refusal(answers[i + 2], what, codes)
    with hoarddb.connect(server.url(), timeout=30) as client:
        pushes, keys = applied(client)
        for tag, sent in (("a", good_a), ("b", good_b), ("c", own)):
            assert [p for p in pushes if p.startswith(tag) and p[1:].isdigit()] == \
                [r["args"]["doc"]["w"] for r in sent[::2]]
            assert [k for k in keys if k.startswith(tag) and k[1:].isdigit()] == \
                sorted(r["args"]["doc"]["_id_"] for r in sent[1::2])


def test_a_pipeline_with_a_malformed_write_is_answered_in_full(server, no_errors_logged):
    # The pipeline, and the same with the bad one a read: every request answered,
    # the good writes once each.
    with _connect(server) as raw:
        pipeline = [
            {"op": "push", "db": "app", "bucket": "GoodQ", "args": {"doc": {"w": "pipe"}}},
            {"op": "insert", "db": "app", "bucket": "Good", "args": {"doc": {"_id_": "pipe-a"}}},
            {"op": "insert", "db": "app", "bucket": {}, "args": {"doc": {"_id_": "pipe-x"}}},
            {"op": "insert", "db": "app", "bucket": "Good", "args": {"doc": {"_id_": "pipe-b"}}},
            {"op": "get", "db": ["app"], "bucket": "Good", "args": {"key": "pipe-a"}},
            {"op": Code("get"), "db": "app", "bucket": "Good", "args": {"key": "pipe-a"}},
            {"op": "get", "db": "app", "bucket": "Good", "args": {"key": "pipe-b"}},
        ]
        for i, request in enumerate(pipeline):
            raw.send_doc({"id": i, **request})
        answers = _answers(raw, len(pipeline))
    assert [answers[i].get("codeName", "ok") for i in range(len(pipeline))] == \
        ["ok", "ok", "INVALID_NAME", "ok", "INVALID_NAME", "INVALID_ARGUMENT", "ok"]
    assert answers[6]["result"] == {"_id_": "pipe-b"}
    assert "'bucket' must be a string" in answers[2]["message"]
    with hoarddb.connect(server.url(), timeout=30) as client:
        pushes, keys = applied(client)
        assert pushes.count("pipe") == 1 and keys.count("pipe-a") == 1 and "pipe-x" not in keys


_round = iter(range(10**9))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), min_size=1, max_size=12),
                min_size=2, max_size=4))
def test_good_and_malformed_requests_from_several_connections(server, plans):
    bad = malformed(server=True)
    n = next(_round)
    raws = [_connect(server) for _ in plans]
    sent: list[list[tuple[dict, bool]]] = []
    try:
        for k, (raw, plan) in enumerate(zip(raws, plans)):
            mine = []
            for i, (is_good, pick) in enumerate(plan):
                request = good_writes(f"h{n}.{k}.{i}-", 1)[pick % 2] if is_good else bad[pick % len(bad)][0]
                mine.append((request, is_good))
            sent.append(mine)
        senders = [_send_all(raw, [r for r, _ in mine]) for raw, mine in zip(raws, sent)]
        for raw, mine in zip(raws, sent):
            answers = _answers(raw, len(mine))
            for i, (request, is_good) in enumerate(mine):
                answer = answers[i + 1]
                if is_good:
                    assert answer["ok"] == 1, (request, answer)
                else:
                    assert answer["ok"] == 0 and answer["codeName"] != "INTERNAL_ERROR", (request, answer)
        for thread in senders:
            thread.join()
    finally:
        for raw in raws:
            raw.close()
    with hoarddb.connect(server.url(), timeout=30) as client:
        pushes, keys = applied(client)
    goods = [r["args"]["doc"] for mine in sent for r, ok in mine if ok]
    prefix = f"h{n}."
    assert sorted(p for p in pushes if p.startswith(prefix)) == sorted(d["w"] for d in goods if "w" in d)
    assert [k for k in keys if k.startswith(prefix)] == sorted(d["_id_"] for d in goods if "_id_" in d)
